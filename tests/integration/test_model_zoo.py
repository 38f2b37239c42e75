"""Every model that plain transformers runs, intelrt runs — with the same tokens (issue 15).

Every causal-LM architecture of the installed transformers (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``),
built as a tiny random float32 model (``tests/zoo``), generates through ``intelrt.load`` exactly
what plain ``model.generate`` generates, greedy, for one prompt and for a left-padded batch of three
prompts of different lengths. Every text classifier classifies, and every text encoder embeds
(mean-pooled hidden states), as plain transformers does. An architecture that plain transformers
itself cannot run is skipped with the reason, as are the few that are not text models; the
terminal summary counts identical / differing / failing (the last two must stay 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from zoo import build, sides, table

import intelrt

SUMMARY: dict[str, dict[str, list[str]]] = {}
"""kind → outcome (identical, differs, fails, plain fails, skipped) → model types; printed at the end."""


def _note(kind: str, outcome: str, model_type: str) -> None:
    SUMMARY.setdefault(kind, {}).setdefault(outcome, []).append(model_type)


@pytest.fixture(scope="session")
def zoo_root() -> Path:
    return table.models_root()


def _params(kind: str) -> list[Any]:
    return [pytest.param(m, marks=pytest.mark.skip(reason=reason)) if (reason := sides.skip_reason(kind, m))
            else m for m in sides.architectures(kind)]


def _plain_or_skip(kind: str, model_type: str, run: Any) -> Any:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - plain transformers itself fails: nothing to compare with
        _note(kind, "plain fails", model_type)
        pytest.skip(f"plain transformers fails on {model_type}: {type(exc).__name__}: {str(exc)[:160]}")


def _ours(kind: str, model_type: str, run: Any) -> Any:
    try:
        return run()
    except Exception:
        _note(kind, "fails", model_type)
        raise


@pytest.mark.parametrize("model_type", _params("causal"))
def test_causal_lm_generates_what_plain_transformers_generates(model_type: str, zoo_root: Path) -> None:
    directory, _info = build.build_causal_lm(model_type, zoo_root)
    batches = {"one prompt": sides.prompts()[:1], "a padded batch": sides.prompts()}
    expected = _plain_or_skip("causal", model_type, lambda: sides.plain_causal(directory, batches))
    loaded = _ours("causal", model_type, lambda: intelrt.load(str(directory), dtype="float32"))
    got = _ours("causal", model_type, lambda: sides.intelrt_causal(loaded, batches))
    differing = [f"{name}: {ours} != {expected[name]} (path {report.path}: {report.reason})"
                 for name, (ours, report) in got.items() if ours != expected[name]]
    # the same tokens after the planned path failed are not the plan working: the plan must say generate
    fell_back = [f"{name}: {report.reason}" for name, (_ours_tokens, report) in got.items()
                 if report.reason.startswith("the fast decode loop failed")]
    _note("causal", "differs" if differing else "identical", model_type)
    assert not differing, "\n".join(differing)
    if model_type in sides.FALLS_BACK:
        assert fell_back, f"{model_type} no longer falls back: drop it from zoo.sides.FALLS_BACK"
    else:
        assert not fell_back, "\n".join(fell_back)


@pytest.mark.parametrize("model_type", _params("classify"))
def test_classifier_predicts_what_plain_transformers_predicts(model_type: str, zoo_root: Path) -> None:
    directory, _info = build.build_encoder(model_type, "classify", zoo_root)
    expected = _plain_or_skip("classify", model_type, lambda: sides.plain_encoder(directory, "classify"))
    loaded = _ours("classify", model_type, lambda: intelrt.load(str(directory), dtype="float32"))
    got = _ours("classify", model_type, lambda: loaded.classify(sides.texts()))
    _note("classify", "identical" if got == expected else "differs", model_type)
    assert got == expected


@pytest.mark.parametrize("model_type", _params("embed"))
def test_encoder_embeds_what_plain_transformers_embeds(model_type: str, zoo_root: Path) -> None:
    import torch

    directory, _info = build.build_encoder(model_type, "embed", zoo_root)
    expected = _plain_or_skip("embed", model_type, lambda: sides.plain_encoder(directory, "embed"))
    loaded = _ours("embed", model_type, lambda: intelrt.load(str(directory), dtype="float32"))
    got = _ours("embed", model_type, lambda: loaded.embed(sides.texts()))
    same = got.shape == expected.shape and bool(torch.allclose(got, expected, atol=sides.EMBED_ATOL))
    _note("embed", "identical" if same else "differs", model_type)
    assert same, f"largest difference {float((got - expected).abs().max()) if got.shape == expected.shape else '-'}"


def test_the_docs_table_lists_every_architecture_and_its_path(zoo_root: Path) -> None:
    current = (Path(__file__).resolve().parents[2] / "docs" / "model-zoo.md").read_text(encoding="utf-8")
    rendered = table.render(zoo_root)
    assert rendered == current, ("docs/model-zoo.md is out of date: run `PYTHONPATH=tests python -m zoo.table "
                                 "--write` and commit it")


def test_a_remote_code_look_alike_of_llama_does_not_get_llama_arithmetic(zoo_root: Path) -> None:
    """A model whose config says ``model_type: "llama"`` but whose class is its own code (``auto_map``)
    may compute something else: the plan must not run intelrt's compact step (or any fast loop) on it."""
    import json
    import shutil

    source, _info = build.build_causal_lm("llama", zoo_root)
    directory = zoo_root / "remote-llama-look-alike"
    shutil.copytree(source, directory, dirs_exist_ok=True)
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_mine.MyLlamaForCausalLM"}
    (directory / "config.json").write_text(json.dumps(config))
    plan = intelrt.plan(str(directory), trust_remote_code=True)
    decode = plan.decided.decode
    assert decode is not None and not decode.fast
    assert "own code" in plan.decisions["decode"].reason
    assert plan.decided.attention is None  # transformers picks for a class it alone knows
