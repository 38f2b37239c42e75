"""Stand-in for ``habana_frameworks.torch.hpex.kernels.FusedSDPA``: Gaudi's fused attention, computed on the CPU.

Same call as the real one (gaudi-pytorch-bridge 1.19 ``hpex/kernels/FusedSDPA.py`` l.85-272):
``FusedSDPA.apply(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
softmax_mode="None", recompute_mode=None, valid_seq_len=None, seq_padding_type="left",
return_dropout_mask=False, return_attn_probs=False)`` on ``[batch, heads, seq, head_dim]``
tensors, with the same rules: ``scale`` defaults to ``1/sqrt(head_dim)``; ``recompute_mode=None``
takes ``torch.hpu.recompute_sdp_enabled()`` (on by default); grouped-query attention when the
key/value heads differ from the query heads (and are not 1); ``valid_seq_len`` (per-row valid
lengths of a padded batch, padding on ``seq_padding_type``'s side) only in inference with
``is_causal`` and no mask; ``softmax_mode="fast"`` in recompute training only with ``is_causal``;
``return_attn_probs`` only in inference. Optimum Habana calls it so
(``optimum/habana/transformers/models/llama/modeling_llama.py`` l.273-308 and l.720-768).

The result is ``torch.nn.functional.scaled_dot_product_attention``'s. Not simulated: the fast
softmax's reduced precision, recompute's memory saving, the kernel's speed. Every call is recorded
(``hpex.FusedSDPA:softmax=…,recompute=…,causal=…``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from intelrt.testing.simulation import current as _current

from ... import hpu as _hpu

SOFTMAX_MODES = ("none", "fast")
PADDING_SIDES = ("left", "right", "none")


def _valid_mask(q: torch.Tensor, k: torch.Tensor, valid_seq_len: torch.Tensor, side: str) -> torch.Tensor:
    """Causal mask that also hides each row's padding (on ``side``), shaped ``[batch, 1, q_len, k_len]``."""
    batch, q_len, k_len = q.shape[0], q.shape[-2], k.shape[-2]
    keys = torch.arange(k_len).view(1, 1, k_len)
    queries = torch.arange(q_len).view(1, q_len, 1) + (k_len - q_len)
    valid = valid_seq_len.to(torch.long).view(batch, 1, 1)
    real = keys >= k_len - valid if side == "left" else keys < valid
    return (real & (keys <= queries)).unsqueeze(1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float,
            is_causal: bool, scale: float, valid_seq_len: torch.Tensor | None, side: str) -> torch.Tensor:
    gqa = q.dim() == 4 and k.shape[1] != q.shape[1] and k.shape[1] != 1
    if valid_seq_len is not None:
        mask = _valid_mask(q, k, valid_seq_len, side)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                             enable_gqa=gqa)
        return torch.where(mask.any(-1, keepdim=True), out, torch.zeros_like(out))  # all-padding rows: 0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=gqa)


class FusedSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                softmax_mode: str = "None", recompute_mode: bool | None = None,
                valid_seq_len: torch.Tensor | None = None, seq_padding_type: str = "left",
                return_dropout_mask: bool = False, return_attn_probs: bool = False) -> Any:
        requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
        softmax_mode = softmax_mode.lower()
        seq_padding_type = seq_padding_type.lower()
        if softmax_mode not in SOFTMAX_MODES:
            raise ValueError(f"FusedSDPA softmax_mode={softmax_mode!r}: use 'None' or 'fast'")
        if seq_padding_type not in PADDING_SIDES:
            raise ValueError(f"FusedSDPA seq_padding_type={seq_padding_type!r}: use 'left', 'right' or 'None'")
        if scale is None:
            scale = 1.0 / math.sqrt(q.size(-1))
        recompute = _hpu.recompute_sdp_enabled() if recompute_mode is None else bool(recompute_mode)
        if return_attn_probs:
            assert not requires_backward, "return_attn_probs is supported only for inference mode"
            recompute = False
        if recompute and requires_backward and softmax_mode == "fast":
            assert is_causal, ("Optimized softmax mode is supported in recompute training mode only in "
                               "causal(triangular) mask case")
        if valid_seq_len is not None:
            assert is_causal and not requires_backward and attn_mask is None, (
                "Valid sequence length is supported only in inference with is_causal(triangular) mask case")
        if recompute:
            assert not return_dropout_mask, "Return_dropout_mask is not supported in recompute mode"
        if return_dropout_mask or return_attn_probs:
            raise NotImplementedError("the simulated FusedSDPA returns the attention output only")
        _current().record(f"hpex.FusedSDPA:softmax={softmax_mode},recompute={recompute},causal={is_causal}")
        ctx.rng_state = torch.get_rng_state()
        out = _attend(q, k, v, attn_mask, dropout_p, is_causal, scale, valid_seq_len, seq_padding_type)
        ctx.save_for_backward(q, k, v, attn_mask)
        ctx.options = (dropout_p, is_causal, scale, seq_padding_type)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> Any:
        q, k, v, attn_mask = ctx.saved_tensors
        dropout_p, is_causal, scale, side = ctx.options
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.set_rng_state(ctx.rng_state)  # the same dropout mask as the forward pass
            q2, k2, v2 = (t.detach().requires_grad_(True) for t in (q, k, v))
            out = _attend(q2, k2, v2, attn_mask, dropout_p, is_causal, scale, None, side)
            dq, dk, dv = torch.autograd.grad(out, (q2, k2, v2), dout)
        return (dq, dk, dv) + (None,) * 10
