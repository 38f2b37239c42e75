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
ACCELERATE_FLOOR = "1.5.0"

INT64_VAR = "PT_ENABLE_INT64_SUPPORT"
LAZY_VAR = "PT_HPU_LAZY_MODE"
EAGER_DEFAULT_STACK = "1.21"
"""From this Gaudi software release an unset ``PT_HPU_LAZY_MODE`` means eager ("Lazy mode is no
longer the default execution mode ... since 1.21.0", HabanaAI/Gaudi-tutorials#131; Runtime Flags
page: default 0); up to 1.20 the bridge reads unset as lazy (``is_lazy()``: ``getenv(..., "1")``)."""
MODULES_VAR = "HABANA_VISIBLE_MODULES"
DEVICES_VAR = "HABANA_VISIBLE_DEVICES"
HL_SMI_MAP = "hl-smi -Q index,module_id -f csv"

GENERATION_KEY = "device_generation"
"""Key of ``BackendStatus.versions`` holding ``gaudi1`` / ``gaudi2`` / ``gaudi3``."""
FIRST_GENERATION = "gaudi1"
GENERATION_NAMES = {"gaudi1": "first-generation Gaudi", "gaudi2": "Gaudi 2", "gaudi3": "Gaudi 3"}

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
