"""Plan → keyword arguments for ``from_pretrained`` (builds transformers' config objects; the
quantization's are ``intelrt.quantization.builders``')."""

from __future__ import annotations

from typing import Any

from ..hooks.payloads import Placement
from ..hooks.plan import Plan
from ..quantization.builders import from_pretrained_kwargs as quantization_kwargs


def _kernel_entry(value: Any) -> Any:
    """A plan holds JSON: ``["org/repo:Layer", {"version": 2}]`` is transformers' tuple form."""
    if isinstance(value, dict):
        return {k: _kernel_entry(v) for k, v in value.items()}
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict):
        return (value[0], dict(value[1]))
    return value


def kernel_config(plan: Plan) -> Any:
    """transformers ``KernelConfig`` for the plan's kernel mapping, or ``None`` (SPEC X8).

    ``inherit_mapping=False``: with transformers' default (True) its ``kernelize`` stacks the plan's
    mapping on its whole default mapping, so layers the plan keeps on their PyTorch forward would be
    kernelized too, and their kernels fetched from the hub at load time (SPEC C4)."""
    value = plan.decided.kernels
    if value is None or not value.use_kernels or not value.kernel_mapping:
        return None
    from transformers import KernelConfig

    return KernelConfig(kernel_mapping={layer: _kernel_entry(entry) for layer, entry in value.kernel_mapping.items()},
                        use_local_kernel=value.use_local_kernel, inherit_mapping=False)


def distributed_config(plan: Plan) -> Any:
    """transformers ``DistributedConfig`` for weights sharded as they load (tensor parallel, or
    FSDP2 where accelerate cannot build it), or ``None``."""
    value = plan.decided.parallelism
    if value is None or value.distributed_config is None:
        return None
    from transformers.distributed import DistributedConfig

    return DistributedConfig(**dict[str, Any](value.distributed_config))


def attention_implementation(plan: Plan) -> Any:
    """The plan's attention as ``attn_implementation``: one name, or — for a model whose sub-models
    (a backbone, an audio tokenizer) do not all support it — a dict by sub-config key, as
    ``PreTrainedConfig._attn_implementation`` takes it. A sub-model gets the planned implementation
    where it supports it (or where the plan holds a hub kernel), else ``None``: transformers' own
    default for it, as plain ``from_pretrained`` gives. An ``eager`` the plan fell back to (not
    forced) is the top class's limit, not a choice: the sub-models keep their defaults."""
    value = plan.decided.attention
    arch = plan.model.architecture
    if not isinstance(value, str) or arch is None or not arch.sub_models:
        return value
    decision = plan.decisions.get("attention")
    forced = bool(decision is not None and decision.forced)
    base = value.removeprefix("paged|")
    named = base in ("eager", "sdpa", "flex_attention") or base.startswith("flash_attention")
    chosen: dict[str, Any] = {"": value}
    for key, _cls, supported in arch.sub_models:
        if base == "eager" and not forced:
            chosen[key] = None
        elif not named or base in supported or (not supported and forced):
            chosen[key] = value
        else:
            chosen[key] = None
    return value if all(v == value for v in chosen.values()) else chosen


def from_pretrained_kwargs(plan: Plan) -> dict[str, Any]:
    """Everything the plan decided, as ``from_pretrained`` keywords (plus the user's extras)."""
    kwargs: dict[str, Any] = {
        "dtype": plan.decided.dtype,
        **(plan.decided.placement or Placement(None)).from_pretrained_kwargs(),
        "attn_implementation": attention_implementation(plan),
        "trust_remote_code": plan.request.trust_remote_code,
    }
    if not plan.request.allow_pickle:
        kwargs["use_safetensors"] = True
    kernels = plan.decided.kernels
    if kernels is not None and kernels.use_kernels:
        kwargs["use_kernels"] = True
        config = kernel_config(plan)
        if config is not None:
            kwargs["kernel_config"] = config
    # quantization_config (BitsAndBytesConfig, TorchAoConfig …), and the dtype the method loads in,
    # which the plan's dtype decision holds already
    kwargs.update(quantization_kwargs(plan.decided.quantization))
    distributed = distributed_config(plan)
    if distributed is not None:
        kwargs["distributed_config"] = distributed
    kwargs.update(plan.request.from_pretrained_kwargs)
    return kwargs
