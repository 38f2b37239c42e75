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
    attention's output and of the MLP's output before each residual add (Gemma-2/3). ``post``: only
    those two output norms, none before (OLMo-2/3: ``Olmo2DecoderLayer.forward``). ``parallel``: one
    norm whose output feeds attention and MLP side by side, both added to the residual
    (Cohere-2: ``Cohere2DecoderLayer.forward``)."""
    fused_weights: bool = False
    """The model's own ``qkv_proj`` and ``gate_up_proj`` hold q/k/v and gate/up end to end (Phi-3):
    the step reads them as they are."""
    attention_softcap: bool = False
    """Attention logits are soft-capped, ``cap * tanh(scores / cap)`` with
    ``config.attn_logit_softcapping`` (Gemma-2; Gemma-3's attention does not apply it)."""
    rotary_per_layer_type: bool = False
    """One rotary embedding per layer type (Gemma-3, OLMo-3: ``rotary_emb(x, positions, layer_type)``)."""
    experts: str | None = None
    """Mixture-of-experts layers, routed as ``experts.EXPERT_KINDS`` says (``qwen3_moe``, ``mixtral``,
    ``gpt_oss``, ``deepseek_v2``, ``deepseek_v3``)."""
    qk_norm: str = "head"
    """Where a layer's ``q_norm``/``k_norm`` apply: ``head`` (each head's features: Qwen3, Gemma-3) or
    ``projection`` (the whole q and k projections, before they are split into heads: OLMo-2/3)."""
    rotary: str = "half"
    """How the rotary embedding pairs features: ``half`` (feature i with i + dim/2: Llama's
    ``rotate_half``), ``half_table`` (the same, from a table of dim/2 frequencies: GPT-OSS's
    ``_apply_rotary_emb``), ``interleaved`` (feature 2i with 2i + 1: Cohere-2's ``rotate_half``),
    ``complex`` (the same pairs as complex numbers: DeepSeek-V2's ``apply_rotary_emb``) or
    ``latent`` (DeepSeek-V3: ``apply_rotary_pos_emb_interleave`` when ``config.rope_interleave``,
    else ``half``)."""
    rope_layers: str = "all"
    """Which layers rotate queries and keys: ``all``, ``listed`` (``config.no_rope_layers[i]`` is 1:
    SmolLM3) or ``sliding`` (only sliding-window layers: Cohere-2)."""
    multipliers: bool = False
    """Granite's µP multipliers: embeddings times ``config.embedding_multiplier``, each block's output
    times ``config.residual_multiplier`` before its residual add, logits divided by
    ``config.logits_scaling`` (the attention's scale is ``attention_multiplier``, read from the module)."""
    logit_scale: bool = False
    """Logits times ``config.logit_scale`` (Cohere-2: ``Cohere2ForCausalLM.forward``)."""
    attention_sinks: bool = False
    """Each head has a learned sink logit that joins the softmax and is dropped after it
    (GPT-OSS: ``eager_attention_forward`` with ``module.sinks``)."""
    latent_attention: bool = False
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds each token's normed latent and its
    rotated key part, one shared head (``latent.py``)."""


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
    "GraniteForCausalLM": Family(multipliers=True),
    "Olmo2ForCausalLM": Family(norms="post", qk_norm="projection"),
    "Olmo3ForCausalLM": Family(norms="post", qk_norm="projection", rotary_per_layer_type=True),
    "SmolLM3ForCausalLM": Family(rope_layers="listed"),
    "Cohere2ForCausalLM": Family(norms="parallel", rotary="interleaved", rope_layers="sliding", logit_scale=True),
    "GptOssForCausalLM": Family(rotary="half_table", attention_sinks=True, experts="gpt_oss"),
    "DeepseekV2ForCausalLM": Family(rotary="complex", latent_attention=True, experts="deepseek_v2"),
    "DeepseekV3ForCausalLM": Family(rotary="latent", latent_attention=True, experts="deepseek_v3"),
}
"""transformers' classes whose decoder layers the compact step reproduces."""
COMPACT_CLASSES = tuple(FAMILIES)
DEEPSEEK_V2_ROUTING = ("greedy", "group_limited_greedy")
"""``DeepseekV2TopkRouter.topk_method`` values transformers implements (and the compact step with it)."""


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
    return _family_blocker(class_name, config, tail)


def _family_blocker(class_name: str, config: Mapping[str, Any], tail: str) -> str | None:
    """A setting of one family's config that the compact step does not reproduce, or ``None``."""
    if class_name == "DeepseekV2ForCausalLM" and config.get("topk_method", "greedy") not in DEEPSEEK_V2_ROUTING:
        return f"DeepSeek-V2 routing topk_method={config.get('topk_method')!r}{tail}"
    if class_name == "Cohere2ForCausalLM" and config.get("use_qk_norm"):
        return f"Cohere-2 with use_qk_norm (a norm transformers' Cohere2Attention does not apply){tail}"
    return None


def attention_kernel_blocker(class_name: str, config: Mapping[str, Any]) -> str | None:
    """Why the one-kernel decode attention cannot serve this model's compact step, from its config
    (``None``: it can, where the device runs it). The kernel needs a power-of-two head size of at
    least 16 and a rotary embedding over the whole head."""
    family = FAMILIES.get(class_name)
    if family is not None:
        why = kernel_misfit(family)
        if why is not None:
            return why
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


def kernel_misfit(family: Family) -> str | None:
    """What of a family's attention the one-kernel decode attention does not compute (``None``: nothing)."""
    if family.latent_attention:
        return "multi-head latent attention (a latent cache shared by every head) is not the kernel's layout"
    if family.attention_sinks:
        return "attention sinks join the softmax, which the kernel does not add"
    if family.rotary not in ("half", "half_table"):
        return f"the rotary embedding pairs features 2i and 2i+1 ({family.rotary}; the kernel rotates halves)"
    if family.rope_layers != "all":
        return "some layers have no rotary embedding (the kernel rotates every layer)"
    if family.qk_norm != "head":
        return "q/k norms over whole projections (the kernel normalises each head)"
    return None
