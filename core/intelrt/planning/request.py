"""What the user asked for: the input of planning, validated once at the door.

The fields are the request options of :mod:`intelrt.planning.options` (a test keeps them equal),
plus the model and the keywords that go to ``from_pretrained`` unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, PlanError
from ..hooks.types import Finding
from ..support.redaction import is_secret_name, register_secret
from .options import AUTO, OPTION_NAMES, PLANNED_KWARGS, REQUEST_OPTIONS, option

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
    compile: str = AUTO
    task: str = AUTO
    batching: str = AUTO
    """How a list of prompts is generated: ``continuous`` batching (SPEC X7), ``padded`` batch, or auto."""
    graphs: str = AUTO
    """Device graphs (CUDA / XPU / HPU graphs) for decoding: ``on``, ``off`` or auto."""
    attention_kernel: str = AUTO
    """intelrt's one-kernel decode attention in the fast step: ``on``, ``off`` or auto (the backend's word)."""
    workload: str = AUTO
    """The kind of work: ``one-shot``, ``server``, ``batch`` or auto (decides the warm-up)."""
    warmup: str = AUTO
    """How the fast decode step is prepared: ``eager``, ``static``, ``compiled`` or auto (from the workload)."""
    sharding: str = AUTO
    """How training spreads over processes: ``none``, ``ddp``, ``fsdp``, ``deepspeed`` or auto."""
    parallel: str = AUTO
    """How the loaded model spreads over processes: ``none``, ``tensor`` or auto."""
    trust_remote_code: bool = False
    allow_pickle: bool = False
    strict: bool = False
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
        """Validate ``model`` and the request options (see :data:`~intelrt.planning.options.REQUEST_OPTIONS`);
        keywords that are not options go to ``from_pretrained`` unchanged, except credentials
        (:func:`split_credentials`), of which only the names are kept."""
        if model != NO_MODEL and (not isinstance(model, (str, os.PathLike)) or not str(model)):
            raise ConfigurationError(f"model must be a local path or a hub id, got {model!r}")
        values = {o.name: o.normalize(options.pop(o.name, o.default)) for o in REQUEST_OPTIONS}
        for key in options:
            if key in PLANNED_KWARGS:
                raise ConfigurationError(f"{key}= is decided by the plan; pass {PLANNED_KWARGS[key]} to intelrt instead")
        kept, credentials = split_credentials(options)
        return cls(model=os.fspath(model), **values, from_pretrained_kwargs=kept, credentials=tuple(sorted(credentials)))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"model": self.model}
        data.update({o.name: o.to_json(getattr(self, o.name)) for o in REQUEST_OPTIONS})
        data["from_pretrained_kwargs"] = {k: repr(v) for k, v in self.from_pretrained_kwargs.items()}
        data["credentials"] = list(self.credentials)
        return data
