"""Eager attention for Gemma 2 on Intel GPUs — overriding one decision of one backend.

Gemma 2 soft-caps its attention logits (``config.attn_logit_softcapping``). transformers' SDPA
path cannot apply the cap, so ``Gemma2PreTrainedModel._supports_sdpa`` is False and
``attn_implementation="sdpa"`` is refused when the model loads; the eager path applies the cap
exactly. intelrt falls back to eager for any class without sdpa support by itself; this plugin pins
the choice for Gemma 2 on Intel GPUs with its own reason, answering first (``tryfirst=True``) for
Gemma 2 models on the ``xpu`` backend, and for nothing else:

* another backend or another model family → ``None``: the decision stays with the plugins that
  own it;
* the user chose an attention implementation (``attention="sdpa"``) → ``None``: a forced choice
  is the user's, and intelrt's built-in checks apply to it unchanged.

The module imports nothing heavy: ``import intelrt`` does not import torch, and neither may a
plugin at import time (SPEC C3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from intelrt.plugin import Decision, hookimpl

if TYPE_CHECKING:
    from intelrt.plugin import Backend, ModelInfo, Request

BACKEND = "xpu"
FAMILIES = ("gemma2",)
"""``config.model_type`` values this plugin answers for."""


@hookimpl(tryfirst=True)
def intelrt_select_attention(backend: Backend, request: Request, model: ModelInfo) -> Decision | None:
    """Eager attention for Gemma 2 on Intel GPUs, unless the user chose an implementation."""
    if backend.name != BACKEND or model.model_type not in FAMILIES:
        return None
    if request.is_forced("attention"):
        return None
    return Decision(
        "eager",
        "Gemma 2 soft-caps attention logits, which transformers' sdpa path cannot do "
        "(Gemma2PreTrainedModel._supports_sdpa is False); eager applies the cap exactly",
        notes=("flash_attention_2 also applies the cap on Intel GPUs: pass attention='flash_attention_2' "
               "(needs the kernels extra)",),
    )
