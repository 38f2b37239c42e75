"""Read a checkpoint's own quantization: its ``quantization_config``.

transformers finds it where ``quantizers/auto.py`` ``get_hf_quantizer`` looks: ``config.json``'s
``quantization_config``, else the decoder text config's (``config.get_text_config(decoder=True)``),
and dispatches on ``quant_method`` — except bitsandbytes, whose ``load_in_4bit`` /
``load_in_8bit`` flags name it (``AutoQuantizationConfig.from_dict``). Quantizers also write the
configuration to a file of their own beside the weights (AutoRound's ``quantization_config.json``,
AutoGPTQ's ``quantize_config.json``); transformers reads neither, so a checkpoint described only
there loads as if it were not quantized: it is read here and reported as not seen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelSourceError

SEPARATE_FILES = ("quantization_config.json", "quantize_config.json")
"""AutoRound (``auto_round/export``) and AutoGPTQ / GPTQModel write these beside the weights."""

TORCHAO_BITS = {"Int4WeightOnlyConfig": 4, "Int8WeightOnlyConfig": 8, "Int8DynamicActivationInt8WeightConfig": 8,
                "Float8WeightOnlyConfig": 8, "Float8DynamicActivationFloat8WeightConfig": 8,
                "Float8DynamicActivationInt4WeightConfig": 4, "Int8DynamicActivationIntxWeightConfig": None,
                "IntxWeightOnlyConfig": None}
"""torchao config classes (``torchao/quantization/quant_api.py``) → weight bits (``None``: read
from ``weight_dtype``)."""


@dataclass(frozen=True)
class CheckpointQuantization:
    """What a checkpoint's ``quantization_config`` says."""

    method: str
    """transformers' dispatch key: ``quant_method``, or ``bitsandbytes_4bit`` / ``bitsandbytes_8bit``."""
    where: str
    """The file (and key) it was read from."""
    bits: int | None = None
    group_size: int | None = None
    scheme: str | None = None
    """The variant: torchao's config class, compressed-tensors' ``w4a16`` …, bitsandbytes' ``nf4``."""
    packing: str | None = None
    """How the weights are laid out: GPTQ's ``checkpoint_format``, AWQ's ``version``, AutoRound's
    ``packing_format``, compressed-tensors' ``format``, torchao's int4 packing format."""
    seen_by_transformers: bool = True
    config: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [self.method]
        if self.scheme:
            parts.append(self.scheme)
        if self.bits:
            parts.append(f"{self.bits}-bit")
        if self.group_size:
            parts.append(f"group size {self.group_size}")
        if self.packing:
            parts.append(f"{self.packing} layout")
        return " ".join(parts) + f" ({self.where})"


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dispatch_key(config: Mapping[str, Any]) -> str | None:
    """``AutoQuantizationConfig.from_dict``: the bitsandbytes flags win over ``quant_method``."""
    if config.get("load_in_4bit"):
        return "bitsandbytes_4bit"
    if config.get("load_in_8bit"):
        return "bitsandbytes_8bit"
    method = config.get("quant_method")
    return str(method).lower() if method else None


def _bitsandbytes(config: Mapping[str, Any], four: bool) -> dict[str, Any]:
    if not four:
        return {"bits": 8, "scheme": "llm.int8"}
    # BitsAndBytesConfig's default quant type is fp4 (utils/quantization_config.py)
    return {"bits": 4, "scheme": str(config.get("bnb_4bit_quant_type") or "fp4")}


def _torchao(config: Mapping[str, Any]) -> dict[str, Any]:
    """``TorchAoConfig.to_dict``: ``quant_type = {"default": config_to_dict(AOBaseConfig)}``, i.e.
    ``{"_type": class name, "_version": n, "_data": {field: value}}`` (``torchao/core/config.py``)."""
    quant_type = config.get("quant_type")
    entry = quant_type.get("default") if isinstance(quant_type, Mapping) else None
    if not isinstance(entry, Mapping):
        return {"scheme": str(quant_type) if quant_type else None}
    name = str(entry.get("_type") or "")
    data: Mapping[str, Any] = entry["_data"] if isinstance(entry.get("_data"), Mapping) else {}
    bits = TORCHAO_BITS.get(name)
    weight_dtype = str(_enum(data.get("weight_dtype")) or "")
    if bits is None and weight_dtype.startswith(("torch.int", "int")):
        digits = weight_dtype.rsplit("int", 1)[-1]
        bits = int(digits) if digits.isdigit() else None
    granularity = data.get("granularity")
    group = _int(data.get("group_size"))
    if group is None and isinstance(granularity, Mapping):
        group = _int((granularity.get("_data") or {}).get("group_size"))
    packing = _enum(data.get("int4_packing_format") or data.get("intx_packing_format") or data.get("packing_format"))
    return {"scheme": name or None, "bits": bits, "group_size": group,
            "packing": str(packing).lower() if packing else None}


def _enum(value: Any) -> Any:
    """An enum or dtype as ``config_to_dict`` writes it (``{"_type": ..., "_data": "PLAIN"}``) → its value."""
    return value.get("_data") if isinstance(value, Mapping) else value


def _compressed_tensors(config: Mapping[str, Any]) -> dict[str, Any]:
    """compressed-tensors' ``QuantizationConfig``: ``config_groups`` of schemes with ``weights`` and
    ``input_activations`` (``QuantizationArgs``: ``num_bits``, ``type`` int/float, ``group_size``)."""
    groups = config.get("config_groups") or {}
    first: Mapping[str, Any] = next(iter(groups.values()), {}) if isinstance(groups, Mapping) else {}
    weights: Mapping[str, Any] = (first.get("weights") or {}) if isinstance(first, Mapping) else {}
    acts = first.get("input_activations") if isinstance(first, Mapping) else None
    bits = _int(weights.get("num_bits"))
    kind = "fp" if weights.get("type") == "float" else "w"
    act_bits = _int(acts.get("num_bits")) if isinstance(acts, Mapping) else None
    scheme = (f"{kind}{bits}" + (f"a{act_bits}" if act_bits else "a16")) if bits else None
    return {"bits": bits, "group_size": _int(weights.get("group_size")), "scheme": scheme,
            "packing": str(config.get("format")) if config.get("format") else None}


def _hqq(config: Mapping[str, Any]) -> dict[str, Any]:
    """``HqqConfig.to_dict``: ``quant_config`` is hqq's ``BaseQuantizeConfig`` (``weight_quant_params``
    holds ``nbits`` and ``group_size``) or one per layer tag."""
    quant = config.get("quant_config") or {}
    params = quant.get("weight_quant_params") if isinstance(quant, Mapping) else None
    if not isinstance(params, Mapping) and isinstance(quant, Mapping):
        inner: Any = next(iter(quant.values()), {})
        params = inner.get("weight_quant_params") if isinstance(inner, Mapping) else None
    params = params if isinstance(params, Mapping) else {}
    return {"bits": _int(params.get("nbits")), "group_size": _int(params.get("group_size"))}


def _facts(method: str, config: Mapping[str, Any]) -> dict[str, Any]:
    if method in ("bitsandbytes_4bit", "bitsandbytes_8bit"):
        return _bitsandbytes(config, method == "bitsandbytes_4bit")
    if method == "torchao":
        return _torchao(config)
    if method == "compressed-tensors":
        return _compressed_tensors(config)
    if method == "hqq":
        return _hqq(config)
    if method == "gptq":  # GPTQConfig: format, legacy checkpoint_format
        return {"bits": _int(config.get("bits")), "group_size": _int(config.get("group_size")),
                "packing": str(config.get("checkpoint_format") or config.get("format") or "gptq"),
                "scheme": "desc_act" if config.get("desc_act") else None}
    if method == "awq":  # AwqConfig: legacy ``version`` is the format
        return {"bits": _int(config.get("bits")) or 4, "group_size": _int(config.get("group_size")),
                "packing": str(config.get("version") or config.get("format") or "gemm")}
    if method == "auto-round":
        return {"bits": _int(config.get("bits")) or 4, "group_size": _int(config.get("group_size")),
                "packing": str(config.get("packing_format") or "auto_round:auto_gptq"),
                "scheme": str(config.get("data_type") or "int")}
    if method in ("fp8", "mxfp8", "fbgemm_fp8"):
        block = config.get("weight_block_size")
        return {"bits": 8, "scheme": f"block {'x'.join(map(str, block))}" if isinstance(block, list) else None}
    if method == "mxfp4":
        return {"bits": 4, "scheme": "mxfp4"}
    if method == "aqlm":  # AqlmConfig: each group of in x out weights is num_codebooks codes of nbits each
        codes = (_int(config.get("num_codebooks")) or 1) * (_int(config.get("nbits_per_codebook")) or 16)
        group = (_int(config.get("in_group_size")) or 8) * (_int(config.get("out_group_size")) or 1)
        return {"bits": max(1, round(codes / group)), "scheme": f"{config.get('num_codebooks', 1)}x"
                f"{config.get('nbits_per_codebook', 16)}"}
    if method == "quanto":
        weights = str(config.get("weights") or "int8")
        return {"bits": {"int8": 8, "float8": 8, "int4": 4, "int2": 2}.get(weights), "scheme": weights}
    return {"bits": _int(config.get("bits"))}


def from_quantization_config(config: Mapping[str, Any], where: str, seen: bool = True) -> CheckpointQuantization:
    """The facts of one ``quantization_config`` mapping read from ``where``."""
    method = _dispatch_key(config)
    if method is None:
        raise ModelSourceError(f"{where}: the quantization_config names no quant_method (and is not bitsandbytes' "
                               "load_in_4bit / load_in_8bit); transformers refuses it too. Re-save the checkpoint "
                               "with the quantizer that made it")
    return CheckpointQuantization(method=method, where=where, seen_by_transformers=seen, config=dict(config),
                                  **_facts(method, config))


def _read_json(path: Path) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise ModelSourceError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_checkpoint_quantization(config: Mapping[str, Any], directory: str | Path | None = None,
                                 gguf_file: object = None) -> CheckpointQuantization | None:
    """The checkpoint's quantization (``config``: its config.json; ``directory``: where it lies, to
    look for the quantizers' own files; ``gguf_file``: the ``from_pretrained`` keyword naming a GGUF
    file, from which transformers builds a ``GgufConfig`` — ``modeling_utils.py`` ``from_pretrained``),
    or ``None`` when it is not quantized."""
    if gguf_file is not None:
        return CheckpointQuantization("gguf", f"gguf_file={gguf_file}")
    found = config.get("quantization_config")
    if isinstance(found, Mapping):
        return from_quantization_config(found, "config.json quantization_config")
    text = config.get("text_config")
    if isinstance(text, Mapping) and isinstance(text.get("quantization_config"), Mapping):
        return from_quantization_config(text["quantization_config"], "config.json text_config.quantization_config")
    if directory is not None:
        for name in SEPARATE_FILES:
            path = Path(directory) / name
            if path.is_file():
                return from_quantization_config(_read_json(path), name, seen=False)
    return None
