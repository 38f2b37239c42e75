"""Plan → keyword arguments for ``from_pretrained`` (builds transformers' config objects)."""

from __future__ import annotations

from typing import Any

from .plan_data import Plan


def _kernel_entry(value: Any) -> Any:
    """A plan holds JSON: ``["org/repo:Layer", {"version": 2}]`` is transformers' tuple form."""
    if isinstance(value, dict):
        return {k: _kernel_entry(v) for k, v in value.items()}
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict):
        return (value[0], dict(value[1]))
    return value


def kernel_config(plan: Plan) -> Any:
    """transformers ``KernelConfig`` for the plan's kernel mapping, or ``None`` (SPEC X8)."""
    value = plan.value("kernels") or {}
    mapping = value.get("kernel_mapping")
    if not value.get("use_kernels") or not mapping:
        return None
    from transformers import KernelConfig

    return KernelConfig(kernel_mapping={layer: _kernel_entry(entry) for layer, entry in mapping.items()},
                        use_local_kernel=bool(value.get("use_local_kernel")))


def quantization_config(plan: Plan) -> Any:
    value = plan.value("quantization")
    if not value:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if value["bits"] == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=value.get("quant_type", "nf4"),
        bnb_4bit_compute_dtype=getattr(torch, value.get("compute_dtype") or "float32"),
        bnb_4bit_use_double_quant=bool(value.get("double_quant", False)))


def from_pretrained_kwargs(plan: Plan) -> dict[str, Any]:
    """Everything the plan decided, as ``from_pretrained`` keywords (plus the user's extras)."""
    kwargs: dict[str, Any] = {
        "dtype": plan.value("dtype"),
        "device_map": plan.value("placement"),
        "attn_implementation": plan.value("attention"),
        "trust_remote_code": plan.request.trust_remote_code,
    }
    if not plan.request.allow_pickle:
        kwargs["use_safetensors"] = True
    kernels = plan.value("kernels") or {}
    if kernels.get("use_kernels"):
        kwargs["use_kernels"] = True
        config = kernel_config(plan)
        if config is not None:
            kwargs["kernel_config"] = config
    quant = quantization_config(plan)
    if quant is not None:
        kwargs["quantization_config"] = quant
    kwargs.update(plan.request.from_pretrained_kwargs)
    return kwargs
