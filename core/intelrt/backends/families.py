"""The model families the compact decode step reproduces, and what each one computes differently.

Pure facts and rules (no torch): the planner asks ``compact_blocker`` with the model's config, the
compact step (``compact.py``) reads a family's ``Family`` when it builds its layers. A family is
keyed by transformers' class name; a class of that name from another module (remote code) is not
one of them: it may compute something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TRANSFORMERS_MODELS = "transformers.models."
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
"""Rotary embeddings whose frequencies change with the sequence length (not reproduced)."""
LAYER_KINDS = ("full_attention", "sliding_attention")
"""``config.layer_types`` the compact step reproduces (sliding layers with their window)."""


@dataclass(frozen=True)
class Family:
    """How one transformers class's decoder layers compute, as the compact step needs to know it."""

    norms: str = "pre"
    """``pre``: a norm before attention and before the MLP (Llama). ``sandwich``: also a norm of the
    attention's output and of the MLP's output before each residual add (Gemma-2/3)."""
    fused_weights: bool = False
    """The model's own ``qkv_proj`` and ``gate_up_proj`` hold q/k/v and gate/up end to end (Phi-3):
    the step reads them as they are."""
    attention_softcap: bool = False
    """Attention logits are soft-capped, ``cap * tanh(scores / cap)`` with
    ``config.attn_logit_softcapping`` (Gemma-2; Gemma-3's attention does not apply it)."""
    rotary_per_layer_type: bool = False
    """One rotary embedding per layer type (Gemma-3: local and global frequencies)."""
    experts: str | None = None
    """Mixture-of-experts layers: ``qwen3_moe`` (routing weights top-k normalised when
    ``norm_topk_prob``, rounded to the model's dtype) or ``mixtral`` (always normalised, float32)."""


FAMILIES: Mapping[str, Family] = {
    "LlamaForCausalLM": Family(),
    "MistralForCausalLM": Family(),
    "Qwen2ForCausalLM": Family(),
    "Qwen3ForCausalLM": Family(),
    "Phi3ForCausalLM": Family(fused_weights=True),
    "Gemma2ForCausalLM": Family(norms="sandwich", attention_softcap=True),
    "Gemma3ForCausalLM": Family(norms="sandwich", rotary_per_layer_type=True),
    "Qwen3MoeForCausalLM": Family(experts="qwen3_moe"),
    "MixtralForCausalLM": Family(experts="mixtral"),
}
"""transformers' classes whose decoder layers the compact step reproduces."""
COMPACT_CLASSES = tuple(FAMILIES)


class Unsupported(Exception):
    """The loaded model's modules are not the layout its family has (e.g. adapters, quantized or
    kernel-replaced projections): the decoder falls back to the model's own forward, saying why."""


def _rope_types(config: Mapping[str, Any]) -> list[str]:
    """Every rotary type the config names (Gemma-3 names one per layer type)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(rope, Mapping):
        return []
    nested = [v for v in rope.values() if isinstance(v, Mapping)]
    found = [r.get("rope_type") or r.get("type") for r in (nested or [rope])]
    return [str(t) for t in found if t]


def layer_windows(config: Mapping[str, Any], layers: int) -> list[int | None]:
    """Each layer's sliding window (``None``: it attends to the whole sequence), as transformers'
    masks apply it: ``config.layer_types`` names the sliding layers (Qwen2/3, Gemma-2/3); without it
    ``config.sliding_window`` applies to every layer (Mistral, Mixtral, Phi-3, Qwen3-MoE)."""
    window = config.get("sliding_window")
    kinds: Sequence[str] | None = config.get("layer_types")
    if not isinstance(window, int) or window <= 0:
        return [None] * layers
    if kinds:
        return [window if kind == "sliding_attention" else None for kind in list(kinds)[:layers]]
    return [window] * layers


def compact_blocker(class_name: str, module: str, config: Mapping[str, Any]) -> str | None:
    """Why the compact step cannot run the model of class ``class_name`` from ``module`` with this
    config, or ``None``."""
    tail = "; the step runs the model's own forward"
    if class_name not in FAMILIES:
        return (f"{class_name or 'this model'} is not one of the classes the compact step reproduces "
                f"({', '.join(COMPACT_CLASSES)}){tail}")
    if not module.startswith(TRANSFORMERS_MODELS):
        return f"{class_name} here is defined in {module}, not by transformers: it may compute something else{tail}"
    dynamic = sorted(set(_rope_types(config)) & set(DYNAMIC_ROPE_TYPES))
    if dynamic:
        return f"{', '.join(dynamic)} rotary embeddings change with the sequence length{tail}"
    odd = sorted({str(t) for t in config.get("layer_types") or ()} - set(LAYER_KINDS))
    if odd:
        return f"{', '.join(odd)} layers{tail}"
    if config.get("use_bidirectional_attention"):
        return f"bidirectional attention (use_bidirectional_attention){tail}"
    return None


def attention_kernel_blocker(class_name: str, config: Mapping[str, Any]) -> str | None:
    """Why the one-kernel decode attention cannot serve this model's compact step, from its config
    (``None``: it can, where the device runs it). The kernel needs a power-of-two head size of at
    least 16 and a rotary embedding over the whole head."""
    heads = int(config.get("num_attention_heads") or 1)
    dim = config.get("head_dim") or int(config.get("hidden_size") or 0) // max(1, heads)
    if not isinstance(dim, int) or dim < 16 or dim & (dim - 1):
        return f"head size {dim} is not a power of two >= 16"
    rope = config.get("rope_parameters") or {}
    partial = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) \
        if isinstance(rope, Mapping) else config.get("partial_rotary_factor", 1.0)
    if partial not in (None, 1, 1.0):
        return f"the rotary embedding covers {partial} of each head (the kernel rotates whole heads)"
    return None
