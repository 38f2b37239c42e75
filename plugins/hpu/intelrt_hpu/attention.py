"""Attention on Gaudi: the bridge's fused SDPA kernel where it is installed (Optimum Habana's choice),
else torch's SDPA; the FlashAttention packages and hub kernels have no ``hpu`` build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from intelrt.plugin import Backend, Decision, Endorsement, PlanError, Situation, attention_fallback

from . import fused_sdpa
from .facts import OPTIMUM_HABANA

OPTIMUM_HABANA_FUSED = ("as Optimum Habana runs Gaudi's models (optimum/habana/transformers/models/llama/"
                        "modeling_llama.py: FusedSDPA in GaudiLlamaAttention; optimum-habana#584)")


def select_attention(backend: Backend, s: Situation) -> Decision:
    fallback = attention_fallback(s.model)
    if fallback is not None:
        return fallback
    if fused_sdpa.kernel_installed():
        settings = fused_sdpa.VARIANTS[fused_sdpa.DEFAULT]
        return Decision(fused_sdpa.DEFAULT, (
            f"Gaudi's fused attention kernel ({fused_sdpa.KERNEL}) through transformers' attention interface, "
            f"{OPTIMUM_HABANA_FUSED}: {settings.describe()}, Optimum Habana's defaults (its --flash_attention_"
            "fast_softmax and --flash_attention_recompute are opt-in: attention='"
            f"{fused_sdpa.DEFAULT}_fast_softmax' / '{fused_sdpa.DEFAULT}_recompute'; attention='sdpa' keeps "
            "torch's SDPA)"), claim="H11")
    return Decision("sdpa", f"torch's scaled_dot_product_attention runs on Gaudi with no extra package; this Gaudi "
                            f"stack has no fused SDPA kernel ({fused_sdpa.KERNEL})")


def check_attention(backend: Backend, value: str, s: Situation) -> Endorsement | None:
    if value in fused_sdpa.VARIANTS:
        if not fused_sdpa.kernel_installed():
            raise PlanError(f"attention={value!r} runs Gaudi's fused SDPA kernel ({fused_sdpa.KERNEL}), which this "
                            "Gaudi software stack does not ship; use attention='sdpa', or a stack that has it")
        return Endorsement(f"Gaudi's fused SDPA kernel, {fused_sdpa.VARIANTS[value].describe()}", claim="H11")
    if value.startswith(("flash_attention", "paged|flash_attention")) or "/" in value:
        raise PlanError(f"attention={value!r} does not run on Gaudi: the FlashAttention packages and hub "
                        f"kernels have no 'hpu' build. Use '{fused_sdpa.DEFAULT}' (Gaudi's fused SDPA, the default "
                        f"where the stack has it), 'sdpa' or 'eager'; Optimum for Intel Gaudi ({OPTIMUM_HABANA}) "
                        "has Gaudi-tuned modeling code")
    return None  # the generic checks read the name


def attention_implementation(name: str) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The fused SDPA function and its mask function for attention ``name`` (``None``: not one of ours)."""
    settings = fused_sdpa.VARIANTS.get(name)
    if settings is None:
        return None
    return fused_sdpa.attention_function(settings), fused_sdpa.mask_function()
