"""Quantized projections in the compact step: fused where their layout allows, else run as themselves.

torchao keeps each ``nn.Linear`` and makes its weight a tensor subclass whose ``F.linear`` runs
the kernel of its layout (torchao 0.18 ``quantization/quantize_/workflows``):
``Int4TilePackedTo4dTensor`` tinygemm's ``aten._weight_int4pack_mm`` (CUDA),
``Int4PlainInt32Tensor`` ``aten._weight_int4pack_mm_with_scales_and_zeros`` (XPU),
``Int8Tensor`` a matmul of the int8 weights cast to the activations' dtype times the row scales,
``Float8Tensor`` ``torch._scaled_mm`` on row-wise scaled FP8 activations and weights,
``IntxUnpackedToInt8Tensor`` (the CPU's int4) a dequantize and matmul. Each of these layouts
quantizes every output row (and groups of its inputs) on its own, so projections that read one
input fuse as plain ones do: their inner tensors end to end along the dimension that holds the
rows (:data:`ROW_DIMS`; the tests check it against torchao's own slicing of each layout), and each
linear's weight becomes its rows of the fused tensor — views, no second copy of any weight.

For a compiled step of few rows (``gemv``), int8 and FP8 weights are read in a multiply-and-sum
the compiler fuses into one kernel that streams the 1-byte weights (as plain weights are, see
``compact._linear``): int8 weight-only is torchao's own arithmetic (``Int8Tensor``'s weight-only
branch), accumulated in float32; FP8 weights meet activations that stay in the model's dtype —
weight-only numerics, which are at least as close to the unquantized model as torchao's FP8
activations (the benchmark measures both).

Layers of the other quantizers — auto-round's and gptqmodel's ``QuantLinear``, compressed-tensors'
``nn.Linear`` with its quantizing ``forward``, AWQ's, bitsandbytes' ``Linear4bit``, INC's
``PatchedLinear`` — keep their own kernels: each runs as itself, one call per projection, the
outputs side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.families import Unsupported

ROW_DIMS: dict[str, dict[str, int]] = {
    "Int8Tensor": {"qdata": 0, "scale": 0, "zero_point": 0},
    "IntxUnpackedToInt8Tensor": {"qdata": 0, "scale": 0, "zero_point": 0},
    "Float8Tensor": {"qdata": 0, "scale": 0},
    "Int4TilePackedTo4dTensor": {"qdata": 0, "scale_and_zero": 1},
}
"""torchao layout → each inner tensor holding per-row data → the dimension its rows lie along
(``Int4TilePackedTo4dTensor``: ``qdata`` holds 8 rows per entry of dimension 0, its
``scale_and_zero`` is (groups, rows, 2);)."""

GEMV_LAYOUTS = ("Int8Tensor", "Float8Tensor")
"""Layouts whose weights a few-row compiled step reads in a fused multiply-and-sum."""


def is_plain(weight: Any) -> bool:
    """A weight of plain floating-point numbers (a parameter or tensor, not a tensor subclass)."""
    import torch

    return type(weight) in (torch.nn.Parameter, torch.Tensor)


QUANTIZER_PACKAGES = ("auto_round", "auto_round_extension", "gptqmodel", "awq", "bitsandbytes", "compressed_tensors",
                      "neural_compressor", "hqq", "optimum", "torchao")
"""Packages whose linear modules are quantized layers the compact step runs as themselves."""


def is_quantized_linear(module: Any) -> bool:
    """A projection the compact step runs as quantized: an ``nn.Linear`` holding a tensor-subclass
    weight (torchao) or whose ``forward`` is replaced on the instance (compressed-tensors'
    ``set_forward_quantized``: quantize-dequantize around the matmul), or a linear module of a
    quantizer's package (:data:`QUANTIZER_PACKAGES`). Other modules (a kernel-replaced or
    adapter-wrapped projection) are not: the compact step steps aside for them."""
    import torch

    if type(module) is torch.nn.Linear:
        return "forward" in vars(module) or not is_plain(getattr(module, "weight", None))
    return isinstance(module, torch.nn.Module) and type(module).__module__.split(".")[0] in QUANTIZER_PACKAGES


def out_features(module: Any) -> int:
    """A projection's outputs (``-1`` when it does not say): ``out_features`` of ``nn.Linear`` and
    most quantized layers, ``outfeatures`` of auto-round's and the GPTQ-style ``QuantLinear``."""
    value = getattr(module, "out_features", None)
    if value is None:
        value = getattr(module, "outfeatures", None)
    return int(value) if isinstance(value, int) else -1


def layout(weight: Any) -> str | None:
    """The torchao layout name of ``weight`` that :data:`ROW_DIMS` knows, else ``None``."""
    name = type(weight).__name__
    return name if name in ROW_DIMS and hasattr(weight, "__tensor_flatten__") else None


def _inner(weight: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    names, attributes = weight.__tensor_flatten__()
    return {n: getattr(weight, n) for n in names}, dict(attributes)


def _fusable(weights: Sequence[Any]) -> str | None:
    """Why ``weights`` cannot be concatenated by rows (``None``: they can)."""
    kinds = {type(w) for w in weights}
    if len(kinds) != 1:
        return "the projections' weights are of different quantized layouts"
    kind = layout(weights[0])
    if kind is None:
        return f"torchao's {type(weights[0]).__name__} is not a layout the compact step fuses"
    rows = ROW_DIMS[kind]
    first, first_attributes = _inner(weights[0])
    if set(first) - set(rows):
        return f"{kind} carries {', '.join(sorted(set(first) - set(rows)))} (not per-row data)"
    first_attributes.pop("shape", None)
    n0 = int(weights[0].shape[0])
    for weight in weights:
        inner, attributes = _inner(weight)
        attributes.pop("shape", None)
        if set(inner) != set(first) or attributes != first_attributes:
            return f"the projections' {kind} weights differ in their quantization settings"
        if int(weight.shape[-1]) != int(weights[0].shape[-1]) or weight.ndim != 2:
            return "the projections differ in input size"
        for name, dim in rows.items():
            if name not in inner:
                continue
            # the inner rows must be the same share of the weight's rows in every part (padding breaks it)
            if int(inner[name].shape[dim]) * n0 != int(first[name].shape[dim]) * int(weight.shape[0]):
                return f"{kind}'s {name} is padded past the projection's rows"
    return None


def concatenate(weights: Sequence[Any]) -> tuple[Any, list[Any]]:
    """(the fused weight, each part's rows of it as a view) of torchao weights of one layout
    (``Unsupported`` when they cannot be fused: :func:`_fusable` says why)."""
    import torch

    why = _fusable(weights)
    if why is not None:
        raise Unsupported(why)
    kind = type(weights[0]).__name__
    rows = ROW_DIMS[kind]
    parts = [_inner(w) for w in weights]
    names, attributes = parts[0][0].keys(), dict(parts[0][1])
    total = sum(int(w.shape[0]) for w in weights)
    in_features = int(weights[0].shape[-1])
    with torch.inference_mode(False), torch.no_grad():
        fused_inner = {n: torch.cat([p[0][n] for p in parts], dim=rows[n]) for n in names}
    if "shape" in attributes:
        attributes["shape"] = torch.Size([total, in_features])
    fused = type(weights[0]).__tensor_unflatten__(fused_inner, attributes, torch.Size([total, in_features]),
                                                  (in_features, 1))
    views, offsets = [], dict.fromkeys(names, 0)
    for weight, (inner, own) in zip(weights, parts, strict=True):
        sliced = {}
        for n in names:
            count = int(inner[n].shape[rows[n]])
            sliced[n] = fused_inner[n].narrow(rows[n], offsets[n], count)
            offsets[n] += count
        view = type(weight).__tensor_unflatten__(sliced, dict(own), weight.shape, weight.stride())
        views.append(view)
    return fused, views


def gemv_parts(weight: Any) -> tuple[Any, Any] | None:
    """(int8 or FP8 weights (N, K), float32 row scales (N,)) that ``x @ weight.T`` is, for a layout
    and setting :data:`GEMV_LAYOUTS` covers (per-row scales, no activation pre-scale; int8: weight-only
    and symmetric); else ``None``. Read once, when the step is built: the compiled step then sees plain
    tensors and no data-dependent checks."""
    kind = type(weight).__name__
    if kind not in GEMV_LAYOUTS or getattr(weight, "act_pre_scale", None) is not None:
        return None
    qdata, scale = weight.qdata, weight.scale
    if qdata.ndim != 2 or scale.ndim != 2 or tuple(scale.shape) != (qdata.shape[0], 1):
        return None  # per-row scales only (torchao's defaults for both)
    if kind == "Int8Tensor":
        zero = weight.zero_point
        if weight.act_quant_kwargs is not None or (zero is not None and bool(zero.any())):
            return None  # dynamic activations or asymmetric weights: torchao's own kernel
    return qdata, scale.float().flatten()


def dequantized_gemv(x: Any, parts: tuple[Any, Any]) -> Any:
    """``x @ weight.T`` of :func:`gemv_parts` as one multiply-and-sum over the 1-byte weights (a
    compiled step of few rows fuses it into one kernel), in float32."""
    qdata, scale = parts
    return (x.unsqueeze(-2).float() * qdata.float()).sum(-1) * scale


class QuantizedProjections:
    """Quantized projections sharing one input, as the compact step runs them: one fused torchao
    weight (``weight``; the linears' weights become its views), or each module on its own
    (``modules``, ``weight`` ``None``)."""

    def __init__(self, linears: list[Any], where: str) -> None:
        import torch

        self.linears = linears
        self.where = where
        self.weight: Any = None
        self.bias: Any = None
        self.fused_reason: str | None = None
        """Why the projections run one by one (``None`` when they are fused)."""
        linear_modules = all(type(m) is torch.nn.Linear and "forward" not in vars(m) for m in linears)
        weights = [m.weight for m in linears] if linear_modules else []
        if not linear_modules:
            self.fused_reason = "their layers are the quantizer's own modules, each running its kernel"
        elif len(linears) == 1:
            self.weight = weights[0]
        else:
            self.fused_reason = _fusable(weights)
        biases = [m.bias for m in linears] if linear_modules else []
        if biases and any(b is not None for b in biases):
            if not all(b is not None and is_plain(b) for b in biases):
                self.fused_reason = self.fused_reason or "some projections have a bias and some do not"
        if linear_modules and self.fused_reason is None:
            if len(linears) > 1:
                self.weight, views = concatenate(weights)
                for module, view in zip(linears, views, strict=True):
                    module.weight = torch.nn.Parameter(view, requires_grad=False)
            if biases and biases[0] is not None:
                with torch.inference_mode(False), torch.no_grad():
                    self.bias = torch.cat([b.detach() for b in biases]) if len(biases) > 1 else biases[0]
        self._weights = [getattr(m, "weight", None) for m in linears]
        self.gemv = gemv_parts(self.weight) if self.weight is not None else None
        """The weights a few-row compiled step multiplies and sums itself (``None``: the layout's kernel)."""

    @property
    def fused(self) -> bool:
        return self.weight is not None

    def __call__(self, x: Any, gemv: bool = False) -> Any:
        import torch

        if self.weight is None:
            outputs = [module(x) for module in self.linears]
            return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)
        if gemv and self.gemv is not None:
            y = dequantized_gemv(x, self.gemv).to(x.dtype)
            return y if self.bias is None else y + self.bias
        return torch.nn.functional.linear(x, self.weight, self.bias)

    def rejoin(self) -> bool:
        """Nothing to copy back (quantized weights are not trained in place); a weight replaced since
        the step was built is ``Unsupported`` — the step is built anew around it."""
        if any(getattr(m, "weight", None) is not w for m, w in zip(self.linears, self._weights, strict=True)):
            raise Unsupported(f"{self.where}: a quantized projection's weight was replaced")
        return False
