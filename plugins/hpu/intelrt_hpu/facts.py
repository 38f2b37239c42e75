"""Facts about Intel Gaudi that several hooks share (names, floors, supported device sets)."""

from __future__ import annotations

from intelrt.plugin import BackendStatus

BACKEND = "hpu"
"""Backend name and torch device type. Never ``hpu:N``: the device is ``hpu`` (SPEC H5)."""
PRIORITY = 60
STACK_DISTRIBUTION = "habana-torch-plugin"
STACK_MODULE = "habana_frameworks"
ACCELERATE_FLOOR = "1.5.0"

INT64_VAR = "PT_ENABLE_INT64_SUPPORT"
LAZY_VAR = "PT_HPU_LAZY_MODE"
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


def owns(backend: BackendStatus) -> bool:
    """Whether ``backend`` is this plugin's."""
    return backend.name == BACKEND


def generation(backend: BackendStatus) -> str | None:
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
