"""The compact step's one-kernel decode attention (``intelrt::decode_attention``), run for real on
the CPU through Triton's interpreter: against attention written in torch operations, and inside
the decode loop against plain ``model.generate`` (issue 6).

Collected only in a process started with ``TRITON_INTERPRET=1`` (Triton reads it when it is first
imported): ``tests/integration/test_decode_attention_kernel.py`` starts that process. float32 only: the
interpreter's bfloat16 dot is not faithful (numpy has no bfloat16); bfloat16 is checked on a GPU
by ``benchmarks/profile_decode.py`` (docs/performance.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from varied_weights import vary

assert os.environ.get("TRITON_INTERPRET") == "1", "run through tests/integration/test_decode_attention_kernel.py"


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    import importlib

    return importlib.import_module("intelrt.decoding.triton_attention")


def reference(qkv: Any, q_norm: Any, k_norm: Any, cos: Any, sin: Any, k_cache: Any, v_cache: Any, slot: int,
              key_mask: Any, q_heads: int, eps: float, scaling: float, window: int = 0, softcap: float = 0.0,
              norm_offset: float = 0.0) -> Any:
    """The same attention block in torch operations: what the kernel must compute."""
    import torch

    from intelrt.decoding.compact import _attend, _rotate_half

    rows, _ = qkv.shape
    kv_heads, slots, dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    q, k, v = qkv.split([q_heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = q.view(rows, q_heads, dim), k.view(rows, kv_heads, dim), v.view(rows, kv_heads, dim)
    if q_norm is not None:
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps) * (q_norm + norm_offset)
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps) * (k_norm + norm_offset)
    q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
    k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
    k_cache[:, :, slot], v_cache[:, :, slot] = k, v
    positions = torch.arange(slots)
    allowed = ((positions <= slot)[None] & key_mask.bool()) | (positions == slot)[None]
    if window:
        allowed = allowed & (positions > slot - window)[None]
    return _attend(q[:, :, None], k_cache, v_cache, allowed[:, None], scaling,
                   softcap or None).reshape(rows, q_heads * dim)


def random_case(slots: int, slot: int, qk_norm: bool, seed: int) -> dict[str, Any]:
    """Inputs of one kernel call: 3 rows, 6 query heads over 2 key/value heads of 16 features;
    rows 1 and 2 left-padded by 4 and 18 slots."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows, q_heads, kv_heads, dim = 3, 6, 2, 16
    positions = torch.tensor([slot, max(0, slot - 3), 3], dtype=torch.float32)
    freqs = positions[:, None] / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.cat([freqs, freqs], -1)
    key_mask = torch.ones(rows, slots, dtype=torch.long)
    key_mask[1, :4] = 0
    key_mask[2, :18] = 0
    return {"qkv": torch.randn(rows, (q_heads + 2 * kv_heads) * dim, generator=generator),
            "q_norm": torch.rand(dim, generator=generator) + 0.5 if qk_norm else None,
            "k_norm": torch.rand(dim, generator=generator) + 0.5 if qk_norm else None,
            "cos": angles.cos(), "sin": angles.sin(),
            "k_cache": torch.randn(rows, kv_heads, slots, dim, generator=generator),
            "v_cache": torch.randn(rows, kv_heads, slots, dim, generator=generator),
            "key_mask": key_mask, "q_heads": q_heads, "dim": dim}


@pytest.mark.parametrize("window, softcap, norm_offset, slot", [
    (6, 0.0, 0.0, 250), (6, 0.0, 0.0, 3), (40, 0.0, 0.0, 250), (0, 2.0, 0.0, 250), (6, 2.0, 1.0, 120)])
def test_kernel_with_a_sliding_window_soft_cap_and_offset_norms(kernel: ModuleType, window: int, softcap: float,
                                                                 norm_offset: float, slot: int) -> None:
    """Sliding-window layers (Mistral, Gemma, Phi-3): only the last ``window`` slots up to the new
    one, split across programs or not; Gemma-2's soft-capped scores; Gemma-3's q/k norms, whose
    weights are offsets from 1. Windows shorter and longer than a split's share of the cache."""
    import torch

    case = random_case(300, slot, True, seed=window + slot)
    dim, q_heads = case.pop("dim"), case.pop("q_heads")
    k_expected, v_expected = case["k_cache"].clone(), case["v_cache"].clone()
    expected = reference(case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"], k_expected,
                         v_expected, slot, case["key_mask"], q_heads, 1e-6, dim ** -0.5, window, softcap, norm_offset)
    arrivals = torch.zeros(3 * 2, dtype=torch.int32)
    out = kernel.decode_attention(case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"],
                                  case["k_cache"], case["v_cache"], torch.tensor([slot]), case["key_mask"], arrivals,
                                  [], q_heads, 1e-6, dim ** -0.5, 64, True, "early", window, softcap, norm_offset)
    assert not arrivals.any()
    torch.testing.assert_close(case["k_cache"], k_expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    if window or softcap:  # the setting mattered: the plain attention of the same inputs differs
        plain = reference(case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"], k_expected.clone(),
                          v_expected.clone(), slot, case["key_mask"], q_heads, 1e-6, dim ** -0.5, 0, 0.0, norm_offset)
        assert not torch.allclose(plain, expected, rtol=1e-3, atol=1e-3) or (window and slot < window)


@pytest.mark.parametrize("slots, slot, split_target, merge_in_kernel", [
    (40, 21, 64, True), (300, 250, 64, True), (300, 250, 64, False), (300, 250, 1, True), (64, 0, 64, True)])
@pytest.mark.parametrize("qk_norm", [True, False])
def test_kernel_equals_torch_attention(kernel: ModuleType, slots: int, slot: int,
                                       split_target: int, merge_in_kernel: bool, qk_norm: bool) -> None:
    """Cases: one split of the cache and several (some of them empty), merged by the last split
    to finish or by a second kernel; the first slot, per-head q/k norms (Qwen3) or none (Llama),
    left padding of different lengths per row."""
    import torch

    generator = torch.Generator().manual_seed(slots + slot)
    rows, q_heads, kv_heads, dim = 3, 6, 2, 16
    qkv = torch.randn(rows, (q_heads + 2 * kv_heads) * dim, generator=generator)
    q_norm = torch.rand(dim, generator=generator) + 0.5 if qk_norm else None
    k_norm = torch.rand(dim, generator=generator) + 0.5 if qk_norm else None
    positions = torch.tensor([slot, max(0, slot - 3), 3], dtype=torch.float32)
    freqs = positions[:, None] / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.cat([freqs, freqs], -1)
    cos, sin = angles.cos(), angles.sin()
    k_cache = torch.randn(rows, kv_heads, slots, dim, generator=generator)
    v_cache = torch.randn(rows, kv_heads, slots, dim, generator=generator)
    key_mask = torch.ones(rows, slots, dtype=torch.long)
    key_mask[1, :4] = 0
    key_mask[2, :18] = 0
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    expected = reference(qkv, q_norm, k_norm, cos, sin, k_expected, v_expected, slot, key_mask, q_heads, 1e-6,
                         dim ** -0.5)
    arrivals = torch.zeros(rows * kv_heads, dtype=torch.int32)
    # Tensors to prefetch are accepted and change nothing (the interpreter issues no prefetch; the
    # compiled kernel's is checked on a GPU, docs/performance.md).
    prefetch = [torch.randn(64, 32, generator=generator), torch.randn(48, generator=generator)]
    out = kernel.decode_attention(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, torch.tensor([slot]),
                                  key_mask, arrivals, prefetch, q_heads, 1e-6, dim ** -0.5, split_target,
                                  merge_in_kernel)
    assert not arrivals.any()  # left at zero for the next layer
    torch.testing.assert_close(k_cache, k_expected, rtol=1e-5, atol=1e-5)  # the new key written at `slot`
    assert torch.equal(v_cache, v_expected)  # the new value, and nothing else touched
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_decode_loop_with_the_kernel_equals_generate(kernel: ModuleType, tiny_model: Any) -> None:
    """The whole loop on the tiny Qwen3 with the kernel in every layer: one prompt, and three
    left-padded prompts of different lengths. The single prompt's cache is split in two, merged
    by the kernel (one arrival-counter buffer serves every layer); few splits, as the interpreter
    walks the whole cache once per split."""
    import torch

    import intelrt
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(tiny_model)
    loaded.decode_tuning = DecodeTuning(attention_splits=4)
    vary(loaded.model, seed=3)
    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "left"
    for prompts in (["Intel GPUs are"], ["Intel GPUs are", "hi", "the cat sat on the mat"]):
        inputs = tokenizer(prompts, return_tensors="pt", padding=True)
        with torch.inference_mode():
            out = loaded.model.generate(**inputs, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                        pad_token_id=tokenizer.pad_token_id)
        expected = out[:, inputs["input_ids"].shape[1]:].tolist()
        got = loaded.generate_ids([tokenizer(p)["input_ids"] for p in prompts], max_new_tokens=12,
                                  eos_token_id=None)
        report = loaded.last_generation
        assert report is not None
        assert (report.step, report.attention_kernel) == ("compact", True)
        assert got == expected


@pytest.mark.parametrize("slots, splits, smallest", [(384, 8, 64), (384, 1, 64), (128, 16, 8)])
def test_autotuning_keeps_blocks_for_the_full_cache(kernel: ModuleType, slots: int, splits: int,
                                                    smallest: int) -> None:
    """Tuned while the cache is nearly empty, the block must still suit the full cache: blocks of
    at least MIN_TUNED_BLOCK slots, or of a split's whole share when that is smaller."""
    dim = 128
    kept = kernel._blocks_for_a_full_cache(kernel.CONFIGS, {"stride_ch": slots * dim, "stride_cl": dim},
                                           SPLITS=splits)
    blocks = {c.kwargs["BLOCK"] for c in kept}
    assert min(blocks) >= smallest and max(blocks) == 256
    assert min(blocks) == min(b for b in (16, 32, 64, 128, 256) if b >= smallest)


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "mixtral"])
def test_decode_loop_with_the_kernel_equals_generate_for_new_families(kernel: ModuleType, family: str,
                                                                      tmp_path: Any) -> None:
    """The kernel inside the loop for Gemma-2 (soft-capped scores, sliding layers), Gemma-3 (q/k
    norms with offset weights, a rotary embedding per layer type) and Mixtral (a sliding window
    over experts): a left-padded batch, prompts longer than the window."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))  # the families' builders live there
    from test_decode_families import PROMPTS, build, ours, plain_generate

    import intelrt
    from intelrt.decoding.tuning import DecodeTuning

    loaded = intelrt.load(build(tmp_path, family))
    loaded.decode_tuning = DecodeTuning(attention_splits=4)
    assert loaded.plan.decided.decode.attention_kernel
    got = ours(loaded, PROMPTS)
    report = loaded.last_generation
    assert report is not None and (report.step, report.attention_kernel) == ("compact", True)
    assert got == plain_generate(loaded, PROMPTS)
