"""Multi-head latent attention (DeepSeek-V2/V3) in the compact decode step.

transformers' ``DeepseekV2Attention`` / ``DeepseekV3Attention`` cache, per token, the normed latent
``c`` (``kv_lora_rank`` features, ``kv_a_layernorm(kv_a_proj_with_mqa(x))``) and the rotated shared
key part ``k_rot`` (``qk_rope_head_dim`` features), and at every step expand the whole cache through
``kv_b_proj`` into per-head keys ``k_nope = W_uk c`` and values ``v = W_uv c`` (``expand_kv``): work
that grows with the context, per step. Here the same attention is computed in the latent space
(DeepSeek-V2's paper, section 2.1.2, "absorbed" form; vLLM's ``MLACommonImpl`` decodes the same
way): each query's no-rope part is taken into the latent space once, ``q_lat = W_uk^T q_nope``,
so that ``q_nope . k_nope = q_lat . c``; the scores are ``q_lat . c + q_rot . k_rot`` over the
cache of ``[c, k_rot]`` (one key/value head shared by every query head), the weighted sum of the
latents ``o_lat`` is taken out of the latent space by ``W_uv`` (``v`` summed with the same
weights is ``W_uv o_lat``). The same products, summed in another order: greedy tokens equal
``model.generate``'s (tests prove it in float32), and the cache holds ``kv_lora_rank +
qk_rope_head_dim`` numbers per token and layer instead of ``2 x heads x head size``.
"""

from __future__ import annotations

from typing import Any

from ..backends.families import Unsupported

LATENT_NAMES = ("q_proj", "q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm",
                "kv_b_proj", "o_proj")
"""The attention modules of DeepSeek-V2/V3 the latent step reads."""


class LatentAttention:
    """One DeepSeek attention block's projections and norms, the model's own modules (no copy)."""

    def __init__(self, attn: Any, config: Any, where: str) -> None:
        import torch

        for name in LATENT_NAMES:
            module = getattr(attn, name, None)
            if module is not None and name.endswith("proj") and type(module) is not torch.nn.Linear:
                raise Unsupported(f"{where} self_attn.{name} is a {type(module).__name__}, not a plain torch.nn.Linear")
            if module is not None and name.endswith("proj") and type(module.weight) is not torch.nn.Parameter:
                raise Unsupported(f"{where} self_attn.{name}'s weight is a {type(module.weight).__name__} "
                                  "(quantized), not a plain tensor")  # as compact._plain_linear refuses it
        self.heads = int(config.num_attention_heads)
        self.rank = int(config.kv_lora_rank)
        self.nope, self.rope, self.value = (int(config.qk_nope_head_dim), int(config.qk_rope_head_dim),
                                            int(config.v_head_dim))
        self.q_proj: Any = attn.q_proj
        """The query projection from the hidden state (``None`` with query compression: ``q_a_proj`` then)."""
        self.q_a_norm: Any = attn.q_a_layernorm
        self.q_b_proj: Any = attn.q_b_proj
        self.kv_a_norm: Any = attn.kv_a_layernorm
        self.kv_b_proj: Any = attn.kv_b_proj
        first = attn.q_proj if attn.q_proj is not None else attn.q_a_proj
        self.inputs = [first, attn.kv_a_proj_with_mqa]
        """The two projections of the (normed) hidden state, fused into one by the compact layer."""
        self.split = [int(first.out_features), self.rank + self.rope]
        if int(attn.kv_a_proj_with_mqa.out_features) != self.rank + self.rope or \
                int(attn.kv_b_proj.out_features) != self.heads * (self.nope + self.value):
            raise Unsupported(f"{where} latent projections do not match the config's ranks and head sizes")
        self.scaling = float(attn.scaling)

    @property
    def key_dim(self) -> int:
        """Numbers the cache holds per token and layer: the latent and the rotated key part."""
        return self.rank + self.rope

    def queries(self, projected: Any) -> tuple[Any, Any, Any, Any]:
        """(q_nope, q_rot, latent, k_rot) of the fused projection's output (rows, T, features): the
        queries per head (rows, heads, T, ·), the latent and shared key part (rows, 1, T, ·)."""
        rows, steps, _ = projected.shape
        first, compressed = projected.split(self.split, dim=-1)
        q = first if self.q_proj is not None else self.q_b_proj(self.q_a_norm(first))
        q = q.view(rows, steps, self.heads, self.nope + self.rope).transpose(1, 2)
        q_nope, q_rot = q.split([self.nope, self.rope], dim=-1)
        latent, k_rot = compressed.split([self.rank, self.rope], dim=-1)
        latent = self.kv_a_norm(latent).view(rows, 1, steps, self.rank)
        return q_nope, q_rot, latent, k_rot.reshape(rows, 1, steps, self.rope)

    def absorbed(self, q_nope: Any, q_rot: Any) -> Any:
        """The full query in the latent space (rows, heads, T, rank + rope): ``[W_uk^T q_nope, q_rot]``."""
        import torch

        up = self.kv_b_proj.weight.view(self.heads, self.nope + self.value, self.rank)
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, up[:, :self.nope])
        return torch.cat([q_latent, q_rot], dim=-1)

    def output(self, attended: Any) -> Any:
        """Per-head values from the weighted latents ``attended`` (rows, T, heads * rank):
        (rows, T, heads * v_head_dim), ready for ``o_proj``."""
        import torch

        rows, steps, _ = attended.shape
        up = self.kv_b_proj.weight.view(self.heads, self.nope + self.value, self.rank)
        values = torch.einsum("bthr,hvr->bthv", attended.view(rows, steps, self.heads, self.rank),
                              up[:, self.nope:])
        return values.reshape(rows, steps, self.heads * self.value)
