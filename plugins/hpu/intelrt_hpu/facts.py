"""Facts about Intel Gaudi that several hooks share (names, floors, supported device sets)."""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import Backend, BackendStatus, at_least, parse

Detected = Backend | BackendStatus
"""The facts readers below take the backend object or its detection result (both carry them)."""

BACKEND = "hpu"
"""Backend name and torch device type. Never ``hpu:N``: the device is ``hpu`` (SPEC H5)."""
PRIORITY = 60
STACK_DISTRIBUTION = "habana-torch-plugin"
STACK_MODULE = "habana_frameworks"
STACK_LOADED_MODULE = "habana_frameworks.torch"
"""Importing it loads the stack. The ``habana_frameworks`` package alone is not the stack: torch
imports its ``habana_frameworks.autoload`` entry point at every ``import torch``, lazy mode included
(``torch/__init__.py`` ``_import_device_backends``), and that entry point imports
``habana_frameworks.torch`` only in eager mode or with ``PT_HPU_AUTOLOAD=1``
(gaudi-pytorch-bridge 1.19 ``autoload/__init__.py`` l.23-44)."""
ACCELERATE_FLOOR = "1.5.0"

INT64_VAR = "PT_ENABLE_INT64_SUPPORT"
LAZY_VAR = "PT_HPU_LAZY_MODE"
EAGER_DEFAULT_STACK = "1.21"
"""From this Gaudi software release an unset ``PT_HPU_LAZY_MODE`` means eager ("Lazy mode is no
longer the default execution mode ... since 1.21.0", HabanaAI/Gaudi-tutorials#131; Runtime Flags
page: default 0); up to 1.20 the bridge reads unset as lazy (``is_lazy()``: ``getenv(..., "1")``)."""
AUTOLOAD_VAR = "PT_HPU_AUTOLOAD"
MODE_KEY = "execution_mode"
"""Key of ``BackendStatus.versions``: ``lazy`` or ``eager``, the mode detection found (the loaded
stack's own ``is_lazy()``, else :func:`lazy_mode`), so decisions read it from the backend."""
MODE_SOURCE_KEY = "execution_mode_source"
"""Key of ``BackendStatus.versions``: what set the mode (``PT_HPU_LAZY_MODE=1``, the stack's default …)."""
MODULES_VAR = "HABANA_VISIBLE_MODULES"
MODULE_ID_VAR = "HLS_MODULE_ID"
"""The module the bridge acquires at a process's first device use (``device.cpp`` l.393-443);
``torch.hpu.set_device`` only writes it (``torch/hpu/__init__.py`` l.321-358), and the hccl module
of a rank sets it from ``HABANA_VISIBLE_MODULES[LOCAL_RANK]`` unless it is set
(``distributed/hccl/__init__.py`` l.27-47)."""
LAZY_COLLECTIVES_VAR = "PT_HPU_ENABLE_LAZY_COLLECTIVES"
DEVICES_VAR = "HABANA_VISIBLE_DEVICES"
HL_SMI_MAP = "hl-smi -Q index,module_id -f csv"

GENERATION_KEY = "device_generation"
"""Key of ``BackendStatus.versions`` holding ``gaudi1`` / ``gaudi2`` / ``gaudi3``."""
FIRST_GENERATION = "gaudi1"
GENERATION_NAMES = {"gaudi1": "first-generation Gaudi", "gaudi2": "Gaudi 2", "gaudi3": "Gaudi 3"}
DEVICE_NAMES = {"gaudi1": "GAUDI", "gaudi2": "GAUDI2", "gaudi3": "GAUDI3"}
"""What ``torch.hpu.get_device_name()`` answers per generation — asked of no stack, because the
call acquires a Gaudi (SPEC H5)."""
GAUDI_HBM_BYTES = {"gaudi1": 32 * 1024**3, "gaudi2": 96 * 1024**3, "gaudi3": 128 * 1024**3}
"""Nominal HBM per Gaudi (Intel's product briefs: 32 GB, 96 GB HBM2E, 128 GB HBM2E). The stack
reports memory (``mem_get_info``, ``get_device_properties``) only after acquiring a Gaudi, which
detection never does (SPEC H5), so placement checks fits against these."""
STACK_WRITTEN = {"MASTER_ADDR": "localhost", "MASTER_PORT": "12345", "TORCHINDUCTOR_COMPILE_THREADS": "1",
                 "HABANA_PROFILE": "profile_api_light", MODULE_ID_VAR: "", "ID": ""}
"""Variables importing the stack writes into its own process, with the value it writes ("" for
per-process values): ``habana_frameworks/torch/__init__.py`` l.23 (compile threads),
``core/__init__.py`` l.121-125 (profiling), ``distributed/hccl/__init__.py`` l.27-104 (the
rendezvous defaults when unset, a rank's module id and ``ID``). A value the environment did not
hold when intelrt was imported is the stack's, not the user's (SPEC C2)."""

FULL_SERVER = frozenset(range(8))
"""A Gaudi server (HLS) holds 8 modules, ids 0-7."""
PARTIAL_SERVER_SETS = (frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7}),
                       frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7}))
"""Module-id sets Intel supports for distributed work on part of a server (SPEC H5)."""

COMPILE_BACKENDS = ("hpu_backend", "eager")
"""The only ``torch.compile`` backends that run on Gaudi (SPEC H9)."""
KERNELS_DEVICE_TYPES = ("cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu")
"""Device types the ``kernels`` package accepts (kernels 0.17 ``_validate_device_type``)."""
HCCL_REDUCE_OPS = ("sum", "min", "max")

OPTIMUM_HABANA = "https://huggingface.co/docs/optimum-habana/index"


def lazy_mode(env: Mapping[str, str], stack: str | None) -> tuple[bool, str]:
    """(lazy, why): the execution mode a process with ``env`` runs in on Gaudi software ``stack``."""
    value = env.get(LAZY_VAR)
    if value is not None:
        return value != "0", f"{LAZY_VAR}={value}"
    if stack is None or parse(stack) is None:
        return False, f"{LAZY_VAR} unset; Gaudi software version unknown, so eager as from {EAGER_DEFAULT_STACK}"
    eager = at_least(stack, EAGER_DEFAULT_STACK)
    return not eager, (f"{LAZY_VAR} unset: {'eager' if eager else 'lazy'} is the default of Gaudi software {stack} "
                       f"(eager from {EAGER_DEFAULT_STACK}, lazy before)")


def execution_mode(backend: Detected, env: Mapping[str, str]) -> tuple[bool, str]:
    """(lazy, why): the mode detection recorded (:data:`MODE_KEY`), else :func:`lazy_mode` of ``env``."""
    recorded = backend.versions.get(MODE_KEY)
    if recorded in ("lazy", "eager"):
        return recorded == "lazy", str(backend.versions.get(MODE_SOURCE_KEY) or f"{recorded} mode")
    return lazy_mode(env, stack_version(backend))


def stack_version(backend: Detected) -> str | None:
    """The ``habana-torch-plugin`` version detection read (``None`` when unknown)."""
    value = backend.versions.get(STACK_DISTRIBUTION)
    return value if value and value != "unknown" else None


def generation(backend: Detected) -> str | None:
    """``gaudi1`` / ``gaudi2`` / ``gaudi3`` as detected, else ``None``."""
    value = backend.versions.get(GENERATION_KEY)
    return value if value in GENERATION_NAMES else None


def format_ids(ids: object) -> str:
    return ",".join(str(i) for i in ids)  # type: ignore[attr-defined]


def parse_ids(value: str | None) -> tuple[int, ...] | None:
    """``"0,1"`` → ``(0, 1)``; ``None`` or anything not a list of ids → ``None``."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def is_supported_set(ids: tuple[int, ...]) -> bool:
    """Whether distributed work on these module ids is supported (whole server, or a listed set)."""
    chosen = frozenset(ids)
    return len(chosen) < 2 or chosen == FULL_SERVER or chosen in PARTIAL_SERVER_SETS


def supported_sets_text() -> str:
    return " ".join(format_ids(sorted(s)) for s in PARTIAL_SERVER_SETS)
