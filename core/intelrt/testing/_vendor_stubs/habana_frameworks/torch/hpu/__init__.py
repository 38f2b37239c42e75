"""Stand-in for ``habana_frameworks.torch.hpu`` (the ``torch.hpu`` module on Gaudi).

Covers what intelrt, transformers (``is_torch_hpu_available``, ``TrainingArguments``, the
bitsandbytes quantizers) and accelerate (``PartialState``, ``accelerate launch``) call.
"""

from intelrt.testing.simulation import current as _current

from . import random  # noqa: F401
from .random import (  # noqa: F401 - the real torch.hpu re-exports them
    get_rng_state,
    get_rng_state_all,
    manual_seed,
    manual_seed_all,
    set_rng_state,
    set_rng_state_all,
)

__intelrt_stub__ = True

_current_index = 0


def _check(device: object) -> int:
    """The device index meant by ``device`` (None, an int, ``"hpu"``, ``"hpu:1"``, a torch.device)."""
    sim = _current()
    raw = getattr(device, "index", device)
    if isinstance(device, str):
        raw = device.split(":")[1] if ":" in device else None
    index = _current_index if raw is None else int(str(raw))
    if not 0 <= index < len(sim.visible_ids()):
        raise RuntimeError(f"HPU device index {index} out of range (simulated, {len(sim.visible_ids())} visible)")
    return index


def is_available() -> bool:
    sim = _current()
    sim.record("hpu.is_available")
    return bool(sim.visible_ids())


def device_count() -> int:
    sim = _current()
    sim.record("hpu.device_count")
    return len(sim.visible_ids())


def get_device_name(device: object = None) -> str:
    sim = _current()
    sim.record("hpu.get_device_name")
    _check(device)
    return sim.device_name()


def is_bf16_supported() -> bool:
    """Every Gaudi generation computes in bfloat16 (SPEC H8)."""
    _current().record("hpu.is_bf16_supported")
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    _current().record("hpu.init")


def current_device() -> int:
    _current().record("hpu.current_device")
    return _current_index


def set_device(device: object) -> None:
    global _current_index
    sim = _current()
    sim.record("hpu.set_device")
    _current_index = _check(device)


def synchronize(device: object = None) -> None:
    _current().record("hpu.synchronize")


def memory_allocated(device: object = None) -> int:
    return 0


def max_memory_allocated(device: object = None) -> int:
    return 0


def reset_peak_memory_stats(device: object = None) -> None:
    return None


def empty_cache() -> None:
    _current().record("hpu.empty_cache")


def mem_get_info(device: object = None) -> tuple[int, int]:
    sim = _current()
    sim.record("hpu.mem_get_info")
    _check(device)
    return sim.total_memory(), sim.total_memory()


class _Properties:
    def __init__(self, name: str, total_memory: int) -> None:
        self.name = name
        self.total_memory = total_memory


def get_device_properties(device: object = None) -> _Properties:
    sim = _current()
    sim.record("hpu.get_device_properties")
    _check(device)
    return _Properties(sim.device_name(), sim.total_memory())
