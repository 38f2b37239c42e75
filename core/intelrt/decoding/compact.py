"""The compact decode step: Llama-family decoder layers as few, fusable operations.

transformers' modeling code is written for every use (training, any cache, any attention
backend); a decode step needs less. For decoder layers shaped like Llama's (Llama, Mistral,
Qwen2, Qwen3) this module runs the same computation with:

* the q/k/v and the gate/up projections concatenated into one weight each — not a copy: the
  model's own parameters become views into that one tensor (``FusedProjections``), so whatever
  changes them in place (an optimizer step, ``load_state_dict``, a LoRA merge) is what the next
  step reads, and the weights take no more memory than before;
* its own KV cache, one tensor per layer, written in place at the step's cache slot;
* grouped-query attention computed per key/value head, with no expansion of K and V to every
  query head;
* for a compiled step with few rows, projections written as multiply-and-sum, which the compiler
  fuses with the residual or activation after them; an RMSNorm before a projection is folded
  into it (``_normed_linear``: the projection also sums the squares of its input, so norm and
  projection are one kernel).

The norms, rotary embedding, activation, embedding and LM head are the model's own modules, so
their numerics are the model's. Greedy output equals ``model.generate``'s (tests prove it on the
CPU; ``benchmarks/bench_generate.py --verify`` on a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .tuning import DecodeTuning

COMPACT_CLASSES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
"""transformers' classes whose decoder layers the compact step reproduces (a class of that name from
another module — remote code — is not one of them: it may compute something else)."""
TRANSFORMERS_MODELS = "transformers.models."
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
"""Rotary embeddings whose frequencies change with the sequence length (not reproduced)."""
RMS_NORM_TYPES = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")
"""Norm modules computing ``weight * (x * rsqrt(mean(x**2) + eps))``, which ``_normed_linear``
folds into the projection after them (any other norm module runs as itself)."""


def compact_blocker(class_name: str, module: str, config: Mapping[str, Any]) -> str | None:
    """Why the compact step cannot run the model of class ``class_name`` from ``module`` with this
    config, or ``None``."""
    if class_name not in COMPACT_CLASSES:
        return (f"{class_name or 'this model'} is not one of the classes the compact step reproduces "
                f"({', '.join(COMPACT_CLASSES)}); the step runs the model's own forward")
    if not module.startswith(TRANSFORMERS_MODELS):
        return (f"{class_name} here is defined in {module}, not by transformers: it may compute something else; "
                "the step runs the model's own forward")
    model_type = str(config.get("model_type", ""))
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or rope.get("type") if isinstance(rope, Mapping) else None
    if rope_type in DYNAMIC_ROPE_TYPES:
        return (f"{rope_type} rotary embeddings change with the sequence length; the step runs the model's "
                "own forward")
    layer_types = set(config.get("layer_types") or ())
    sliding = config.get("sliding_window") if model_type == "mistral" else None
    if layer_types - {"full_attention"} or sliding:
        return "sliding-window attention layers; the step runs the model's own forward"
    return None


class Unsupported(Exception):
    """The loaded model's modules are not the plain Llama-family layout (e.g. adapters, quantized
    or kernel-replaced projections): the decoder falls back to the model's own forward."""


def _plain_linear(module: Any, where: str) -> Any:
    import torch

    if type(module) is not torch.nn.Linear:
        raise Unsupported(f"{where} is a {type(module).__name__}, not a plain torch.nn.Linear")
    return module


def _decoder_parts(model: Any) -> tuple[Any, Any]:
    """(the inner decoder with embed/layers/norm/rotary, the LM head), or ``Unsupported``."""
    if getattr(model, "peft_config", None) or getattr(model, "_hf_peft_config_loaded", False):
        raise Unsupported("the model carries PEFT adapters")
    blocker = compact_blocker(type(model).__name__, type(model).__module__, model.config.to_dict())
    if blocker is not None:
        raise Unsupported(blocker)
    inner: Any = getattr(model, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, name):
            raise Unsupported(f"the model has no model.{name}")
    if getattr(inner.rotary_emb, "rope_type", "default") in DYNAMIC_ROPE_TYPES:
        raise Unsupported("the rotary embedding is dynamic")
    head = _plain_linear(getattr(model, "lm_head", None), "lm_head")
    return inner, head


def _layout(model: Any) -> tuple[Any, ...]:
    """The modules the compact step reads, in a fixed order (compared by identity)."""
    inner = getattr(model, "model", None)
    parts: list[Any] = [getattr(model, "lm_head", None)]
    parts += [getattr(inner, name, None) for name in ("embed_tokens", "norm", "rotary_emb")]
    for layer in getattr(inner, "layers", ()):
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        parts += [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
        parts += [getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
        parts += [getattr(layer, n, None) for n in ("input_layernorm", "post_attention_layernorm")]
    return tuple(parts)


class CompactLayer:
    """One decoder layer's fused weights and references to its own norms and activation."""

    def __init__(self, layer: Any, index: int) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        where = f"layer {index}"
        self.sources = [_plain_linear(getattr(attn, n, None), f"{where} self_attn.{n}")
                        for n in ("q_proj", "k_proj", "v_proj")]
        self.up = [_plain_linear(getattr(mlp, n, None), f"{where} mlp.{n}") for n in ("gate_proj", "up_proj")]
        self.o_proj = _plain_linear(getattr(attn, "o_proj", None), f"{where} self_attn.o_proj")
        self.down_proj = _plain_linear(getattr(mlp, "down_proj", None), f"{where} mlp.down_proj")
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.input_rms, self.post_rms = _rms_parts(self.input_norm), _rms_parts(self.post_norm)
        self.q_norm: Any = getattr(attn, "q_norm", None)
        self.k_norm: Any = getattr(attn, "k_norm", None)
        if (self.q_norm is None) != (self.k_norm is None):
            raise Unsupported(f"{where} normalises only one of its queries and keys")
        self.qk_eps = float(getattr(self.q_norm, "variance_epsilon", 0.0) or 0.0)
        self.q_heads = int(self.sources[0].out_features) // int(attn.head_dim)
        self.act = mlp.act_fn
        self.scaling = float(attn.scaling)
        self.head_dim = int(attn.head_dim)
        self.split = [int(m.out_features) for m in self.sources]
        self.qkv = FusedProjections(self.sources, f"{where} q/k/v")
        self.gate_up = FusedProjections(self.up, f"{where} gate/up")
        self.qkv_weight, self.qkv_bias = self.qkv.weight, self.qkv.bias
        self.gate_up_weight, self.gate_up_bias = self.gate_up.weight, self.gate_up.bias

    def rejoin(self) -> bool:
        """Make the projections views of the fused tensors again where something replaced their
        storage; True when any had to be."""
        return self.qkv.rejoin() | self.gate_up.rejoin()


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

    if gemv:
        y = (x.unsqueeze(-2).float() * weight.float()).sum(-1).to(x.dtype)
        return y if bias is None else y + bias
    return torch.nn.functional.linear(x, weight, bias)


def _rms_parts(norm: Any) -> tuple[Any, float] | None:
    """(weight, eps) of a Llama-style RMSNorm module, else ``None``."""
    weight, eps = getattr(norm, "weight", None), getattr(norm, "variance_epsilon", None)
    if type(norm).__name__ not in RMS_NORM_TYPES or weight is None or not isinstance(eps, float):
        return None
    return weight, eps


def _normed_linear(x: Any, norm: Any, rms: tuple[Any, float] | None, weight: Any, bias: Any, gemv: bool,
                   fold: bool = True) -> Any:
    """``norm(x) @ weight.T + bias``.

    With ``gemv`` and an RMSNorm (``rms``: its weight and eps), as one multiply-and-sum of
    ``x * norm.weight`` with ``weight`` beside a sum of ``x**2`` over the same elements, scaled by
    ``rsqrt(mean(x**2) + eps)`` afterwards: both sums have the projection's shape, so the
    compiler computes them, and the scaling, in the projection's kernel instead of running the
    norm's statistics as a kernel of their own. Accumulates in float32 (the model's norm rounds
    its output to the model's dtype before the projection: results differ by that rounding).
    ``fold=False`` runs the norm as itself."""
    import torch

    if not (gemv and fold) or rms is None:
        return _linear(norm(x), weight, bias, gemv)
    scale, eps = rms
    xf = x.float()
    wide = (*x.shape[:-1], weight.shape[0], x.shape[-1])
    dot = ((xf * scale.float()).unsqueeze(-2) * weight.float()).sum(-1)
    squares = (xf * xf).unsqueeze(-2).expand(wide).sum(-1)  # per output element: fuses with `dot`
    y = (dot * torch.rsqrt(squares / x.shape[-1] + eps)).to(x.dtype)
    return y if bias is None else y + bias


def _rotate_half(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _attend(q: Any, keys: Any, values: Any, allowed: Any, scaling: float) -> Any:
    """Grouped-query attention of ``q`` (rows, q_heads, T, D) over the cache (rows, kv_heads, L, D):
    each key/value head serves its group of query heads directly, with no expanded K or V."""
    import torch

    rows, q_heads, steps, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    groups = q_heads // kv_heads
    grouped = q.reshape(rows, kv_heads, groups * steps, dim)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scaling
    mask = allowed[:, None, None].expand(rows, 1, groups, steps, length).reshape(rows, 1, groups * steps, length)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, values)  # (rows, kv_heads, groups * T, D)
    return out.reshape(rows, q_heads, steps, dim).transpose(1, 2).reshape(rows, steps, q_heads * dim)


class CompactModel:
    """The compact forward of one loaded model; call it like a function (compile it as one)."""

    def __init__(self, model: Any, tuning: DecodeTuning | None = None) -> None:
        self.tuning = tuning or DecodeTuning()
        inner, head = _decoder_parts(model)
        self.embed, self.norm, self.rotary, self.lm_head = inner.embed_tokens, inner.norm, inner.rotary_emb, head
        self.norm_rms = _rms_parts(self.norm)
        self.layers = [CompactLayer(layer, i) for i, layer in enumerate(inner.layers)]
        config = model.config
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
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

    def new_cache(self, rows: int, length: int, device: Any) -> tuple[list[Any], list[Any]]:
        """Zeroed key and value caches, one (rows, kv_heads, length, head_dim) tensor per layer."""
        import torch

        shape = (rows, self.kv_heads, length, self.layers[0].head_dim)
        keys = [torch.zeros(shape, dtype=self.dtype, device=device) for _ in self.layers]
        values = [torch.zeros(shape, dtype=self.dtype, device=device) for _ in self.layers]
        return keys, values

    def attention_kernel_fits(self) -> bool:
        """The one-kernel decode attention (``triton_attention``) can serve this model: Triton is
        installed, head_dim is a power of two >= 16 and the rotary embedding covers the whole head.
        Whether the device runs the kernel is the plan's decode decision (``attention_kernel``)."""
        from importlib.util import find_spec

        layer = self.layers[0]
        dim = layer.head_dim
        if find_spec("triton") is None or dim < 16 or dim & (dim - 1):
            return False
        if int(self.rotary.inv_freq.numel()) * 2 != dim:
            return False  # a partial rotary embedding
        from . import triton_attention  # noqa: F401 - registers torch.ops.intelrt.decode_attention

        return True

    def prompt(self, input_ids: Any, positions: Any, slots: Any, key_mask: Any, keys: list[Any],
               values: list[Any]) -> Any:
        """The prompt's pass, in torch operations: ``__call__`` under a name of its own, so that
        it compiles apart from the one-token step (with dynamic shapes, for any prompt length)."""
        return self(input_ids, positions, slots, key_mask, keys, values)

    def __call__(self, input_ids: Any, positions: Any, slots: Any, key_mask: Any, keys: list[Any],
                 values: list[Any], gemv: bool = False, fused_attention: bool = False) -> Any:
        """Logits of the last position of each row.

        ``input_ids``/``positions``: (rows, T); ``slots``: the T cache slots these tokens fill;
        ``key_mask``: (rows, L), 1 where a cache slot holds a real (not padding) token.
        ``gemv``: multiply-and-sum projections (only for a compiled step: eagerly it would
        materialise rows × out × in products). ``fused_attention``: one-token steps run each
        layer's attention block as one Triton kernel (see ``attention_kernel_fits``).
        """
        import torch

        hidden = self.embed(input_ids)
        rotary_cos, rotary_sin = self.rotary(hidden, positions)
        cos, sin = rotary_cos[:, None], rotary_sin[:, None]
        rows, steps, _ = hidden.shape
        one_kernel = fused_attention and steps == 1
        if one_kernel:  # registered when attention_kernel_fits() said yes
            decode_attention = torch.ops.intelrt.decode_attention
            cos_1, sin_1 = rotary_cos[:, 0].contiguous(), rotary_sin[:, 0].contiguous()
            # The kernel's arrival counters (one per row and key/value head); each layer's kernel
            # leaves them at zero for the next.
            arrivals = torch.zeros(rows * self.kv_heads, dtype=torch.int32, device=hidden.device)
        slot_ids = torch.arange(key_mask.shape[1], device=key_mask.device)
        # A slot is visible to a query when it is at or before the query's slot and holds a real
        # token; each query also sees its own slot, so padding queries never attend to nothing.
        causal = slot_ids[None, None, :] <= slots[None, :, None]
        allowed = (causal & key_mask[:, None, :].bool()) | (slot_ids[None, None, :] == slots[None, :, None])
        residual = hidden
        fold, tuning = self.tuning.fold_norms, self.tuning
        for index, (layer, k_cache, v_cache) in enumerate(zip(self.layers, keys, values, strict=True)):
            qkv = _normed_linear(residual, layer.input_norm, layer.input_rms, layer.qkv_weight, layer.qkv_bias, gemv,
                                 fold)
            if one_kernel:
                attended = decode_attention(
                    qkv[:, 0], layer.q_norm.weight if layer.q_norm is not None else None,
                    layer.k_norm.weight if layer.k_norm is not None else None, cos_1, sin_1, k_cache, v_cache,
                    slots, key_mask, arrivals, self._read_next(index) if gemv else [], layer.q_heads,
                    layer.qk_eps, layer.scaling, tuning.attention_splits, tuning.merge_in_kernel,
                    tuning.prefetch)[:, None]
            else:
                attended = self._attention(layer, qkv, cos, sin, k_cache, v_cache, slots, allowed)
            residual = residual + _linear(attended, layer.o_proj.weight, layer.o_proj.bias, gemv)
            gate, up = _normed_linear(residual, layer.post_norm, layer.post_rms, layer.gate_up_weight,
                                      layer.gate_up_bias, gemv, fold).chunk(2, dim=-1)
            residual = residual + _linear(layer.act(gate) * up, layer.down_proj.weight, layer.down_proj.bias,
                                          gemv)
        return _normed_linear(residual[:, -1:], self.norm, self.norm_rms, self.lm_head.weight, self.lm_head.bias,
                              gemv, fold)[:, -1]

    def _read_next(self, index: int) -> list[Any]:
        """The weights read after layer ``index``'s attention, in order (what its kernel prefetches)."""
        layer = self.layers[index]
        following = {"o_proj": layer.o_proj.weight, "gate_up": layer.gate_up_weight,
                     "down_proj": layer.down_proj.weight}
        if index + 1 < len(self.layers):
            following["next_qkv"] = self.layers[index + 1].qkv_weight
        return [following[name] for name in self.tuning.prefetch_weights if name in following]

    @staticmethod
    def _attention(layer: CompactLayer, qkv: Any, cos: Any, sin: Any, k_cache: Any, v_cache: Any, slots: Any,
                   allowed: Any) -> Any:
        """One layer's attention block in torch operations (any device, any number of tokens)."""
        rows, steps, _ = qkv.shape
        q, k, v = qkv.split(layer.split, dim=-1)
        q = q.view(rows, steps, -1, layer.head_dim)
        k = k.view(rows, steps, -1, layer.head_dim)
        if layer.q_norm is not None:
            q, k = layer.q_norm(q), layer.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(rows, steps, -1, layer.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k_cache.index_copy_(2, slots, k)
        v_cache.index_copy_(2, slots, v)
        return _attend(q, k_cache, v_cache, allowed, layer.scaling)
