"""Gaudi's own speed features on the simulated stack: FusedSDPA and shape-keyed HPU graphs.

The stand-in ``habana_frameworks.torch.hpex.kernels.FusedSDPA`` takes the real kernel's call (as
Optimum Habana's Llama makes it, ``models/llama/modeling_llama.py`` l.273-308, l.720-768) and
computes torch's SDPA on the CPU; ``wrap_in_hpu_graph`` keeps one graph per input signature, as the
bridge's does, so a test can count the graph compilations a run would pay. The plan-level features
that use them (docs/backends/gaudi-performance.md): the hpu plugin's fused-SDPA attention, run
through transformers' attention interface, and the buckets a Gaudi server warms at load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import intelrt

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}


def _qkv(batch: int, heads: int, kv_heads: int, q_len: int, k_len: int, dim: int = 16,
         grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100 + heads * 10 + q_len)
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    k = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    v = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))  # type: ignore[return-value]


@pytest.mark.claim("H11")
@pytest.mark.parametrize(("heads", "kv_heads", "q_len"), [(4, 4, 7), (8, 2, 5), (4, 1, 9)])  # MHA, GQA, MQA
def test_fused_sdpa_first_and_next_token_calls_as_optimum_habana_makes_them(
        simulate: Any, heads: int, kv_heads: int, q_len: int) -> None:
    sim = simulate("hpu", 1, mode="eager")
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv(2, heads, kv_heads, q_len, q_len)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads not in (1, heads))
    # first token, flash_attention_causal_mask: (q, k, v, None, 0.0, True, None, softmax_mode, recompute, None, "left")
    first = FusedSDPA.apply(q, k, v, None, 0.0, True, None, "fast", True, None, "left")
    torch.testing.assert_close(first, reference)
    # next token: one query against the cache, with a mask (q_len == 1 branch)
    q1 = q[:, :, -1:]
    mask = torch.ones(2, 1, 1, q_len, dtype=torch.bool)
    mask[0, ..., :2] = False  # row 0 has two padding positions on the left
    decode = FusedSDPA.apply(q1, k, v, mask, 0.0, False, None, "None", False, None, "None")
    torch.testing.assert_close(decode, F.scaled_dot_product_attention(
        q1, k, v, attn_mask=mask, enable_gqa=kv_heads not in (1, heads)))
    assert sim.calls.count("hpex.FusedSDPA:softmax=fast,recompute=True,causal=True") == 1
    assert "hpex.FusedSDPA:softmax=none,recompute=False,causal=False" in sim.calls


@pytest.mark.claim("H11")
@pytest.mark.parametrize("side", ["left", "right"])
def test_fused_sdpa_valid_sequence_lengths_hide_each_rows_padding(simulate: Any, side: str) -> None:
    """``valid_seq_len`` with ``is_causal``: each row attends only to its own tokens, as if it were
    unpadded (inference only; the real wrapper asserts it, and so does the stand-in)."""
    simulate("hpu", 1, mode="eager")
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv(2, 4, 2, 6, 6)
    lengths = torch.tensor([6, 3])
    out = FusedSDPA.apply(q, k, v, None, 0.0, True, None, "None", False, lengths, side)
    short = slice(3, 6) if side == "left" else slice(0, 3)
    alone = F.scaled_dot_product_attention(q[1:, :, short], k[1:, :, short], v[1:, :, short], is_causal=True,
                                           enable_gqa=True)
    torch.testing.assert_close(out[1:, :, short], alone)
    torch.testing.assert_close(out[:1], F.scaled_dot_product_attention(q[:1], k[:1], v[:1], is_causal=True,
                                                                       enable_gqa=True))
    with pytest.raises(AssertionError, match="Valid sequence length is supported only in inference"):
        FusedSDPA.apply(q, k, v, torch.ones(2, 1, 6, 6, dtype=torch.bool), 0.0, True, None, "None", False, lengths)


@pytest.mark.claim("H8")
def test_fused_sdpa_trains_with_the_gradients_of_sdpa_and_recompute_on_by_default(simulate: Any) -> None:
    sim = simulate("hpu", 1, mode="eager")
    import habana_frameworks.torch.hpu as hthpu
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    q, k, v = _qkv(2, 8, 2, 5, 5, grad=True)
    FusedSDPA.apply(q, k, v, None, 0.0, True).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]  # type: ignore[union-attr]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
    for mine, theirs in zip(grads, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(mine, theirs)
    assert "hpex.FusedSDPA:softmax=none,recompute=True,causal=True" in sim.calls  # recompute_mode=None → on
    with hthpu.sdp_kernel(enable_recompute=False):
        FusedSDPA.apply(q, k, v, None, 0.0, True)
    assert sim.calls[-1] == "hpex.FusedSDPA:softmax=none,recompute=False,causal=True"
    with pytest.raises(AssertionError, match="Optimized softmax mode is supported in recompute training mode only"):
        FusedSDPA.apply(q, k, v, None, 0.0, False, None, "fast", True)


@pytest.mark.claim("H11")
def test_fused_sdpa_behind_transformers_attention_interface_generates_what_sdpa_generates(
        simulate: Any, tiny_model: Path) -> None:
    """The way the hpu plugin can run FusedSDPA unchanged models with (docs/backends/gaudi-performance.md):
    a function registered in transformers' own ``AttentionInterface`` calling the kernel as Optimum
    Habana does, with sdpa's mask function in ``AttentionMaskInterface``; the tiny Qwen3
    (grouped-query attention) gives sdpa's logits, left-padded batch included."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    sim = simulate("hpu", 1, mode="eager")
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    def fused_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
        out = FusedSDPA.apply(query, key, value, attention_mask, dropout, bool(is_causal if is_causal is not None
                                                                              else causal), scaling, "None", False)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register("test_hpu_fused_sdpa", fused_sdpa)
    AttentionMaskInterface.register("test_hpu_fused_sdpa", sdpa_mask)
    try:
        ids = torch.tensor([[5, 9, 11, 3, 7], [1, 1, 4, 8, 2]])
        mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
        logits = {}
        for name in ("sdpa", "test_hpu_fused_sdpa"):
            model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation=name).eval()
            with torch.no_grad():
                logits[name] = model(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(logits["test_hpu_fused_sdpa"], logits["sdpa"])
        assert any(c.startswith("hpex.FusedSDPA:") for c in sim.calls)
    finally:
        AttentionInterface._global_mapping.pop("test_hpu_fused_sdpa", None)
        AttentionMaskInterface._global_mapping.pop("test_hpu_fused_sdpa", None)


@pytest.mark.claim("H1")
def test_hpu_graphs_capture_once_per_shape_so_unbucketed_lengths_recompile(simulate: Any) -> None:
    """``wrap_in_hpu_graph`` keys its graphs by input shapes: every new prompt length is a new
    graph (a compilation on hardware) unless lengths are padded to a few buckets."""
    sim = simulate("hpu", 1, mode="lazy", torch_fork=True)
    import habana_frameworks.torch as ht

    model = ht.hpu.wrap_in_hpu_graph(torch.nn.Linear(8, 8))
    for length in (5, 6, 7, 5):
        model(torch.ones(1, length, 8))
    assert [c for c in sim.calls if c.startswith("hpu.graph.capture:")] == [
        "hpu.graph.capture:1x5x8", "hpu.graph.capture:1x6x8", "hpu.graph.capture:1x7x8"]
    bucket = 8  # the same three prompts padded to one bucket: one graph
    for length in (5, 6, 7):
        model(F.pad(torch.ones(1, length, 8), (0, 0, 0, bucket - length)))
    assert sim.calls.count("hpu.graph.capture:1x8x8") == 1 and sim.calls.count("hpu.graph.replay:1x8x8") == 2


@pytest.mark.claim("H11")
def test_a_gaudi2_server_plan_lists_its_buckets_and_fused_sdpa(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    plan = intelrt.plan(tiny_model, workload="server")
    attention = plan.decisions["attention"]
    assert "FusedSDPA" in f"{attention.value} {attention.reason}"
    buckets = plan.decisions["buckets"].value
    assert buckets.prompt_lengths and buckets.batch_sizes and buckets.warmup
    assert "vllm-gaudi" in plan.decisions["buckets"].reason


@pytest.mark.claim("H11")
@pytest.mark.parametrize("attention", ["intelrt_hpu_fused_sdpa", "intelrt_hpu_fused_sdpa_fast_softmax_recompute"])
def test_the_planned_fused_sdpa_generates_what_sdpa_generates(simulate: Any, tiny_model: Path, attention: str) -> None:
    """The hpu plugin's own fused-SDPA function, registered by intelrt's load path in transformers'
    AttentionInterface, runs the tiny Qwen3 (grouped-query attention) to sdpa's logits on a left-padded
    batch and to sdpa's greedy tokens, prompt and next-token passes through the stand-in kernel."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import AttentionMaskInterface

    from intelrt.runtime.attention import register_attention

    sim = simulate("hpu", 1, mode="eager", env=INT64)
    plan = intelrt.plan(tiny_model, attention=attention)
    try:
        assert register_attention(plan) is True
        ids = torch.tensor([[5, 9, 11, 3, 7, 2], [1, 1, 1, 4, 8, 2]])
        mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]])
        out = {}
        for name in ("sdpa", attention):
            model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation=name).eval()
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits
                tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                        pad_token_id=1)
            out[name] = (logits, tokens)
        torch.testing.assert_close(out[attention][0], out["sdpa"][0])
        assert torch.equal(out[attention][1], out["sdpa"][1])
        calls = [c for c in sim.calls if c.startswith("hpex.FusedSDPA:")]
        softmax = "fast" if "fast_softmax" in attention else "none"
        recompute = "recompute" in attention
        assert f"hpex.FusedSDPA:softmax={softmax},recompute={recompute},causal=False" in calls  # padded prompt
        assert "hpex.FusedSDPA:softmax=none,recompute=False,causal=False" in calls  # next token, with the mask
    finally:
        AttentionInterface._global_mapping.pop(attention, None)
        AttentionMaskInterface._global_mapping.pop(attention, None)


def test_a_plan_with_buckets_to_warm_runs_every_prompt_bucket_at_load_largest_first(tiny_model: Path) -> None:
    """What load does with a warmed Buckets decision (a Gaudi server's), shown on the CPU with the real
    tiny model: one prompt pass per bucket before the model is handed back, largest first."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from intelrt.hooks.payloads import Buckets
    from intelrt.hooks.plan import PlannedDecision
    from intelrt.runtime.loading import adopt

    plan = intelrt.plan(tiny_model, backend="cpu")
    buckets = Buckets("exponential", (1, 2), (8, 16, 32), (1, 2), (1, 2, 4), 8, 48, warmup=True)
    decisions = {**plan.decisions, "buckets": PlannedDecision("buckets", buckets, "a Gaudi server's", "test", False)}
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    seen: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(lambda _m, _a, kwargs: seen.append(tuple(kwargs["input_ids"].shape)),
                                    with_kwargs=True)
    adopt(model, None, dataclasses.replace(plan, decisions=decisions))
    assert seen == [(1, 32), (2, 16), (1, 16), (2, 8), (1, 8)] == buckets.prompt_shapes()  # (2, 32) > 48 tokens
    seen.clear()
    adopt(model, None, dataclasses.replace(plan, decisions={
        **decisions, "buckets": dataclasses.replace(decisions["buckets"], value=dataclasses.replace(buckets,
                                                                                                warmup=False))}))
    assert seen == []
