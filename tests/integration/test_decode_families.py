"""The compact decode step on every family it reproduces (issue 18): Gemma-2 and Gemma-3 (soft-caps,
sliding-window layers, scaled embeddings, (1 + weight) norms, sandwich norms, gelu-tanh), Phi-3 (its
own fused q/k/v and gate/up weights, a partial rotary embedding), Mistral with a sliding window
shorter than the sequence, Qwen3-MoE and Mixtral (router top-k, experts).

Each model is the published config of the family (``intelrt.cli.shapes``) at a tiny size, with
varied float32 weights, and prompts longer than its sliding window (6 tokens); every output is
compared token for token with plain ``model.generate`` on the same model, at batch 1 and as a
left-padded batch of three prompts of different lengths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import greedy
import pytest
from varied_weights import vary

import intelrt
from intelrt.cli.shapes import TINY_WINDOW, random_model, save_shape, shape, tiny_config

PROMPTS = ["the cat sat on the mat and then the dog ran over the hill",
           "Intel GPUs are fast",
           "hello there, how are you today my friend"]
NEW_TOKENS = 12

#: Gemma's embeddings, scaled by sqrt(hidden), outweigh its normed blocks in a tiny model: with the
#: LM head tied to them, greedy decoding repeats the prompt's last token, which would prove little.
#: Untied, the output changes token to token. Gemma-2's real caps (50, 30) barely touch tiny
#: logits: smaller ones make them matter.
UNTIED = {"tie_word_embeddings": False}
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma2": ("Gemma-2-2B", {**UNTIED, "attn_logit_softcapping": 8.0, "final_logit_softcapping": 12.0}),
    "gemma3": ("Gemma-3-1B", {**UNTIED, "final_logit_softcapping": 12.0}),
    "phi3": ("Phi-3-mini-4k", {}),
    "phi3-partial-rotary": ("Phi-3-mini-4k", {"partial_rotary_factor": 0.5, "sliding_window": None}),
    "mistral-sliding": ("Mistral-7B-v0.1", {}),
    "qwen3-moe": ("Qwen3-30B-A3B", {"mlp_only_layers": [1]}),  # one dense layer among the experts
    "mixtral": ("Mixtral-8x7B", {"sliding_window": TINY_WINDOW}),
}


#: Weights whose greedy output changes within every row (random MoE models tend to repeat a token).
SEEDS = {"qwen3-moe": 8}


def build(directory: Path, family: str, **overrides: Any) -> Path:
    name, extra = FAMILIES[family]
    seed = SEEDS.get(family, 5)
    config = {**tiny_config(shape(name), vocab_size=384), **extra, **overrides}
    save_shape(directory, config, weights=False)
    import torch

    model = random_model(config, dtype=torch.float32, device="cpu")
    vary(model, seed)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp(request.param), request.param)


def plain_generate(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    return greedy.plain_generate(loaded, prompts, NEW_TOKENS)


def ours(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    return greedy.ours(loaded, prompts, NEW_TOKENS)


def test_prompts_are_longer_than_the_sliding_window_and_outputs_vary(family_model: Path) -> None:
    loaded = intelrt.load(family_model)
    assert min(len(loaded.tokenizer(p)["input_ids"]) for p in PROMPTS) > TINY_WINDOW
    rows = plain_generate(loaded, PROMPTS)
    assert all(len(set(row)) >= 2 for row in rows) and len({t for row in rows for t in row}) >= 8, rows


def test_the_plan_runs_the_family_on_the_compact_step(family_model: Path) -> None:
    plan = intelrt.plan(family_model)
    decode = plan.decided.decode
    assert decode is not None and (decode.method, decode.step) == ("fast", "compact"), plan.decisions["decode"].reason


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["batch1", "padded3"])
def test_compact_step_equals_generate(family_model: Path, prompts: list[str]) -> None:
    loaded = intelrt.load(family_model)
    got = ours(loaded, prompts)
    report = loaded.last_generation
    assert report is not None
    assert (report.path, report.step, report.step_reason, report.notes) == ("fast", "compact", None, [])
    assert got == plain_generate(loaded, prompts)


def test_the_sliding_window_decides_the_output(tmp_path: Path) -> None:
    """The tests above mean something only if a wrong window would change the tokens: the same
    weights with a window longer than the sequence generate something else."""
    narrow = intelrt.load(build(tmp_path / "narrow", "mistral-sliding"))
    wide = intelrt.load(build(tmp_path / "wide", "mistral-sliding", sliding_window=4096))
    assert plain_generate(narrow, PROMPTS) != plain_generate(wide, PROMPTS)
    assert ours(wide, PROMPTS) == plain_generate(wide, PROMPTS)


def test_soft_caps_decide_the_output(tmp_path: Path) -> None:
    capped = intelrt.load(build(tmp_path / "capped", "gemma2"))
    uncapped = intelrt.load(build(tmp_path / "uncapped", "gemma2", attn_logit_softcapping=None,
                                  final_logit_softcapping=None))
    assert plain_generate(capped, PROMPTS) != plain_generate(uncapped, PROMPTS)
    assert ours(uncapped, PROMPTS) == plain_generate(uncapped, PROMPTS)


def test_phi3_reads_its_own_fused_weights(tmp_path: Path) -> None:
    """No second copy: the step's q/k/v and gate/up weights are Phi-3's own parameters."""
    from intelrt.decoding.compact import CompactModel

    loaded = intelrt.load(build(tmp_path, "phi3"))
    compact = CompactModel(loaded.model)
    for layer, module in zip(compact.layers, loaded.model.model.layers, strict=True):
        assert layer.qkv_weight is module.self_attn.qkv_proj.weight
        assert layer.gate_up_weight is module.mlp.gate_up_proj.weight


def test_experts_are_read_in_place_and_follow_changes(tmp_path: Path) -> None:
    """The experts' weights are the model's own (an in-place change is what the next call reads)."""
    import torch

    loaded = intelrt.load(build(tmp_path, "qwen3-moe"))
    before = ours(loaded, PROMPTS[:1])
    with torch.no_grad():
        loaded.model.model.layers[0].mlp.experts.down_proj.mul_(-2.0)
    after = ours(loaded, PROMPTS[:1])
    assert after != before and after == plain_generate(loaded, PROMPTS[:1])


def test_a_long_prompt_runs_the_models_own_experts(tmp_path: Path) -> None:
    """Past ``experts_dense_max_tokens`` the prompt's pass runs the model's own experts code (the
    step's tokens still take the gathered path): the same tokens either way."""
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(build(tmp_path, "mixtral"))
    loaded.decode_tuning = DecodeTuning(experts_dense_max_tokens=8)
    assert ours(loaded, PROMPTS) == plain_generate(loaded, PROMPTS)


@pytest.mark.slow
@pytest.mark.timeout(900)  # inductor on a busy 2-core CPU
@pytest.mark.parametrize("family", ["gemma2", "qwen3-moe", "phi3-partial-rotary"])
def test_compiled_compact_step_equals_generate(tmp_path: Path, family: str, one_torch_thread: None) -> None:
    """compile='inductor' on the CPU: the step traced by inductor, projections as multiply-and-sum
    with the norms folded in (the form used for few rows), experts gathered per token; a padded
    batch of three rows."""
    loaded = intelrt.load(build(tmp_path, family), compile="inductor")
    got = ours(loaded, PROMPTS)
    report = loaded.last_generation
    assert report is not None
    assert (report.compiled, report.step, report.notes) == ("inductor", "compact", [])
    assert got == plain_generate(loaded, PROMPTS)


def test_no_family_keeps_a_second_copy_of_its_weights(family_model: Path) -> None:
    """The fused projections are views of the model's own parameters (Phi-3's are its own fused
    ones, the experts' are read in place): a call adds its KV cache and small buffers, not a
    copy of the q/k/v and gate/up weights (a large share of a tiny model's weights)."""
    from test_decode_weights import assert_no_second_copy

    loaded = intelrt.load(family_model)
    assert_no_second_copy(loaded, len(PROMPTS), lambda: ours(loaded, PROMPTS))
