"""docs/model-zoo.md: every architecture of the zoo and the path ``Loaded.generate`` takes for it,
with the plan's reason. Rendered from the plans of the zoo's tiny models (pure: no weights loaded).

    PYTHONPATH=tests python -m zoo.table --write     # after a transformers upgrade or a plan change
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import build, sides

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model-zoo.md"
TASK_RESULTS = Path(__file__).resolve().parent / "task_results.json"
"""The outcome of the last complete run of the task zoo (``tests/integration/test_task_zoo.py``
with ``INTELRT_ZOO_RESULTS=1``)."""
TASKS_HEADER = """## Tasks

Every model type of the auto class of each task (issue 26), built as a tiny random float32
checkpoint saved as its hub class: `intelrt.load` loads that class (never a causal LM for a
`…ForConditionalGeneration`, never the bare base model of a head) and answers one batch as plain
transformers does — greedy tokens for the generative tasks, every floating tensor of the forward
within 1e-5 for the others (`tests/integration/test_task_zoo.py`, the integration tier). **plain
fails**: plain transformers itself cannot build or run the tiny model on the zoo's generic inputs
(a vision-language model that needs its images, a config that needs fields the defaults lack);
nothing is compared for it. Rendered from `tests/zoo/task_results.json`, which a complete run writes
(`INTELRT_ZOO_RESULTS=1 pytest tests/integration/test_task_zoo.py`).
"""
HEADER = """# Model zoo

Every causal-LM architecture of the installed transformers, built as a tiny random float32 model,
generates the same tokens through intelrt as through plain transformers — one prompt and a
left-padded batch of three — and every text encoder classifies and embeds as plain transformers
does (`tests/integration/test_model_zoo.py`, in every CI run). This table is generated from intelrt's plans for
those models (`PYTHONPATH=tests python -m zoo.table --write`; a test fails when it is out of date).
Every other task — seq2seq, vision-language, speech, the token, span, choice, image and audio heads —
is [below](#tasks), per task.

Paths: **compact step** — intelrt's fast decode loop running its compact step; **model forward** —
the fast loop running the model's own forward over a static KV cache; **plain generate** —
transformers' `generate`. For a list of prompts: **padded fast**, **padded generate** (padded
batches through the fast loop or `generate`) or **continuous** (transformers' continuous batching).
On an accelerator the same rules decide; the CPU plans shown here compile nothing. A path marked
**falls back** is the plan's, but the model's first call fails on it and every call runs on
`generate` instead (same tokens, no speed-up): known defects of the plan, listed in
`tests/zoo/sides.py` (`FALLS_BACK`) and checked by the test — a planned path that fails anywhere
else fails the test. Vision-language models decode on the fast loop after `generate`'s image
prefill where their language model allows (`tests/integration/test_vision_language_decode.py`).

"""


def _one(plan: Any) -> str:
    decode = plan.decided.decode
    if decode is None or not decode.fast:
        return "plain generate"
    return "compact step" if decode.step == "compact" else "model forward"


def _many(plan: Any) -> str:
    batching = plan.decided.batching
    if batching is None:
        return "—"
    if batching.method == "continuous":
        return "continuous"
    return f"padded {'fast' if batching.engine == 'fast' else 'generate'}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def row(model_type: str, directory: Path) -> str:
    import intelrt

    plan = intelrt.plan(str(directory), dtype="float32")
    arch = plan.model.architecture
    reason = plan.decisions["decode"].reason
    falls = sides.FALLS_BACK.get(model_type)
    one = _one(plan) + (f" (falls back to generate at its first call: {falls})" if falls else "")
    return f"| {model_type} | {arch.name if arch else '—'} | {one} | {_many(plan)} | {_cell(reason)} |"


def render_tasks() -> list[str]:
    """The tasks section: per task, the counts and each model type's class and outcome."""
    import json

    if not TASK_RESULTS.is_file():
        return []
    results = json.loads(TASK_RESULTS.read_text(encoding="utf-8"))
    lines = ["", TASKS_HEADER.rstrip("\n"), "", "| task | model types | identical | differs | fails | plain fails |",
             "| --- | --- | --- | --- | --- | --- |"]
    for task, result in results.items():
        counts = {k: len(v) for k, v in result["outcomes"].items()}
        lines.append(f"| {task} | {sum(counts.values())} | {counts.get('identical', 0)} | {counts.get('differs', 0)} "
                     f"| {counts.get('fails', 0)} | {counts.get('plain fails', 0)} |")
    for task, result in results.items():
        outcome = {m: o for o, models in result["outcomes"].items() for m in models}
        lines += ["", f"### {task}", "", "| model type | class intelrt loads | outcome |", "| --- | --- | --- |"]
        why = result.get("plain_fails", {})
        lines += [f"| {m} | {result['classes'].get(m, '—')} | {outcome[m]}"
                  f"{': ' + _cell(why[m]) if m in why else ''} |" for m in sorted(outcome)]
    return lines


def render(root: Path) -> str:
    lines = [HEADER.rstrip("\n"), "", "## Causal LMs", "",
             "| model type | class | one prompt | a list | why (the plan's decode reason) |",
             "| --- | --- | --- | --- | --- |"]
    for model_type in sides.architectures("causal"):
        skip = sides.skip_reason("causal", model_type)
        if skip is not None:
            lines.append(f"| {model_type} | — | not built | — | {_cell(skip)} |")
            continue
        directory, _info = build.build_causal_lm(model_type, root)
        lines.append(row(model_type, directory))
    return "\n".join(lines + render_tasks()) + "\n"


def models_root() -> Path:
    """Where the zoo's tiny models are cached: beside the embedded tiny model, in intelrt's cache
    (each model is rebuilt when its tiny config changes)."""
    from intelrt.tiny import cache_root

    return cache_root() / "zoo"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOCS}")
    args = parser.parse_args()
    text = render(models_root())
    if args.write:
        DOCS.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
