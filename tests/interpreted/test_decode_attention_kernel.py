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


def reference(qkv: Any, q_norm: Any, k_norm: Any, cos: Any, sin: Any, k_pool: Any, v_pool: Any, tables: Any,
              positions: list[int], q_heads: int, eps: float, scaling: float, window: int = 0, softcap: float = 0.0,
              norm_offset: float = 0.0) -> tuple[Any, Any, Any]:
    """The same attention block written plainly, in float64, one row at a time: each row's
    context rebuilt position by position from the blocks its table lists. Returns (output, the
    pools after the new keys and values are written)."""
    import torch

    rows, _ = qkv.shape
    block, kv_heads, dim = k_pool.shape[1], k_pool.shape[2], k_pool.shape[3]
    k_pool, v_pool = k_pool.clone().double(), v_pool.clone().double()
    q, k, v = qkv.double().split([q_heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = q.view(rows, q_heads, dim), k.view(rows, kv_heads, dim), v.view(rows, kv_heads, dim)
    if q_norm is not None:
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps) * (q_norm.double() + norm_offset)
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps) * (k_norm.double() + norm_offset)
    half = dim // 2

    def rotated(x: Any, row: int) -> Any:
        turned = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos[row].double() + turned * sin[row].double()

    out = torch.zeros(rows, q_heads, dim, dtype=torch.float64)
    groups = q_heads // kv_heads
    for row, position in enumerate(positions):
        block_id = int(tables[row, position // block])
        k_pool[block_id, position % block] = rotated(k[row], row)
        v_pool[block_id, position % block] = v[row]
        first = max(0, position - window + 1) if window else 0
        seen = range(first, position + 1)
        keys = torch.stack([k_pool[int(tables[row, p // block]), p % block] for p in seen])  # (n, kv_heads, dim)
        values = torch.stack([v_pool[int(tables[row, p // block]), p % block] for p in seen])
        for head in range(q_heads):
            scores = keys[:, head // groups] @ (rotated(q[row, head], row) * scaling)
            if softcap:
                scores = torch.tanh(scores / softcap) * softcap
            out[row, head] = scores.softmax(0) @ values[:, head // groups]
    return out.reshape(rows, q_heads * dim), k_pool, v_pool


def random_case(blocks: int, positions: list[int], qk_norm: bool, seed: int, block: int = 16) -> dict[str, Any]:
    """Inputs of one kernel call: one row per position, 6 query heads over 2 key/value heads of 16
    features, a pool of ``blocks`` blocks; each row's table lists distinct blocks in shuffled order
    (so reading through the table, not the rows' order in the pool, is what is checked)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows, q_heads, kv_heads, dim = len(positions), 6, 2, 16
    width = max(positions) // block + 1
    order = torch.randperm(blocks - 1, generator=generator) + 1  # block 0 is the null block
    assert rows * width <= blocks - 1
    tables = order[:rows * width].view(rows, width).long()
    where = torch.tensor(positions, dtype=torch.float32)
    freqs = where[:, None] / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.cat([freqs, freqs], -1)
    slots = torch.tensor([int(tables[r, p // block]) * block + p % block for r, p in enumerate(positions)])
    return {"qkv": torch.randn(rows, (q_heads + 2 * kv_heads) * dim, generator=generator),
            "q_norm": torch.rand(dim, generator=generator) + 0.5 if qk_norm else None,
            "k_norm": torch.rand(dim, generator=generator) + 0.5 if qk_norm else None,
            "cos": angles.cos(), "sin": angles.sin(),
            "k_pool": torch.randn(blocks, block, kv_heads, dim, generator=generator),
            "v_pool": torch.randn(blocks, block, kv_heads, dim, generator=generator),
            "tables": tables, "slots": slots, "positions": positions, "q_heads": q_heads, "dim": dim}


def run_kernel(kernel: ModuleType, case: dict[str, Any], split_target: int = 64, merge_in_kernel: bool = True,
               window: int = 0, softcap: float = 0.0, norm_offset: float = 0.0,
               prefetch: list[Any] | None = None) -> Any:
    import torch

    rows, kv_heads = len(case["positions"]), case["k_pool"].shape[2]
    arrivals = torch.zeros(rows * kv_heads, dtype=torch.int32)
    out = kernel.decode_attention(case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"],
                                  case["k_pool"], case["v_pool"], torch.tensor(case["positions"]), case["slots"],
                                  case["tables"], arrivals, prefetch or [], case["q_heads"], 1e-6,
                                  case["dim"] ** -0.5, split_target, merge_in_kernel, "early", window, softcap,
                                  norm_offset)
    assert not arrivals.any()  # left at zero for the next layer
    return out


@pytest.mark.parametrize("window, softcap, norm_offset, position", [
    (6, 0.0, 0.0, 250), (6, 0.0, 0.0, 3), (40, 0.0, 0.0, 250), (0, 2.0, 0.0, 250), (6, 2.0, 1.0, 120)])
def test_kernel_with_a_sliding_window_soft_cap_and_offset_norms(kernel: ModuleType, window: int, softcap: float,
                                                                 norm_offset: float, position: int) -> None:
    """Sliding-window layers (Mistral, Gemma, Phi-3): only the last ``window`` positions up to the
    new one, split across programs or not; Gemma-2's soft-capped scores; Gemma-3's q/k norms, whose
    weights are offsets from 1. Windows shorter and longer than a split's share of the context."""
    import torch

    positions = [position, max(0, position - 3), 3]
    case = random_case(64, positions, True, seed=window + position)
    expected, k_expected, v_expected = reference(
        case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"], case["k_pool"], case["v_pool"],
        case["tables"], positions, case["q_heads"], 1e-6, case["dim"] ** -0.5, window, softcap, norm_offset)
    out = run_kernel(kernel, case, window=window, softcap=softcap, norm_offset=norm_offset)
    torch.testing.assert_close(case["k_pool"].double(), k_expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    if window or softcap:  # the setting mattered: the plain attention of the same inputs differs
        plain, _, _ = reference(case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"],
                                case["k_pool"], case["v_pool"], case["tables"], positions, case["q_heads"], 1e-6,
                                case["dim"] ** -0.5, 0, 0.0, norm_offset)
        assert not torch.allclose(plain, expected, rtol=1e-3, atol=1e-3) or (window and position < window)


@pytest.mark.parametrize("positions, split_target, merge_in_kernel", [
    ([21, 5, 0], 64, True), ([250, 247, 3], 64, True), ([250, 247, 3], 64, False), ([250, 247, 3], 1, True),
    ([0, 16, 31], 64, True)])
@pytest.mark.parametrize("qk_norm", [True, False])
def test_kernel_equals_torch_attention(kernel: ModuleType, positions: list[int], split_target: int,
                                       merge_in_kernel: bool, qk_norm: bool) -> None:
    """Cases: one split of a row's context and several (some of them empty), merged by the last
    split to finish or by a second kernel; the first position and block boundaries; per-head q/k
    norms (Qwen3) or none (Llama); rows of different lengths, each through its own shuffled blocks."""
    import torch

    case = random_case(64, positions, qk_norm, seed=sum(positions) + split_target)
    untouched = case["v_pool"].clone()
    expected, k_expected, v_expected = reference(
        case["qkv"], case["q_norm"], case["k_norm"], case["cos"], case["sin"], case["k_pool"], case["v_pool"],
        case["tables"], positions, case["q_heads"], 1e-6, case["dim"] ** -0.5)
    # Tensors to prefetch are accepted and change nothing (the interpreter issues no prefetch; the
    # compiled kernel's is checked on a GPU, docs/performance.md).
    prefetch = [torch.randn(64, 32), torch.randn(48)]
    out = run_kernel(kernel, case, split_target, merge_in_kernel, prefetch=prefetch)
    torch.testing.assert_close(case["k_pool"].double(), k_expected, rtol=1e-5, atol=1e-5)  # new keys at their slots
    torch.testing.assert_close(case["v_pool"].double(), v_expected)  # the new values, and nothing else touched
    changed = (case["v_pool"] != untouched).any(-1).any(-1).nonzero()[:, 0].tolist()
    assert sorted(set(changed)) == sorted({int(s) // 16 for s in case["slots"]})
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_decode_loop_with_the_kernel_equals_generate(kernel: ModuleType, tiny_model: Any) -> None:
    """The whole engine on the tiny Qwen3 with the kernel in every layer: one prompt, and three
    prompts of different lengths. The single prompt's context is split, merged by the kernel (one
    arrival-counter buffer serves every layer); few splits, as the interpreter walks the whole
    table once per split."""
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
    """Tuned while the cache is nearly empty, the block must still suit a full context: blocks of
    at least MIN_TUNED_BLOCK slots, or of a split's whole share when that is smaller."""
    kept = kernel._blocks_for_a_full_cache(kernel.CONFIGS, {"max_context": slots}, SPLITS=splits)
    blocks = {c.kwargs["BLOCK"] for c in kept}
    assert min(blocks) >= smallest and max(blocks) == 256
    assert min(blocks) == min(b for b in (16, 32, 64, 128, 256) if b >= smallest)


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "mixtral", "granite"])
def test_decode_loop_with_the_kernel_equals_generate_for_new_families(kernel: ModuleType, family: str,
                                                                      tmp_path: Any) -> None:
    """The kernel inside the loop for Gemma-2 (soft-capped scores, sliding layers), Gemma-3 (q/k
    norms with offset weights, a rotary embedding per layer type), Mixtral (a sliding window
    over experts) and Granite (its attention multiplier as the kernel's scale, between scaled
    embeddings and residuals): a left-padded batch, prompts longer than the window."""
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
