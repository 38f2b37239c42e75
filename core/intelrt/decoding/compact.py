"""The compact decode step: decoder layers as few, fusable operations.

transformers' modeling code is written for every use (training, any cache, any attention
backend); a decode step needs less. For the families of ``families.py`` — Llama, Mistral, Qwen2,
Qwen3, Phi-3, Gemma-2, Gemma-3 (text), Qwen3-MoE, Mixtral, Granite, OLMo-2/3, SmolLM3, Cohere-2,
GPT-OSS and DeepSeek-V2/V3 — this module runs the same computation (what each family does
differently is declared once, in ``families.Family``) with:

* the q/k/v and the gate/up projections as one weight each — not a copy: the model's own
  parameters become views into that one tensor (``FusedProjections``), so whatever changes them
  in place (an optimizer step, ``load_state_dict``, a LoRA merge) is what the next step reads,
  and the weights take no more memory than before; a model that stores them fused (Phi-3's
  ``qkv_proj`` and ``gate_up_proj``) is read as it is;
* the engine's paged KV cache (``paged.py``: fixed-size blocks, a block table per request), written
  in place at each token's slot; sliding-window layers see only the positions inside their window
  (the cache keeps every slot: the mask, not the cache, limits what a query sees, exactly as
  transformers' masks do); a decode step (``decode``) attends one token per row, one Triton kernel
  per layer where the plan says so (``triton_attention.py``); a prefill (``prefill``) packs prompt
  chunks of several requests into one pass and attends each with ``scaled_dot_product_attention``
  over its own context, so no full score matrix is ever materialised;
* grouped-query attention computed per key/value head, with no expansion of K and V to every
  query head; Gemma-2's attention logits soft-capped, Gemma's final logits soft-capped; GPT-OSS's
  attention sinks joining each softmax (``paged.attend``); DeepSeek's multi-head latent attention
  in the latent space over a cache of one latent per token (``latent.py``);
* mixture-of-experts layers routed as the model routes them, reading only the chosen experts'
  weights in a decode step (``experts.py``);
* for a compiled step with few rows, projections written as multiply-and-sum, which the compiler
  fuses with the residual or activation after them; an RMSNorm before a projection is folded
  into it (``_normed_linear``: the projection also sums the squares of its input, so norm and
  projection are one kernel).

The norms (Gemma's sandwich norms included), rotary embeddings, activation, embedding (Gemma's
scaled by sqrt(hidden)) and LM head are the model's own modules, so their numerics are the
model's. Greedy output equals ``model.generate``'s (tests prove it on the CPU in float32 for every
family; ``benchmarks/bench_generate.py --verify`` and ``intelrt bench --shape`` on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.families import (
    COMPACT_CLASSES,
    DYNAMIC_ROPE_TYPES,
    FAMILIES,
    Family,
    Unsupported,
    compact_blocker,
    kernel_misfit,
    layer_windows,
)
from . import paged
from .experts import Experts
from .latent import LATENT_NAMES, LatentAttention
from .memory import KVShape
from .paged import PagedCache
from .quantized_linears import QuantizedProjections, is_plain, is_quantized_linear, out_features
from .tuning import DecodeTuning

if TYPE_CHECKING:
    from ..hooks.backend import Backend

__all__ = ["COMPACT_CLASSES", "CompactModel", "Unsupported", "compact_blocker"]

RMS_NORM_OFFSETS = {"LlamaRMSNorm": 0.0, "MistralRMSNorm": 0.0, "Qwen2RMSNorm": 0.0, "Qwen3RMSNorm": 0.0,
                    "Phi3RMSNorm": 0.0, "Qwen3MoeRMSNorm": 0.0, "MixtralRMSNorm": 0.0,
                    "Gemma2RMSNorm": 1.0, "Gemma3RMSNorm": 1.0, "GraniteRMSNorm": 0.0, "Olmo2RMSNorm": 0.0,
                    "Olmo3RMSNorm": 0.0, "SmolLM3RMSNorm": 0.0, "GptOssRMSNorm": 0.0, "DeepseekV2RMSNorm": 0.0,
                    "DeepseekV3RMSNorm": 0.0}
"""Norm modules computing ``(weight + offset) * (x * rsqrt(mean(x**2) + eps))`` (Gemma's weight is
stored as an offset from 1), which ``_normed_linear`` folds into the projection after them and the
attention kernel applies to queries and keys (any other norm module runs as itself)."""
ATTENTION_NAMES = tuple(dict.fromkeys(("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "q_norm", "k_norm",
                                       *LATENT_NAMES)))
MLP_NAMES = ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "gate", "router", "experts", "shared_experts")
NORM_NAMES = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
              "post_feedforward_layernorm")


def _rotates(family: Family, config: Any, index: int) -> bool:
    """Whether layer ``index`` rotates its queries and keys: SmolLM3 rotates where
    ``config.no_rope_layers[index]`` is 1 (``SmolLM3Attention.use_rope``), Cohere-2 only in its
    sliding-window layers (``Cohere2Attention.forward``), every other family everywhere."""
    if family.rope_layers == "listed":
        return bool(config.no_rope_layers[index])
    if family.rope_layers == "sliding":
        return config.layer_types[index] == "sliding_attention"
    return True


def _rotation(family: Family, config: Any) -> str:
    """How the family's layers rotate queries and keys (``CompactModel.rotation``)."""
    if family.rotary in ("interleaved", "complex"):
        return "pairs"
    if family.rotary == "latent":
        return "deinterleaved" if getattr(config, "rope_interleave", False) else "half"
    return "half"


def _multiplier(config: Any, name: str, applies: bool) -> float | None:
    """``config.<name>`` as a float where the family applies it (``None``: it does not)."""
    value = getattr(config, name, None) if applies else None
    return None if value is None else float(value)


def _added(residual: Any, out: Any, scale: float | None) -> Any:
    """``residual + out``, or Granite's ``residual + out * residual_multiplier``."""
    return residual + (out if scale is None else out * scale)


def _plain_linear(module: Any, where: str) -> Any:
    import torch

    if type(module) is not torch.nn.Linear:
        raise Unsupported(f"{where} is a {type(module).__name__}, not a plain torch.nn.Linear")
    if type(module.weight) is not torch.nn.Parameter:  # torchao keeps nn.Linear, its weight a tensor subclass
        raise Unsupported(f"{where}'s weight is a {type(module.weight).__name__} (quantized), not a plain tensor")
    return module


def _linear_module(module: Any, where: str) -> Any:
    """A projection as the step runs it: a plain ``nn.Linear`` as itself, a quantized one (a torchao
    weight, another quantizer's module) as :class:`QuantizedProjections` of one."""
    if module is None:
        raise Unsupported(f"the model has no {where}")
    if is_quantized_linear(module):
        return QuantizedProjections([module], where)
    return _plain_linear(module, where)


def _fused(modules: list[Any], where: str) -> FusedProjections | QuantizedProjections:
    """Projections reading one input as one: plain weights end to end (:class:`FusedProjections`),
    quantized ones as :class:`QuantizedProjections` (fused by rows where their layout allows)."""
    if any(m is None for m in modules):
        raise Unsupported(f"{where}: a projection is missing")
    if any(is_quantized_linear(m) for m in modules):
        return QuantizedProjections(modules, where)
    return FusedProjections([_plain_linear(m, where) for m in modules], where)


def _decoder_parts(model: Any) -> tuple[Any, Any, Family]:
    """(the inner decoder with embed/layers/norm/rotary, the LM head, the family), or ``Unsupported``."""
    if getattr(model, "peft_config", None) or getattr(model, "_hf_peft_config_loaded", False):
        raise Unsupported("the model carries PEFT adapters")
    name = type(model).__name__
    blocker = compact_blocker(name, type(model).__module__, model.config.to_dict())
    if blocker is not None:
        raise Unsupported(blocker)
    inner: Any = getattr(model, "model", None)
    for part in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, part):
            raise Unsupported(f"the model has no model.{part}")
    rope = getattr(inner.rotary_emb, "rope_type", "default")
    if any(t in DYNAMIC_ROPE_TYPES for t in (rope.values() if isinstance(rope, dict) else [rope])):
        raise Unsupported("the rotary embedding is dynamic")
    head = _linear_module(getattr(model, "lm_head", None), "lm_head")
    return inner, head, FAMILIES[name]


def _layout(model: Any) -> tuple[Any, ...]:
    """The modules the compact step reads, in a fixed order (compared by identity)."""
    inner = getattr(model, "model", None)
    parts: list[Any] = [getattr(model, "lm_head", None)]
    parts += [getattr(inner, name, None) for name in ("embed_tokens", "norm", "rotary_emb")]
    for layer in getattr(inner, "layers", ()):
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        parts += [attn, mlp]
        parts += [getattr(attn, n, None) for n in ATTENTION_NAMES]
        parts += [getattr(mlp, n, None) for n in MLP_NAMES]
        parts += [getattr(layer, n, None) for n in NORM_NAMES]
    return tuple(parts)


class CompactLayer:
    """One decoder layer's fused weights and references to its own norms, activation or experts."""

    def __init__(self, layer: Any, index: int, family: Family, config: Any, window: int | None,
                 tuning: DecodeTuning) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        where = f"layer {index}"
        self.q_heads = int(config.num_attention_heads)
        self.window = window
        """The sliding window of this layer (``None``: the whole sequence)."""
        softcap = getattr(config, "attn_logit_softcapping", None) if family.attention_softcap else None
        self.softcap: float | None = float(softcap) if softcap else None
        self.rotary_kind: str | None = (config.layer_types[index] if family.rotary_per_layer_type else None)
        """Which of the model's rotary embeddings this layer uses (Gemma-3, OLMo-3: one per layer type)."""
        self.rotates = _rotates(family, config, index)
        """Queries and keys are rotated (SmolLM3's NoPE layers and Cohere-2's full layers are not)."""
        self.scaling = float(attn.scaling)
        self.o_proj = _linear_module(getattr(attn, "o_proj", None), f"{where} self_attn.o_proj")
        self.sinks: Any = attn.sinks if family.attention_sinks else None
        """GPT-OSS: one sink logit per query head, joining each softmax (``paged.attend``)."""
        self.latent: LatentAttention | None = None
        # q/k/v: the model's own fused projection (Phi-3), else the three fused here (views, no copy);
        # latent attention fuses its query and latent projections, which read the same input.
        self.qkv: FusedProjections | QuantizedProjections | None = None
        self.qkv_proj: Any = None
        if family.latent_attention:
            self.latent = LatentAttention(attn, config, where)
            self.head_dim = self.latent.rope
            self.split = self.latent.split
            self.qkv = FusedProjections(self.latent.inputs, f"{where} query/latent")
            self.cache_dims = (1, self.latent.key_dim, 0)
        else:
            self.head_dim = int(attn.head_dim)
            kv_heads = int(getattr(config, "num_key_value_heads", None) or self.q_heads)
            self.split = [self.q_heads * self.head_dim, kv_heads * self.head_dim, kv_heads * self.head_dim]
            self.cache_dims = (kv_heads, self.head_dim, self.head_dim)
            """Key/value heads of this layer's cache, and the numbers per head and token of its keys and
            values (latent attention: one head of latent and rotated key, no values)."""
            if family.fused_weights:
                self.qkv_proj = _linear_module(getattr(attn, "qkv_proj", None), f"{where} self_attn.qkv_proj")
                if out_features(attn.qkv_proj) != sum(self.split):
                    raise Unsupported(f"{where} self_attn.qkv_proj has {out_features(attn.qkv_proj)} outputs, not "
                                      f"{sum(self.split)}")
            else:
                sources = [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj")]
                if [out_features(m) for m in sources] != self.split:
                    raise Unsupported(f"{where} q/k/v projections do not match the config's heads")
                self.qkv = _fused(sources, f"{where} q/k/v")
        # The MLP: experts, the model's own gate/up projection (Phi-3), or gate and up fused here.
        self.experts: Experts | None = None
        self.gate_up: FusedProjections | QuantizedProjections | None = None
        self.gate_up_proj: Any = None
        self.down_proj: Any = None
        self.act: Any = None
        if family.experts and hasattr(mlp, "experts"):
            self.experts = Experts(mlp, family.experts, where, tuning.experts_dense_max_tokens)
        else:
            self.down_proj = _linear_module(getattr(mlp, "down_proj", None), f"{where} mlp.down_proj")
            self.act = getattr(mlp, "act_fn", None) or getattr(mlp, "activation_fn", None)
            if self.act is None:
                raise Unsupported(f"{where} mlp has no activation function")
            if family.fused_weights:
                self.gate_up_proj = _linear_module(getattr(mlp, "gate_up_proj", None), f"{where} mlp.gate_up_proj")
            else:
                self.gate_up = _fused([getattr(mlp, n, None) for n in ("gate_proj", "up_proj")], f"{where} gate/up")
        # Norms: before attention and MLP (pre), also of each block's output (Gemma's sandwich), only of
        # each block's output (OLMo's post), or one before both blocks side by side (Cohere's parallel).
        self.parallel = family.norms == "parallel"
        self.input_norm: Any = None if family.norms == "post" else layer.input_layernorm
        self.mlp_norm: Any = {"pre": getattr(layer, "post_attention_layernorm", None),
                              "sandwich": getattr(layer, "pre_feedforward_layernorm", None)}.get(family.norms)
        out_norms = family.norms in ("sandwich", "post")
        self.attn_out_norm: Any = layer.post_attention_layernorm if out_norms else None
        self.mlp_out_norm: Any = layer.post_feedforward_layernorm if out_norms else None
        self.input_rms, self.mlp_rms = _rms_parts(self.input_norm), _rms_parts(self.mlp_norm)
        self.q_norm: Any = getattr(attn, "q_norm", None)
        self.k_norm: Any = getattr(attn, "k_norm", None)
        if (self.q_norm is None) != (self.k_norm is None):
            raise Unsupported(f"{where} normalises only one of its queries and keys")
        self.qk_whole = family.qk_norm == "projection"
        """The q/k norms apply to whole projections, before the split into heads (OLMo-2/3)."""
        self.qk_rms = _rms_parts(self.q_norm) if self.q_norm is not None and not self.qk_whole else None

    @property
    def qkv_projection(self) -> Any:
        """The q/k/v projection as the step runs it (fused here, or the model's own)."""
        return self.qkv if self.qkv is not None else self.qkv_proj

    @property
    def gate_up_projection(self) -> Any:
        return self.gate_up if self.gate_up is not None else self.gate_up_proj

    @property
    def qkv_weight(self) -> Any:
        return self.qkv_projection.weight

    @property
    def gate_up_weight(self) -> Any:
        return self.gate_up_projection.weight

    def rejoin(self) -> bool:
        """Make the projections views of the fused tensors again where something replaced their
        storage; True when any had to be."""
        parts = (self.qkv, self.gate_up, self.qkv_proj, self.gate_up_proj, self.o_proj, self.down_proj)
        joined = [f.rejoin() for f in parts if isinstance(f, (FusedProjections, QuantizedProjections))]
        return any(joined)


class FusedProjections:
    """Projections sharing one input, their weights (and biases) stored end to end in one tensor.

    The linears' own ``weight``/``bias`` parameters keep their identity (optimizers, hooks and state
    dicts still hold them) and become views into ``weight``/``bias``: an in-place change of either is
    a change of both. Code that gives a parameter new storage (``param.data = …``, ``model.to()``,
    ``half()``) breaks the link; ``rejoin`` copies the new values in and restores it, in place, so
    captured device graphs that read ``weight`` stay valid."""

    def __init__(self, linears: list[Any], where: str) -> None:
        import torch

        has_bias = [m.bias is not None for m in linears]
        if any(has_bias) and not all(has_bias):
            raise Unsupported(f"{where}: some projections have a bias and some do not")
        first = linears[0].weight
        if any(m.weight.dtype != first.dtype or m.weight.device != first.device for m in linears):
            raise Unsupported(f"{where}: the projections differ in dtype or device")
        self.linears = linears
        self.rows = [int(m.weight.shape[0]) for m in linears]
        # Built outside inference mode (decoding runs in it): the parameters must stay usable for
        # training, and an inference tensor cannot be saved for backward.
        with torch.inference_mode(False), torch.no_grad():
            self.weight = torch.cat([m.weight.detach() for m in linears])
            self.bias = torch.cat([m.bias.detach() for m in linears]) if all(has_bias) else None
            self._attach()

    def _parts(self) -> list[tuple[Any, Any]]:
        """(parameter, the view of the fused tensor it must be) for every weight and bias."""
        parts: list[tuple[Any, Any]] = []
        start = 0
        for linear, rows in zip(self.linears, self.rows, strict=True):
            parts.append((linear.weight, self.weight[start:start + rows]))
            if self.bias is not None:
                parts.append((linear.bias, self.bias[start:start + rows]))
            start += rows
        return parts

    def _attach(self) -> None:
        for parameter, view in self._parts():
            parameter.data = view

    def rejoin(self) -> bool:
        import torch

        broken = [(p, v) for p, v in self._parts()
                  if p.data_ptr() != v.data_ptr() or p.shape != v.shape or p.dtype != v.dtype or p.device != v.device]
        if not broken:
            return False
        for parameter, view in broken:
            if parameter.shape != view.shape or parameter.dtype != view.dtype or parameter.device != view.device:
                raise Unsupported("a projection changed shape, dtype or device")
        with torch.inference_mode(False), torch.no_grad():
            for parameter, view in broken:
                view.copy_(parameter.detach())
                parameter.data = view
        return True


def _linear(x: Any, weight: Any, bias: Any, gemv: bool) -> Any:
    """``x @ weight.T + bias``; as multiply-and-sum when ``gemv`` (fusable by the compiler)."""
    import torch

    if gemv and is_plain(weight):
        y = (x.unsqueeze(-2).float() * weight.float()).sum(-1).to(x.dtype)
        return y if bias is None else y + bias
    return torch.nn.functional.linear(x, weight, bias)


def _project(x: Any, projection: Any, gemv: bool) -> Any:
    """``projection`` (a plain ``nn.Linear``, :class:`FusedProjections` or
    :class:`QuantizedProjections`) of ``x``."""
    if isinstance(projection, QuantizedProjections):
        return projection(x, gemv)
    return _linear(x, projection.weight, projection.bias, gemv)


def _normed_project(x: Any, norm: Any, rms: RmsParts | None, projection: Any, gemv: bool, fold: bool) -> Any:
    """``projection(norm(x))``; a plain projection folds an RMSNorm in (``_normed_linear``), a
    quantized one runs its own kernel on the normed input."""
    if isinstance(projection, QuantizedProjections):
        return projection(x if norm is None else norm(x), gemv)
    return _normed_linear(x, norm, rms, projection.weight, projection.bias, gemv, fold)


RmsParts = tuple[Any, float, float]
"""(weight, eps, offset) of an RMSNorm module: it computes ``(weight + offset) * x * rsqrt(mean(x**2) + eps)``."""


def _rms_parts(norm: Any) -> RmsParts | None:
    """(weight, eps, offset) of an RMSNorm of ``RMS_NORM_OFFSETS``, else ``None``."""
    offset = RMS_NORM_OFFSETS.get(type(norm).__name__)
    weight = getattr(norm, "weight", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if offset is None or weight is None or not isinstance(eps, float):
        return None
    return weight, eps, offset


def _normed_linear(x: Any, norm: Any, rms: RmsParts | None, weight: Any, bias: Any, gemv: bool,
                   fold: bool = True) -> Any:
    """``norm(x) @ weight.T + bias``.

    With ``gemv`` and an RMSNorm (``rms``: its weight, eps and offset), as one multiply-and-sum of
    ``x * (norm.weight + offset)`` with ``weight`` beside a sum of ``x**2`` over the same elements,
    scaled by ``rsqrt(mean(x**2) + eps)`` afterwards: both sums have the projection's shape, so the
    compiler computes them, and the scaling, in the projection's kernel instead of running the
    norm's statistics as a kernel of their own. Accumulates in float32 (the model's norm rounds
    its output to the model's dtype before the projection: results differ by that rounding).
    ``fold=False`` runs the norm as itself."""
    import torch

    if norm is None:  # OLMo's layers norm block outputs only
        return _linear(x, weight, bias, gemv)
    if not (gemv and fold) or rms is None:
        return _linear(norm(x), weight, bias, gemv)
    scale, eps, offset = rms
    xf = x.float()
    wide = (*x.shape[:-1], weight.shape[0], x.shape[-1])
    dot = ((xf * (scale.float() + offset)).unsqueeze(-2) * weight.float()).sum(-1)
    squares = (xf * xf).unsqueeze(-2).expand(wide).sum(-1)  # per output element: fuses with `dot`
    y = (dot * torch.rsqrt(squares / x.shape[-1] + eps)).to(x.dtype)
    return y if bias is None else y + bias


def _rotate_half(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    """The rotary embedding of ``x``'s first ``cos.shape[-1]`` features (all of them, except for a
    partial rotary embedding, whose other features pass unchanged)."""
    import torch

    turned = cos.shape[-1]
    if turned == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin
    head, rest = x[..., :turned], x[..., turned:]
    return torch.cat([head * cos + _rotate_half(head) * sin, rest], dim=-1)


def _rotate_pairs(x: Any, cos: Any, sin: Any) -> Any:
    """The rotary embedding of ``x`` over feature pairs (2i, 2i + 1), in float32, ``cos``/``sin`` one
    value per pair: Cohere-2's ``apply_rotary_pos_emb`` (its ``rotate_half`` interleaves) and
    DeepSeek-V2's ``apply_rotary_emb`` (the pairs as complex numbers times ``freqs_cis``) compute this."""
    import torch

    xf = x.float()
    even, odd = xf[..., 0::2], xf[..., 1::2]
    cos, sin = cos.float(), sin.float()
    return torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2).to(x.dtype)


def _rotate_deinterleaved(x: Any, cos: Any, sin: Any) -> Any:
    """DeepSeek-V3's ``apply_rotary_pos_emb_interleave``: pairs (2i, 2i + 1) rotated, the results laid
    out as all first members then all second ones; ``cos``/``sin`` one value per pair."""
    import torch

    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat([even * cos - odd * sin, odd * cos + even * sin], dim=-1)


def _rotate_as(rotation: str, x: Any, cos: Any, sin: Any) -> Any:
    """``x`` rotated the way the family pairs its features (``CompactModel.rotation``)."""
    if rotation == "pairs":
        return _rotate_pairs(x, cos, sin)
    if rotation == "deinterleaved":
        return _rotate_deinterleaved(x, cos, sin)
    return _rotate(x, cos, sin).to(x.dtype)  # OLMo's float32 tables: the model rounds back too


def _soft_cap(x: Any, cap: float | None) -> Any:
    """``cap * tanh(x / cap)`` (Gemma's soft-capping of logits), or ``x`` without a cap."""
    import torch

    return x if cap is None else torch.tanh(x / cap) * cap


class CompactModel:
    """The compact forward of one loaded model; call it like a function (compile it as one).
    ``backend``: the plan's backend, which says what the device runs (how prompt chunks attend,
    the kernel features of its GPU); without one, none of a device's extras."""

    def __init__(self, model: Any, tuning: DecodeTuning | None = None, *, backend: Backend | None = None) -> None:
        self.tuning = tuning or DecodeTuning()
        self.packs_prefill = backend is None or not backend.computes_on_host
        self.varlen = backend is not None and backend.varlen_attention
        self.capability = backend.capability(model.device) if backend is not None else None
        inner, head, family = _decoder_parts(model)
        self.family = family
        self.embed, self.norm, self.rotary, self.lm_head = inner.embed_tokens, inner.norm, inner.rotary_emb, head
        self.norm_rms = _rms_parts(self.norm)
        config = model.config
        windows = layer_windows(config.to_dict(), len(inner.layers))
        self.layers = [CompactLayer(layer, i, family, config, windows[i], self.tuning)
                       for i, layer in enumerate(inner.layers)]
        if len({layer.cache_dims for layer in self.layers}) != 1:
            raise Unsupported("the layers' KV caches differ in heads or head size (the paged cache has one shape)")
        self.kv_heads = self.layers[0].cache_dims[0]
        cap = getattr(config, "final_logit_softcapping", None)
        self.final_softcap: float | None = float(cap) if cap else None
        self.rotary_kinds = sorted({layer.rotary_kind for layer in self.layers if layer.rotary_kind is not None})
        self.rotation = _rotation(family, config)
        """How queries and keys are rotated: ``half`` (Llama's ``rotate_half``), ``pairs`` (features 2i
        and 2i + 1: Cohere-2, DeepSeek-V2) or ``deinterleaved`` (DeepSeek-V3's interleaved weights)."""
        self.embedding_multiplier = _multiplier(config, "embedding_multiplier", family.multipliers)
        self.residual_multiplier = _multiplier(config, "residual_multiplier", family.multipliers)
        self.logits_divisor = _multiplier(config, "logits_scaling", family.multipliers)
        self.logit_scale = _multiplier(config, "logit_scale", family.logit_scale)
        self.dtype = model.dtype
        self._layout = _layout(model)

    def matches(self, model: Any) -> bool:
        """The model still has the modules this step was built from (adapters injected by training,
        or a replaced projection, make a new step necessary)."""
        now = _layout(model)
        return len(now) == len(self._layout) and all(a is b for a, b in zip(now, self._layout, strict=True))

    def rejoin(self) -> bool:
        """Restore the model's q/k/v and gate/up parameters as views of the fused tensors where
        something gave them new storage; True when any had to be (in-place changes need nothing)."""
        changed = False
        for layer in self.layers:
            changed |= layer.rejoin()
        return changed

    def kv_shape(self) -> KVShape:
        """What this step's KV cache holds per token: ``kv_heads`` heads of ``head_dim`` keys and
        ``value_dim`` values per layer; for latent attention one head of the latent and the rotated
        key part, and no values (they are the latent: nothing stored twice)."""
        heads, key_dim, value_dim = self.layers[0].cache_dims
        return KVShape(len(self.layers), heads, key_dim, self.dtype.itemsize, value_dim)

    def new_cache(self, blocks: int, block_size: int, device: Any, prefix_caching: bool = True) -> PagedCache:
        """A zeroed paged KV cache of ``blocks`` blocks for this model's layers (``kv_shape``)."""
        shape = self.kv_shape()
        return PagedCache(shape.layers, shape.kv_heads, shape.head_dim, self.dtype, device, blocks, block_size,
                          prefix_caching, shape.value_dim)

    def _inverse_frequencies(self) -> list[Any]:
        names = [f"{kind}_inv_freq" for kind in self.rotary_kinds] or ["inv_freq"]
        return [getattr(self.rotary, name, None) for name in names]

    def attention_kernel_fits(self) -> bool:
        """The one-kernel decode attention (``triton_attention``) can serve this model: Triton is
        installed, head_dim is a power of two >= 16, the rotary embedding covers the whole head and
        any q/k norms are RMSNorms it knows. Whether the device runs the kernel is the plan's decode
        decision (``attention_kernel``)."""
        from importlib.util import find_spec

        layer = self.layers[0]
        dim = layer.head_dim
        if find_spec("triton") is None or dim < 16 or dim & (dim - 1) or kernel_misfit(self.family) is not None:
            return False
        if any(f is None or int(f.numel()) * 2 != dim for f in self._inverse_frequencies()):
            return False  # a partial rotary embedding
        if any(layer.q_norm is not None and layer.qk_rms is None for layer in self.layers):
            return False
        from . import triton_attention  # noqa: F401 - registers torch.ops.intelrt.decode_attention

        return True

    def unified_fits(self) -> bool:
        """The one-kernel attention of a step's flat queries (``unified_attention``) can serve this
        model's layers: Triton is installed and every layer keeps per-head keys and values of a
        power-of-two size (latent attention does not)."""
        from importlib.util import find_spec

        if find_spec("triton") is None or any(each.latent is not None for each in self.layers):
            return False
        from .unified_attention import fits  # imports triton

        layer = self.layers[0]
        return fits(layer.head_dim, layer.cache_dims[2])

    def _rotations(self, hidden: Any, positions: Any) -> dict[str | None, tuple[Any, Any]]:
        """(cos, sin) per rotary kind, from the model's own rotary embedding, in the form
        ``_rotate_as(self.rotation, …)`` reads: full tables for ``half`` (GPT-OSS's table of half the
        features repeated, as its ``_apply_rotary_emb`` applies it), one value per feature pair
        otherwise (DeepSeek-V2's complex ``freqs_cis`` as its real and imaginary parts)."""
        import torch

        kinds: list[str | None] = [*self.rotary_kinds] or [None]
        tables = {kind: self.rotary(hidden, positions) if kind is None else self.rotary(hidden, positions, kind)
                  for kind in kinds}
        converted: dict[str | None, tuple[Any, Any]] = {}
        for kind, table in tables.items():
            if self.family.rotary == "complex":
                cos, sin = table.real, table.imag
            else:
                cos, sin = table
                if self.family.rotary == "half_table":
                    cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
                elif self.rotation == "pairs":
                    cos, sin = cos[..., 0::2], sin[..., 0::2]  # Cohere's tables repeat each pair's value
                elif self.rotation == "deinterleaved":
                    cos, sin = cos[..., :cos.shape[-1] // 2], sin[..., :sin.shape[-1] // 2]
            converted[kind] = (cos, sin)
        return converted

    def _embedded(self, input_ids: Any) -> Any:
        hidden = self.embed(input_ids)
        if self.embedding_multiplier is not None:  # Granite: GraniteModel.forward
            hidden = hidden * self.embedding_multiplier
        return hidden

    def _logits(self, logits: Any) -> Any:
        """The LM head's output as the model's logits: Granite's divisor, Cohere-2's scale, Gemma's cap."""
        if self.logits_divisor is not None:  # Granite: GraniteForCausalLM.forward
            logits = logits / self.logits_divisor
        if self.logit_scale is not None:  # Cohere-2: Cohere2ForCausalLM.forward
            logits = logits * self.logit_scale
        return _soft_cap(logits, self.final_softcap)

    def decode(self, input_ids: Any, positions: Any, write_slots: Any, table: Any, keys: list[Any], values: list[Any],
               gemv: bool = False, fused_attention: bool = False) -> Any:
        """One decode step over the paged cache: logits (rows, vocab) of each row's next token.

        ``input_ids``/``positions``: (rows, 1), each row's newest token and its position;
        ``write_slots``: (rows,) the flat cache slot its key and value go to; ``table``: (rows,
        width) the rows' block tables (the attention reads positions ``0 .. position`` through
        them). ``gemv``: multiply-and-sum projections
        (only for a compiled step: eagerly it would materialise rows x out x in products).
        ``fused_attention``: each layer's attention block as one Triton kernel reading through the
        block table (see ``attention_kernel_fits``)."""
        import torch

        hidden = self._embedded(input_ids)
        rotations = self._rotations(hidden, positions)
        rows = hidden.shape[0]
        tuning = self.tuning
        decode_attention: Any = None
        arrivals: Any = None
        one_token: dict[str | None, tuple[Any, Any]] = {}
        newest: Any = None
        programmatic, prefetch_mode = False, "off"
        if fused_attention:  # registered when attention_kernel_fits() said yes
            from .triton_attention import launch_features

            decode_attention = torch.ops.intelrt.decode_attention
            programmatic, prefetch_mode = launch_features(self.capability, tuning.programmatic_launch, tuning.prefetch)
            # The kernel's arrival counters (one per row and key/value head); each layer's kernel
            # leaves them at zero for the next.
            arrivals = torch.zeros(rows * self.kv_heads, dtype=torch.int32, device=hidden.device)
            one_token = {kind: (cos[:, 0].contiguous(), sin[:, 0].contiguous()) for kind, (cos, sin) in rotations.items()}
            newest = positions[:, 0]

        def attend(index: int, layer: CompactLayer, qkv: Any, cos: Any, sin: Any) -> Any:
            if fused_attention:
                qk_norm = layer.qk_rms or (None, 0.0, 0.0)
                return decode_attention(
                    qkv[:, 0], qk_norm[0], layer.k_norm.weight if layer.k_norm is not None else None,
                    *one_token[layer.rotary_kind], keys[index], values[index], newest, write_slots, table, arrivals,
                    self._read_next(index) if gemv else [], layer.q_heads, qk_norm[1], layer.scaling,
                    tuning.attention_splits, tuning.merge_in_kernel, prefetch_mode, layer.window or 0,
                    layer.softcap or 0.0, qk_norm[2], programmatic)[:, None]
            if layer.latent is not None:
                q, latent = self._latent_qkv(layer, qkv, cos, sin)
                paged.write(keys[index], write_slots, latent[:, :, 0])
                attended = paged.decode_attention(q, keys[index], values[index], table, positions,
                                                  layer.latent.scaling, layer.window, None,
                                                  latent_values=layer.latent.rank)
                return layer.latent.output(attended)
            q, k, v = self._qkv(layer, qkv, cos, sin)
            paged.write(keys[index], write_slots, k[:, :, 0])
            paged.write(values[index], write_slots, v[:, :, 0])
            return paged.decode_attention(q, keys[index], values[index], table, positions, layer.scaling,
                                          layer.window, layer.softcap, layer.sinks)

        residual = self._layers(hidden, rotations, attend, gemv)
        logits = _normed_project(residual[:, -1:], self.norm, self.norm_rms, self.lm_head, gemv,
                                 self.tuning.fold_norms)[:, -1]
        return self._logits(logits)

    def prefill(self, input_ids: Any, positions: Any, write_slots: Any, segments: Sequence[Segment],
                keys: list[Any], values: list[Any], unified: bool = False, tables: Any = None,
                last: Sequence[int] | None = None) -> Any:
        """The tokens of one engine step — each decoding row's newest token (a segment of one) and
        prompt chunks of several requests — packed in one pass: logits (len(segments), vocab) after
        each segment's last token.

        ``input_ids``/``positions``: (1, tokens), the segments end to end; ``write_slots``: (tokens,)
        flat cache slots of their keys and values; ``segments``: where each request's tokens lie in
        the packed tokens and its block table (``tables``: those tables stacked, when the caller
        has them so). Each segment attends its own request's cached context and itself
        (``paged.PackedPrefill``: with ``unified`` (the plan's attention kernel, where the layers fit
        it: ``unified_fits``), one Triton kernel per layer for every segment; else FlashAttention's
        variable-length kernel over the blocks, one masked ``scaled_dot_product_attention``, or one
        per segment)."""
        import torch

        hidden = self._embedded(input_ids)
        rotations = self._rotations(hidden, positions)
        packed = paged.PackedPrefill(segments, positions[0], keys[0].shape[1], hidden.device, keys[0].dtype,
                                     packed=self.packs_prefill, varlen=self.varlen,
                                     unified=unified and self.unified_fits(), tables=tables)

        def attend(index: int, layer: CompactLayer, qkv: Any, cos: Any, sin: Any) -> Any:
            if layer.latent is not None:
                q, latent = self._latent_qkv(layer, qkv, cos, sin)
                paged.write(keys[index], write_slots, latent[0].transpose(0, 1))
                attended = packed.attend(q, keys[index], values[index], layer.latent.scaling, layer.window, None,
                                         latent_values=layer.latent.rank)
                return layer.latent.output(attended)
            q, k, v = self._qkv(layer, qkv, cos, sin)
            paged.write(keys[index], write_slots, k[0].transpose(0, 1))
            paged.write(values[index], write_slots, v[0].transpose(0, 1))
            return packed.attend(q, keys[index], values[index], layer.scaling, layer.window, layer.softcap,
                                 layer.sinks)

        residual = self._layers(hidden, rotations, attend, False)
        ends = torch.tensor(list(last) if last is not None else [seg.end - 1 for seg in segments], device=hidden.device)
        logits = _normed_project(residual[:, ends], self.norm, self.norm_rms, self.lm_head, False,
                                 self.tuning.fold_norms)[0]
        return self._logits(logits)

    def flat_step(self, input_ids: Any, positions: Any, write_slots: Any, cu_q: Any, lengths: Any, table: Any,
                  last: Any, keys: list[Any], values: list[Any]) -> Any:
        """One engine step over a fixed number of tokens, device work only (so a device graph can record
        it once per size and replay it for any step that fits): logits (len(last), vocab) after the
        tokens ``last`` (each request's last token in the step).

        ``input_ids``/``positions``: (1, tokens), the step's tokens end to end (decoding rows, then
        prompt chunks, then padding); ``write_slots``: (tokens,) their flat cache slots (padding:
        the null block's); ``cu_q``/``lengths``/``table``: the step's requests (padded with requests
        of no token) as ``unified_attention.StepQueries`` takes them. Only for models whose layers fit
        the kernel and need no host decision per step (``flat_fits``). Tensors only, the token count
        read from ``input_ids``: compiled with symbolic shapes, one graph serves every token count."""
        from .unified_attention import StepQueries

        hidden = self._embedded(input_ids)
        rotations = self._rotations(hidden, positions)
        tokens = input_ids.shape[1]
        queries = StepQueries(cu_q, lengths, table, tokens)

        def attend(index: int, layer: CompactLayer, qkv: Any, cos: Any, sin: Any) -> Any:
            q, k, v = self._qkv(layer, qkv, cos, sin)
            paged.write(keys[index], write_slots, k[0].transpose(0, 1))
            paged.write(values[index], write_slots, v[0].transpose(0, 1))
            out = queries.attend(q[0].transpose(0, 1), keys[index], values[index], layer.scaling, layer.window or 0,
                                 layer.softcap or 0.0, layer.sinks)
            return out.reshape(1, tokens, -1)

        residual = self._layers(hidden, rotations, attend, False)
        logits = _normed_project(residual[:, last], self.norm, self.norm_rms, self.lm_head, False,
                                 self.tuning.fold_norms)[0]
        return self._logits(logits)

    def tune_step_attention(self, keys: list[Any], tokens: int, rows: int, context: int) -> None:
        """Tune the step attention kernel for each kind of layer (``unified_attention.tune``: once per
        kind) on a step of ``tokens`` tokens with up to ``rows`` decoding rows at contexts up to
        ``context``, before the memory profile's and warm-up's dummy steps would tune it on almost
        nothing."""
        from .unified_attention import tune

        for index, layer in enumerate(self.layers):
            tune(keys[index], layer.q_heads, tokens, rows, context, layer.window or 0, layer.softcap or 0.0,
                 layer.sinks)

    def flat_fits(self) -> bool:
        """:meth:`flat_step` serves this model: the step attention kernel fits its layers, and none
        of them routes experts (a long prompt's experts run code that asks the host)."""
        return self.unified_fits() and all(layer.experts is None for layer in self.layers)

    def _layers(self, hidden: Any, rotations: dict[str | None, tuple[Any, Any]],
                attend: Callable[[int, CompactLayer, Any, Any, Any], Any], gemv: bool) -> Any:
        """The decoder layers over ``hidden`` (rows, T, hidden), ``attend`` giving each layer's
        attention output from its fused q/k/v projection; returns the last residual stream."""
        residual = hidden
        fold, scale = self.tuning.fold_norms, self.residual_multiplier
        for index, layer in enumerate(self.layers):
            cos, sin = rotations[layer.rotary_kind]
            normed = layer.input_norm(residual) if layer.parallel else residual
            if layer.parallel:  # Cohere-2: attention and MLP both read this one norm's output
                qkv = _project(normed, layer.qkv_projection, gemv)
            else:
                qkv = _normed_project(residual, layer.input_norm, layer.input_rms, layer.qkv_projection, gemv, fold)
            attended = attend(index, layer, qkv, cos, sin)
            attention_out = _project(attended, layer.o_proj, gemv)
            if layer.attn_out_norm is not None:
                attention_out = layer.attn_out_norm(attention_out)
            if not layer.parallel:
                residual = _added(residual, attention_out, scale)
            if layer.experts is not None:
                out = layer.experts(layer.mlp_norm(residual))
            elif layer.parallel:
                gate, up = _project(normed, layer.gate_up_projection, gemv).chunk(2, dim=-1)
                out = _project(layer.act(gate) * up, layer.down_proj, gemv)
            else:
                gate, up = _normed_project(residual, layer.mlp_norm, layer.mlp_rms, layer.gate_up_projection, gemv,
                                           fold).chunk(2, dim=-1)
                out = _project(layer.act(gate) * up, layer.down_proj, gemv)
            if layer.mlp_out_norm is not None:
                out = layer.mlp_out_norm(out)
            residual = residual + attention_out + out if layer.parallel else _added(residual, out, scale)
        return residual

    def _read_next(self, index: int) -> list[Any]:
        """The weights read after layer ``index``'s attention, in order (what its kernel prefetches):
        of a mixture-of-experts layer, not its experts (which ones is known only after routing)."""
        layer = self.layers[index]
        following = {"o_proj": layer.o_proj.weight}
        if layer.experts is None:
            following |= {"gate_up": layer.gate_up_weight, "down_proj": layer.down_proj.weight}
        if index + 1 < len(self.layers):
            following["next_qkv"] = self.layers[index + 1].qkv_weight
        # quantized weights are tensor subclasses (or absent): the kernel prefetches plain tensors only
        return [following[name] for name in self.tuning.prefetch_weights
                if name in following and is_plain(following[name])]

    def _qkv(self, layer: CompactLayer, qkv: Any, cos: Any, sin: Any) -> tuple[Any, Any, Any]:
        """Queries, keys and values (rows, heads, T, head_dim) of a layer's fused projection output
        (rows, T, q/k/v features): q/k norms (per head, or OLMo's over whole projections) and the
        rotary embedding (where the layer has one) applied."""
        rows, steps, _ = qkv.shape
        q, k, v = qkv.split(layer.split, dim=-1)
        if layer.q_norm is not None and layer.qk_whole:  # OLMo: Olmo2Attention.forward
            q, k = layer.q_norm(q), layer.k_norm(k)
        q = q.view(rows, steps, -1, layer.head_dim)
        k = k.view(rows, steps, -1, layer.head_dim)
        if layer.q_norm is not None and not layer.qk_whole:
            q, k = layer.q_norm(q), layer.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(rows, steps, -1, layer.head_dim).transpose(1, 2)
        if layer.rotates:
            cos, sin = cos[:, None], sin[:, None]
            q, k = _rotate_as(self.rotation, q, cos, sin), _rotate_as(self.rotation, k, cos, sin)
        return q, k, v

    def _latent_qkv(self, layer: CompactLayer, projected: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
        """Multi-head latent attention's queries in the latent space (rows, heads, T, rank + rope) and
        what the cache keeps of each token (rows, 1, T, rank + rope): its normed latent and rotated
        shared key part (``latent.py``)."""
        import torch

        latent = layer.latent
        assert latent is not None
        q_nope, q_rot, compressed, k_rot = latent.queries(projected)
        cos, sin = cos[:, None], sin[:, None]
        q_rot, k_rot = _rotate_as(self.rotation, q_rot, cos, sin), _rotate_as(self.rotation, k_rot, cos, sin)
        return latent.absorbed(q_nope, q_rot), torch.cat([compressed, k_rot], dim=-1)


@dataclass(frozen=True)
class Segment:
    """One request's chunk in a packed prefill: tokens ``start .. end`` of the pass, its block
    ``table`` (1, width) and its ``context`` (tokens cached before the chunk plus the chunk)."""

    start: int
    end: int
    table: Any
    context: int
    width: int | None = None
    """Blocks of its table the model's own forward reads (``None``: as many as ``context`` needs; a
    padded step's: its bucket's, so the shape is one a warm-up ran)."""
