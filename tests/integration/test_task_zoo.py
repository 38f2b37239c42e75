"""Every model type transformers ships for each task, through intelrt, against plain transformers
(issue 26; SPEC T1, T3) — the integration tier's zoo.

For each task of ``tests/zoo/tasks.py`` (seq2seq, image-text-to-text, speech seq2seq, CTC, audio
classification, token classification, question answering, fill-mask, multiple choice, image
classification, zero-shot image classification, object detection, semantic segmentation, depth
estimation) and each model type its auto class maps: a tiny random float32 checkpoint saved as its
hub class; ``intelrt.load`` must pick that class (T1) and answer one batch as the checkpoint loaded
by plain transformers answers it — greedy tokens (``Loaded.generate`` with
``return_dict_in_generate``) or every floating tensor of the forward within 1e-5. A model type whose
tiny config or inputs plain transformers itself cannot run is counted "plain fails" and skipped; the
terminal summary counts identical / differing / failing per task (the last two must stay 0).

``INTELRT_ZOO_RESULTS=1`` writes the outcome of a complete run to ``tests/zoo/task_results.json``,
from which ``python -m zoo.table --write`` renders the tasks of ``docs/model-zoo.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from zoo import table, tasks

import intelrt

pytestmark = pytest.mark.integration

SUMMARY: dict[str, dict[str, list[str]]] = {}
"""zoo task → outcome (identical, differs, fails, plain fails) → model types; printed at the end."""
CLASSES: dict[str, dict[str, str]] = {}
"""zoo task → model type → the class intelrt loaded."""
WHY: dict[str, dict[str, str]] = {}
"""zoo task → model type → why plain transformers fails on it (the first line of its error)."""
PARAMS = [(task, model_type) for task in tasks.TASKS for model_type in tasks.model_types(task)]
WRITE_RESULTS = os.environ.get("INTELRT_ZOO_RESULTS") == "1"
"""Read at collection: the suite's clean environment hides ``INTELRT_*`` variables from the tests."""


def _note(task: str, outcome: str, model_type: str) -> None:
    SUMMARY.setdefault(task, {}).setdefault(outcome, []).append(model_type)


@pytest.fixture(scope="module", autouse=True)
def record_results() -> Any:
    yield
    if WRITE_RESULTS and sum(len(v) for o in SUMMARY.values() for v in o.values()) \
            == len(PARAMS):
        results = {task: {"outcomes": {k: sorted(v) for k, v in sorted(SUMMARY[task].items())},
                          "classes": dict(sorted(CLASSES.get(task, {}).items())),
                          "plain_fails": dict(sorted(WHY.get(task, {}).items()))} for task in tasks.TASKS}
        table.TASK_RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def zoo_root() -> Path:
    return table.models_root()


def _plain_or_skip(task: str, model_type: str, run: Any) -> Any:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - plain transformers itself fails: nothing to compare with
        _note(task, "plain fails", model_type)
        first = (str(exc).strip().splitlines() or [""])[0]
        WHY.setdefault(task, {})[model_type] = f"{type(exc).__name__}: {first}"[:120]
        pytest.skip(f"plain transformers fails on {model_type}: {type(exc).__name__}: {str(exc)[:160]}")


def _ours(task: str, model_type: str, run: Any) -> Any:
    try:
        return run()
    except Exception:
        _note(task, "fails", model_type)
        raise


def _intelrt_outputs(task: str, loaded: Any, batch: dict[str, Any]) -> list[Any]:
    import torch

    if tasks.TASKS[task].compare == "generate":
        out = loaded.generate(**batch, do_sample=False, max_new_tokens=tasks.NEW_TOKENS, return_dict_in_generate=True)
        return [out.sequences]
    with torch.inference_mode():
        result = loaded.model(**batch)
    values = result.values() if hasattr(result, "values") else [result]
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


@pytest.mark.parametrize(("task", "model_type"), PARAMS, ids=[f"{t}-{m}" for t, m in PARAMS])
def test_every_model_of_every_task_answers_as_plain_transformers(task: str, model_type: str,
                                                                 zoo_root: Path) -> None:
    import torch
    import transformers

    torch.set_num_threads(1)
    directory, _info, built = _plain_or_skip(task, model_type, lambda: tasks.build_model(task, model_type, zoo_root))
    auto = getattr(transformers, tasks.TASKS[task].auto_class)
    # the plain side: the model as transformers built it (what the checkpoint holds), else as it loads it
    plain = built if built is not None else _plain_or_skip(
        task, model_type, lambda: auto.from_pretrained(directory, dtype=torch.float32).eval())
    batch = _plain_or_skip(task, model_type, lambda: tasks.inputs(task, plain))
    expected = _plain_or_skip(task, model_type, lambda: tasks.outputs(task, plain, batch))
    loaded = _ours(task, model_type, lambda: intelrt.load(str(directory), dtype="float32"))
    CLASSES.setdefault(task, {})[model_type] = type(loaded.model).__name__
    if type(loaded.model) is not type(plain):
        _note(task, "differs", model_type)
        pytest.fail(f"intelrt loaded {type(loaded.model).__name__}, the checkpoint is a {type(plain).__name__} "
                    f"(plan: task {loaded.plan.task!r}, {loaded.plan.decisions['task'].reason})")
    got = _ours(task, model_type, lambda: _intelrt_outputs(task, loaded, batch))
    difference = tasks.same(got, expected)
    if difference is not None and built is not None:  # judge by the checkpoint as plain transformers loads it
        reloaded = auto.from_pretrained(directory, dtype=torch.float32).eval()
        difference = tasks.same(got, tasks.outputs(task, reloaded, batch))
    _note(task, "differs" if difference else "identical", model_type)
    assert difference is None, difference
