"""What the user asked for: the input of planning, validated once at the door."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigurationError, PlanError
from .types import Finding

AUTO = "auto"
DTYPES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                  "float": "float32"}
QUANTIZATIONS = ("4bit", "8bit")
BATCHING = ("auto", "continuous", "padded")
GRAPHS = ("auto", "on", "off")
TASKS = ("auto", "text-generation", "feature-extraction", "sequence-classification")
COMPILE_CHOICES = ("auto", "none", "on")  # any other str names a torch.compile backend


def _text_choice(name: str, value: object, allowed: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string, got {value!r}")
    if allowed is not None and value not in allowed:
        raise ConfigurationError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def normalize_devices(devices: object) -> tuple[int, ...] | None:
    """``None``, an int count is refused (ambiguous), a list of ids or ``"0,2"`` → tuple of ids."""
    if devices is None:
        return None
    if isinstance(devices, str):
        parts = [p.strip() for p in devices.split(",")]
        if not devices.strip() or any(not p for p in parts):
            raise ConfigurationError(f"devices={devices!r}: give device ids separated by commas, e.g. '0,2'")
        try:
            ids = [int(p) for p in parts]
        except ValueError:
            raise ConfigurationError(f"devices={devices!r}: every id must be a whole number, e.g. '0,2'") from None
    elif isinstance(devices, (list, tuple)):
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ConfigurationError(f"devices={devices!r}: every id must be an int")
        ids = list(devices)
    else:
        raise ConfigurationError(
            f"devices={devices!r}: pass a list of device ids such as [0, 2] (or '0,2'); "
            "to use every visible device, leave devices unset")
    if not ids:
        raise ConfigurationError("devices=[] selects nothing: leave devices unset to use every visible device")
    if any(i < 0 for i in ids):
        raise ConfigurationError(f"devices={devices!r}: device ids are >= 0")
    if len(set(ids)) != len(ids):
        raise ConfigurationError(f"devices={devices!r}: a device id is repeated")
    return tuple(ids)


@dataclass(frozen=True)
class Request:
    """Everything the caller of ``plan``/``load`` asked for. ``"auto"`` means "intelrt decides"."""

    model: str
    backend: str = AUTO
    devices: tuple[int, ...] | None = None
    dtype: str = AUTO
    attention: str = AUTO
    kernels: str | bool = AUTO
    quantization: str | None = None
    compile: str | bool = AUTO
    task: str = AUTO
    batching: str = AUTO
    """How a list of prompts is generated: ``continuous`` batching (SPEC X7), ``padded`` batch, or auto."""
    graphs: str = AUTO
    """Device graphs (CUDA / XPU / HPU graphs) for decoding: ``on``, ``off`` or auto."""
    trust_remote_code: bool = False
    allow_pickle: bool = False
    strict: bool = False
    """Turn warnings that may hide a misconfiguration (e.g. unsupported device sets) into errors."""
    from_pretrained_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def warn_or_refuse(self, finding: Finding) -> Finding:
        """Return the warning ``finding``; in strict mode raise it as a :class:`PlanError` instead."""
        if self.strict:
            raise PlanError(f"strict mode: {finding.detail}. Fix: {finding.fix}")
        return finding

    def is_forced(self, concern: str) -> bool:
        """True when the user set ``concern`` to something other than auto."""
        value = getattr(self, concern, None)
        return value is not None and value != AUTO

    @classmethod
    def build(cls, model: object, *, backend: str = AUTO, devices: object = None, dtype: str = AUTO,
              attention: str = AUTO, kernels: str | bool = AUTO, quantization: str | None = None,
              compile: str | bool = AUTO, task: str = AUTO, batching: str = AUTO,
              graphs: str | bool = AUTO, trust_remote_code: bool = False,
              allow_pickle: bool = False, strict: bool = False,
              **from_pretrained_kwargs: Any) -> Request:
        import os

        if not isinstance(model, (str, os.PathLike)) or not str(model):
            raise ConfigurationError(f"model must be a local path or a hub id, got {model!r}")
        backend = _text_choice("backend", backend).lower()
        dtype = _DTYPE_ALIASES.get(str(dtype), dtype)
        _text_choice("dtype", dtype, DTYPES)
        _text_choice("attention", attention)
        if not isinstance(kernels, bool):
            _text_choice("kernels", kernels, ("auto", "on", "off"))
            kernels = {"on": True, "off": False}.get(kernels, kernels)
        if quantization is not None:
            quantization = {"4": "4bit", "8": "8bit", "int4": "4bit", "int8": "8bit"}.get(
                str(quantization).lower(), str(quantization).lower())
            _text_choice("quantization", quantization, QUANTIZATIONS)
        if isinstance(compile, bool):
            compile = "on" if compile else "none"
        _text_choice("compile", compile)
        _text_choice("task", task, TASKS)
        _text_choice("batching", batching, BATCHING)
        if isinstance(graphs, bool):
            graphs = "on" if graphs else "off"
        _text_choice("graphs", graphs, GRAPHS)
        for flag, value in (("trust_remote_code", trust_remote_code), ("allow_pickle", allow_pickle),
                            ("strict", strict)):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{flag} must be True or False, got {value!r}")
        owned = {"device_map": "devices=/backend=", "dtype": "dtype=", "torch_dtype": "dtype=",
                 "attn_implementation": "attention=", "use_kernels": "kernels=",
                 "kernel_config": "kernels=", "quantization_config": "quantization=",
                 "trust_remote_code": "trust_remote_code=", "use_safetensors": "allow_pickle="}
        for key in from_pretrained_kwargs:
            if key in owned:
                raise ConfigurationError(
                    f"{key}= is decided by the plan; pass {owned[key]} to intelrt instead")
        return cls(model=str(model), backend=backend, devices=normalize_devices(devices), dtype=dtype,
                   attention=attention, kernels=kernels, quantization=quantization, compile=compile,
                   task=task, batching=batching, graphs=graphs, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
                   strict=strict, from_pretrained_kwargs=dict(from_pretrained_kwargs))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "backend": self.backend,
            "devices": list(self.devices) if self.devices is not None else None,
            "dtype": self.dtype, "attention": self.attention, "kernels": self.kernels,
            "quantization": self.quantization, "compile": self.compile, "task": self.task,
            "batching": self.batching, "graphs": self.graphs,
            "trust_remote_code": self.trust_remote_code, "allow_pickle": self.allow_pickle,
            "strict": self.strict,
            "from_pretrained_kwargs": {k: repr(v) for k, v in self.from_pretrained_kwargs.items()},
        }
