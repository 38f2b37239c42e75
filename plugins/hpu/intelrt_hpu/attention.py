"""Attention on Gaudi: SDPA runs; the FlashAttention packages and hub kernels have no ``hpu`` build."""

from __future__ import annotations

from intelrt.plugin import Backend, Decision, Endorsement, PlanError, Situation, attention_fallback

from .facts import OPTIMUM_HABANA


def select_attention(backend: Backend, s: Situation) -> Decision:
    return attention_fallback(s.model) or Decision(
        "sdpa", "torch's scaled_dot_product_attention runs on Gaudi with no extra package")


def check_attention(backend: Backend, value: str, s: Situation) -> Endorsement | None:
    if value.startswith(("flash_attention", "paged|flash_attention")) or "/" in value:
        raise PlanError(f"attention={value!r} does not run on Gaudi: the FlashAttention packages and hub "
                        f"kernels have no 'hpu' build. Use 'sdpa' (the default) or 'eager'; Optimum for Intel "
                        f"Gaudi ({OPTIMUM_HABANA}) has Gaudi's fused attention")
    return None  # the generic checks read the name
