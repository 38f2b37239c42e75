"""Gaudi's fused attention kernel (``habana_frameworks.torch.hpex.kernels.FusedSDPA``) as a transformers
attention implementation, the way Optimum Habana calls it.

Optimum Habana's Llama (``optimum/habana/transformers/models/llama/modeling_llama.py``: the import,
``ModuleFusedSDPA``, and the calls in ``GaudiLlamaAttention``; introduced in optimum-habana#584,
recompute and causal modes in #862) runs attention with ``FusedSDPA.apply(q, k, v, attn_mask,
dropout_p, is_causal, scale, softmax_mode, recompute_mode, …)`` (bridge ``hpex/kernels/FusedSDPA.py``):
the next-token pass (``q_len == 1``) with the mask, ``softmax_mode="None"`` and no recompute; the
prompt with ``softmax_mode="fast"`` only when ``--flash_attention_fast_softmax`` and recompute only
when ``--flash_attention_recompute`` — both opt-in in ``examples/text-generation/run_generation.py``.
In training the bridge's own recompute default holds (on: ``backend/helpers/runtime_config.cpp``,
switched with ``torch.hpu.sdp_kernel(enable_recompute=…)``).

intelrt needs no modeling code for it: the function below is registered in transformers'
``AttentionInterface`` (with sdpa's mask function in ``AttentionMaskInterface``) under the plan's
attention name, so ``from_pretrained(attn_implementation=name)`` uses it in every model transformers
routes through its attention interface. Each name is one setting of the kernel's switches:
:data:`VARIANTS`. The kernel is looked for without importing the stack (SPEC H3).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .facts import STACK_MODULE

KERNEL = "habana_frameworks.torch.hpex.kernels.FusedSDPA"
_KERNEL_FILE = Path("torch", "hpex", "kernels", "FusedSDPA.py")


@dataclass(frozen=True)
class FusedSdpaSettings:
    """The switches of one fused-SDPA attention implementation."""

    softmax_mode: str
    """The prompt pass's softmax: ``"None"`` (exact) or ``"fast"`` (Optimum Habana's ``--flash_attention_fast_softmax``);
    the next-token pass always runs ``"None"``, as Optimum Habana's does."""
    recompute: bool
    """Recompute in the inference prompt pass (``--flash_attention_recompute``: memory for speed). Training
    keeps the bridge's default (recompute on)."""

    def describe(self) -> str:
        return (f"softmax_mode={self.softmax_mode!r} in the prompt pass ('None' for the next token), recompute "
                f"{'on' if self.recompute else 'off'} in inference (the bridge's default, on, in training)")


DEFAULT = "intelrt_hpu_fused_sdpa"
VARIANTS = {
    DEFAULT: FusedSdpaSettings("None", False),  # Optimum Habana's defaults
    f"{DEFAULT}_fast_softmax": FusedSdpaSettings("fast", False),
    f"{DEFAULT}_recompute": FusedSdpaSettings("None", True),
    f"{DEFAULT}_fast_softmax_recompute": FusedSdpaSettings("fast", True),
}
"""``attention=`` names of Gaudi's fused SDPA, each with its switches."""


def kernel_installed() -> bool:
    """Whether the installed Gaudi stack has the fused SDPA kernel — found as a file, without
    importing ``habana_frameworks`` (which would load the stack before int64 support is set, H3)."""
    try:
        spec = importlib.util.find_spec(STACK_MODULE)
    except (ImportError, ValueError):
        return False
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    return any((Path(root) / _KERNEL_FILE).is_file() for root in roots)


def attention_function(settings: FusedSdpaSettings) -> Callable[..., tuple[Any, None]]:
    """The ``AttentionInterface`` function of ``settings`` (imports the kernel: call it at load time)."""
    kernel = importlib.import_module(KERNEL).FusedSDPA
    sdpa = importlib.import_module("transformers.integrations.sdpa_attention").sdpa_attention_forward

    def fused_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                   scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:
        if kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
            # a position bias or softcapping is not in the kernel's call: transformers' SDPA path runs them
            return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                        is_causal=is_causal, **kwargs)
        q_len = query.shape[2]
        causal = bool(q_len > 1 and attention_mask is None
                      and (is_causal if is_causal is not None else getattr(module, "is_causal", True)))
        if causal and key.shape[2] > q_len:  # a prompt into an empty static cache: the causal part is the prompt
            key, value = key[:, :, :q_len], value[:, :, :q_len]
        prompt = q_len > 1
        training = bool(getattr(module, "training", False))
        softmax = settings.softmax_mode if prompt and (not training or causal) else "None"
        recompute = None if training else (settings.recompute and prompt)
        out = kernel.apply(query, key, value, attention_mask, dropout if training else 0.0, causal, scaling,
                           softmax, recompute)
        return out.transpose(1, 2).contiguous(), None

    return fused_sdpa


def mask_function() -> Callable[..., Any]:
    """The mask transformers builds for it: sdpa's (a boolean mask, or ``None`` where causality suffices)."""
    mask: Callable[..., Any] = importlib.import_module("transformers.masking_utils").sdpa_mask
    return mask
