"""What the user asked for: the input of planning, validated once at the door.

The request options are :class:`Request`'s own fields (their help and normalisers ride in the
field metadata, :func:`~intelrt.hooks.options.request_option`); :data:`REQUEST_OPTIONS` lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigurationError, PlanError
from ..hooks.types import Finding
from ..support.redaction import is_secret_name, register_secret
from .options import (
    AUTO,
    BATCHING,
    PARALLEL,
    PLANNED_KWARGS,
    SHARDING,
    SWITCH,
    WARMUPS,
    WORKLOADS,
    DeviceId,
    RequestOption,
    flag,
    normalize_backend,
    normalize_compile,
    normalize_devices,
    normalize_dtype,
    normalize_kernels,
    normalize_quantization,
    one_of,
    request_option,
    switch,
    text,
)

NO_MODEL = "(no model: backend-only plan)"
"""``Request.model`` of a backend-only plan (training and launching without a model)."""
#: ``from_pretrained`` keywords that carry credentials (``proxies`` may hold ``user:password@``).
CREDENTIAL_KWARGS = frozenset({"token", "use_auth_token", "proxies"})
#: ``from_pretrained`` keywords whose names only look secret.
_NOT_CREDENTIALS = frozenset({"key_mapping"})


def is_credential(keyword: str) -> bool:
    """Whether a ``from_pretrained`` keyword carries a credential (``token``, ``proxies``, a ``*_key`` …)."""
    return keyword in CREDENTIAL_KWARGS or (is_secret_name(keyword) and keyword not in _NOT_CREDENTIALS)


def split_credentials(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(other keywords, credential keywords)``: credentials go to ``from_pretrained`` at load time
    only, never into a :class:`Request`, a plan or a repr; their string values are masked from now on."""
    credentials = {k: v for k, v in kwargs.items() if is_credential(k)}
    for value in credentials.values():
        for item in (value.values() if isinstance(value, Mapping) else (value,)):
            register_secret(item)
    return {k: v for k, v in kwargs.items() if k not in credentials}, credentials


ENGINE_OPTIONS = {"gpu_memory_utilization": "memory_utilization", "max_batch_tokens": "max_batch_tokens",
                  "prefix_caching": "prefix_caching"}
"""The engine's settings a user gives to ``intelrt.load`` / ``intelrt.serve`` (and as ``--gpu-memory-utilization``,
``--max-batch-tokens``, ``--no-prefix-caching``), by keyword → the :class:`DecodeTuning` field each sets.
They size and switch the engine; no plan decision depends on them, so they are load options, not
``Request`` fields (a plan is the same whatever they are)."""


@dataclass(frozen=True)
class Request:
    """Everything the caller of ``plan``/``load`` asked for. ``"auto"`` means "intelrt decides".

    Each field after ``model`` up to ``strict`` is a request option, declared here once: its type,
    its default, its help text and its normaliser (:data:`REQUEST_OPTIONS` reads them), and what a
    caller may pass where that is more than the type (``accepts=``). ``plan()``'s and ``load()``'s
    parameters for them, and the calls that pass them on, are generated from this declaration
    (:mod:`intelrt.hooks.signature`: ``python -m intelrt.hooks.signature --write``); the CLI flags
    and the docs' options table are built from it."""

    model: str
    backend: str = request_option(AUTO, "auto (the best available accelerator, else the CPU) or a backend name "
                                  "(`intelrt plugins` lists them)", normalize_backend, metavar="NAME")
    devices: tuple[DeviceId, ...] | None = request_option(
        None, "device ids for this run, e.g. 0,2 (default: every visible device); card.tile (e.g. 0.1) names one tile "
        "of an Intel GPU in COMPOSITE mode", normalize_devices, metavar="IDS", accepts="object")
    """Device ids (:data:`~intelrt.hooks.options.DeviceId`): ints, or ``"card.tile"`` strings for Intel GPUs
    in COMPOSITE mode (backends whose ``tile_ids`` fact is False refuse those)."""
    dtype: str = request_option(AUTO, "weights dtype: auto, float32, bfloat16, float16 (bf16, fp16, fp32 accepted)",
                                normalize_dtype, metavar="DTYPE")
    attention: str = request_option(AUTO, "attn_implementation: auto, sdpa, eager, flash_attention_2, … or a hub "
                                    "kernel id org/repo", text("attention"), metavar="IMPL")
    kernels: str | bool = request_option(AUTO, "hub kernels for supported layers: auto, on, off", normalize_kernels,
                                         choices=SWITCH)
    quantization: str | None = request_option(
        None, "quantize the weights while loading: 4bit, 8bit (bitsandbytes), int4, int8, int8-dynamic (torchao), "
        "autoround, fp8 (default: none, or the checkpoint's own quantization_config)",
        normalize_quantization, metavar="METHOD")
    compile: str = request_option(AUTO, "torch.compile the model: auto, none, on, or a torch.compile backend name",
                                  normalize_compile, metavar="BACKEND", accepts="str | bool")
    task: str = request_option(
        AUTO, "what the model is loaded for: auto (from the class its config names), any task transformers' "
        "pipeline accepts (text-generation, token-classification, image-text-to-text, automatic-speech-recognition "
        "…) or a head without a pipeline (text2text-generation, question-answering, multiple-choice …); planning "
        "checks the name against the installed transformers", text("task"), metavar="TASK")
    batching: str = request_option(AUTO, "how a list of prompts is generated: auto, continuous, padded",
                                   one_of("batching", BATCHING), choices=BATCHING)
    """How a list of prompts is generated: ``continuous`` batching (SPEC X7), ``padded`` batch, or auto."""
    graphs: str = request_option(AUTO, "device graphs (CUDA / XPU / HPU graphs) for decoding: auto, on, off",
                                 switch("graphs"), choices=SWITCH, accepts="str | bool")
    attention_kernel: str = request_option(
        AUTO, "intelrt's one-kernel decode attention (Triton) in the fast decode step: auto (where the backend runs "
        "it), on, off", switch("attention_kernel"), choices=SWITCH, accepts="str | bool")
    workload: str = request_option(
        AUTO, "the work this load serves, so that warm-up pays for itself: one-shot (one short generate, as `intelrt "
        "run`), server (many calls over a long life), batch (many prompts); auto: intelrt decides (compiles once the "
        "work has shown it is long, or at once when the compile cache already holds the step)",
        one_of("workload", WORKLOADS), choices=WORKLOADS)
    warmup: str = request_option(
        AUTO, "how the fast decode step is prepared: eager (runs as it is), static (static KV cache, step captured in "
        "a device graph), compiled (compiled, captured, artifacts kept across processes); auto: from the workload",
        one_of("warmup", WARMUPS), choices=WARMUPS)
    buckets: str = request_option(
        AUTO, "pad prompts and decode batches to a few shapes where the device compiles one graph per shape "
        "(Gaudi), warming each up at load for a server or batch workload: auto, on, off", switch("buckets"),
        choices=SWITCH, accepts="str | bool")
    sharding: str = request_option(
        AUTO, "how training spreads over processes (intelrt launch): auto (from model size, device memory and world "
        "size), none, ddp, fsdp (FSDP2), deepspeed (ZeRO)", one_of("sharding", SHARDING), choices=SHARDING)
    parallel: str = request_option(
        AUTO, "how the loaded model spreads over processes (intelrt launch): auto (tensor parallel when the weights "
        "do not fit one device), none, tensor", one_of("parallel", PARALLEL), choices=PARALLEL)
    trust_remote_code: bool = request_option(
        False, "run Python code that ships with the model (config.json auto_map); off by default (SPEC C5)",
        flag("trust_remote_code"), flag=True)
    allow_pickle: bool = request_option(
        False, "allow pickle weights (*.bin, *.pt), which can run arbitrary code; safetensors only by default "
        "(SPEC C5)", flag("allow_pickle"), flag=True)
    strict: bool = request_option(False, "turn warnings that may hide a misconfiguration into errors", flag("strict"),
                                  flag=True)
    """Turn warnings that may hide a misconfiguration (e.g. unsupported device sets) into errors."""
    from_pretrained_kwargs: Mapping[str, Any] = field(default_factory=dict)
    credentials: tuple[str, ...] = ()
    """Names of the credential keywords the caller passed (``token`` …); their values are not kept:
    ``load`` hands them to ``from_pretrained`` itself."""

    @property
    def has_model(self) -> bool:
        """False for a backend-only request (no model: training arguments, launching)."""
        return self.model != NO_MODEL

    def warn_or_refuse(self, finding: Finding) -> Finding:
        """Return the warning ``finding``; in strict mode raise it as a :class:`PlanError` instead."""
        if self.strict:
            raise PlanError(f"strict mode: {finding.detail}. Fix: {finding.fix}")
        return finding

    def is_forced(self, name: str) -> bool:
        """True when the user set option ``name`` to something other than its default."""
        if name not in OPTION_NAMES:
            return False
        return bool(getattr(self, name) != option(name).default)

    @classmethod
    def build(cls, model: object, **options: Any) -> Request:
        """Validate ``model`` and the request options (see :data:`REQUEST_OPTIONS`);
        keywords that are not options go to ``from_pretrained`` unchanged, except credentials
        (:func:`split_credentials`), of which only the names are kept."""
        if model != NO_MODEL and (not isinstance(model, (str, os.PathLike)) or not str(model)):
            raise ConfigurationError(f"model must be a local path or a hub id, got {model!r}")
        values = {o.name: o.normalize(options.pop(o.name, o.default)) for o in REQUEST_OPTIONS}
        for key in options:
            if key in PLANNED_KWARGS:
                raise ConfigurationError(f"{key}= is decided by the plan; pass {PLANNED_KWARGS[key]} to intelrt instead")
            if key in ENGINE_OPTIONS:
                raise ConfigurationError(f"{key}= is a load option of the decode engine, not a plan option: pass it to "
                                         "intelrt.load() or intelrt.serve()")
        kept, credentials = split_credentials(options)
        return cls(model=os.fspath(model), **values, from_pretrained_kwargs=kept, credentials=tuple(sorted(credentials)))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"model": self.model}
        data.update({o.name: o.to_json(getattr(self, o.name)) for o in REQUEST_OPTIONS})
        data["from_pretrained_kwargs"] = {k: repr(v) for k, v in self.from_pretrained_kwargs.items()}
        data["credentials"] = list(self.credentials)
        return data


REQUEST_OPTIONS: tuple[RequestOption, ...] = tuple(
    RequestOption(f.name, f.default, **f.metadata["option"]) for f in fields(Request) if "option" in f.metadata)
"""Every request option, in the order ``plan()``, ``load()`` and the CLI list them (``Request``'s fields)."""

OPTION_NAMES = tuple(o.name for o in REQUEST_OPTIONS)


def option(name: str) -> RequestOption:
    """The declaration of request option ``name``."""
    for declared in REQUEST_OPTIONS:
        if declared.name == name:
            return declared
    raise KeyError(name)
