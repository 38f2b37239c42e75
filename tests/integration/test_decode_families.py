"""The compact decode step on every family it reproduces (issues 18 and 31): Gemma-2 and Gemma-3
(soft-caps, sliding-window layers, scaled embeddings, (1 + weight) norms, sandwich norms, gelu-tanh),
Phi-3 (its own fused q/k/v and gate/up weights, a partial rotary embedding), Mistral with a sliding
window shorter than the sequence, Qwen3-MoE and Mixtral (router top-k, experts); Granite (µP
multipliers), OLMo-2 and OLMo-3 (norms after each block, q/k norms over whole projections, OLMo-3's
sliding layers and per-layer-type rotary embeddings), SmolLM3 (layers without rotary embedding),
Cohere-2 (attention and MLP in parallel on one LayerNorm, interleaved rotary embedding on sliding
layers only, logit scale), GPT-OSS (attention sinks, biased router, interleaved clamped SwiGLU
experts with biases, YaRN), DeepSeek-V2 and V3 (multi-head latent attention with and without query
compression, complex and interleaved rotary embeddings, shared experts, softmax / grouped sigmoid
routing).

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
    "granite": ("Granite-3.1-2B", {}),
    "olmo2": ("OLMo-2-1B", {}),
    "olmo3": ("OLMo-3-7B", {}),
    "smollm3": ("SmolLM3-3B", {}),
    "cohere2": ("Command-R7B", {}),
    "gpt-oss": ("GPT-OSS-20B", {}),
    "deepseek-v2": ("DeepSeek-V2-Lite", {}),
    "deepseek-v2-grouped": ("DeepSeek-V2-Lite", {"topk_method": "group_limited_greedy", "n_group": 2,
                                                  "topk_group": 1}),
    "deepseek-v3": ("DeepSeek-V3", {}),
    "deepseek-v3-halves": ("DeepSeek-V3", {"rope_interleave": False}),  # rotate_half, not interleaved pairs
}


#: Weights whose greedy output changes within every row (random MoE models tend to repeat a token;
#: Granite's and OLMo-3's tiny embeddings outweigh their blocks for some seeds).
SEEDS = {"qwen3-moe": 8, "granite": 7, "olmo3": 7}


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


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS[1:], PROMPTS], ids=["batch1", "padded2", "padded3"])
def test_compact_step_equals_generate(family_model: Path, prompts: list[str]) -> None:
    loaded = intelrt.load(family_model)
    got = ours(loaded, prompts)
    report = loaded.last_generation
    assert report is not None
    assert (report.path, report.step, report.step_reason, report.notes) == ("fast", "compact", None, [])
    assert got == plain_generate(loaded, prompts)


def test_the_compact_step_computes_the_models_logits(family_model: Path) -> None:
    """Not only their argmax: the compact step's logits after a prompt, and after one more token
    read through its cache, equal the model's own forward's (float32): logit scales greedy
    decoding cannot see (Granite's logits_scaling, Cohere-2's logit_scale) count for sampling."""
    import torch

    from intelrt.decoding.compact import CompactModel, Segment

    loaded = intelrt.load(family_model)
    ids = torch.tensor([loaded.tokenizer(PROMPTS[0])["input_ids"] + [7]])
    length = ids.shape[1]
    compact = CompactModel(loaded.model, backend=loaded.plan.backend)
    block_size = 4  # several blocks per prompt, the table not in block order: the step reads through it
    blocks = -(-length // block_size)
    cache = compact.new_cache(blocks + 2, block_size, "cpu")
    table = torch.arange(blocks + 1, 1, -1)[None]
    positions = torch.arange(length)
    slots = table[0, positions // block_size] * block_size + positions % block_size
    with torch.inference_mode():
        prompt = compact.prefill(ids[:, :-1], positions[None, :-1], slots[:-1],
                                 [Segment(0, length - 1, table, length - 1)], cache.keys, cache.values)
        step = compact.decode(ids[:, -1:], positions[None, -1:], slots[-1:], table, cache.keys, cache.values)
        theirs = loaded.model(input_ids=ids).logits
    torch.testing.assert_close(prompt, theirs[:, -2], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, theirs[:, -1], rtol=1e-4, atol=1e-4)


def test_layers_without_rotary_embedding_decide_the_output(tmp_path: Path) -> None:
    """SmolLM3's NoPE layer (the tiny shape's middle one) changes the tokens: with every layer
    rotating, plain generate says something else, and the compact step follows either way."""
    nope = intelrt.load(build(tmp_path / "nope", "smollm3"))
    rotating = intelrt.load(build(tmp_path / "rope", "smollm3", no_rope_layers=[1, 1, 1]))
    assert plain_generate(nope, PROMPTS) != plain_generate(rotating, PROMPTS)
    assert ours(rotating, PROMPTS) == plain_generate(rotating, PROMPTS)


def test_attention_sinks_are_read_in_place(tmp_path: Path) -> None:
    """GPT-OSS's sinks are the model's own parameters: changed in place, the next call follows."""
    import torch

    loaded = intelrt.load(build(tmp_path, "gpt-oss"))
    before = ours(loaded, PROMPTS)
    with torch.no_grad():
        for layer in loaded.model.model.layers:
            layer.self_attn.sinks.add_(4.0)
    after = ours(loaded, PROMPTS)
    assert after != before and after == plain_generate(loaded, PROMPTS)


@pytest.mark.parametrize("family", ["deepseek-v2", "deepseek-v3"])
def test_latent_attention_caches_one_latent_per_token(tmp_path: Path, family: str) -> None:
    """The cache of a latent-attention layer holds kv_lora_rank + qk_rope_head_dim numbers per token
    (one shared head) and no separate values: not the 2 x heads x head size of expanded keys and values."""
    from intelrt.decoding.compact import CompactModel

    loaded = intelrt.load(build(tmp_path, family))
    config = loaded.model.config
    compact = CompactModel(loaded.model, backend=loaded.plan.backend)
    cache = compact.new_cache(5, 16, "cpu")
    assert all(tuple(k.shape) == (5, 16, 1, config.kv_lora_rank + config.qk_rope_head_dim) for k in cache.keys)
    assert all(v.numel() == 0 for v in cache.values)
    per_token = config.num_hidden_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * 4  # float32
    assert compact.kv_shape().bytes_per_token == per_token and cache.bytes == 5 * 16 * per_token


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
    compact = CompactModel(loaded.model, backend=loaded.plan.backend)
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
@pytest.mark.parametrize("family", ["gemma2", "qwen3-moe", "phi3-partial-rotary", "gpt-oss", "deepseek-v3"])
def test_compiled_compact_step_equals_generate(tmp_path: Path, family: str, one_torch_thread: None) -> None:
    """compile='inductor', warmup='compiled' (at the first call) on the CPU: the step traced by inductor, projections as multiply-and-sum
    with the norms folded in (the form used for few rows), experts gathered per token; a padded
    batch of three rows."""
    loaded = intelrt.load(build(tmp_path, family), compile="inductor", warmup="compiled")
    got = ours(loaded, PROMPTS)
    report = loaded.last_generation
    assert report is not None
    assert (report.compiled, report.step, report.notes) == ("inductor", "compact", [])
    assert got == greedy.eager_generate(loaded, PROMPTS, NEW_TOKENS)


def test_no_family_keeps_a_second_copy_of_its_weights(family_model: Path) -> None:
    """The fused projections are views of the model's own parameters (Phi-3's are its own fused
    ones, the experts' are read in place): a call adds its KV cache and small buffers, not a
    copy of the q/k/v and gate/up weights (a large share of a tiny model's weights)."""
    from test_decode_weights import assert_no_second_copy

    loaded = intelrt.load(family_model)
    assert_no_second_copy(loaded, len(PROMPTS), lambda: ours(loaded, PROMPTS))
