"""Stand-in for ``habana_frameworks.torch.hpu`` (the ``torch.hpu`` module on Gaudi)."""

from intelrt.testing.simulation import current as _current

__intelrt_stub__ = True


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
    return sim.device_name()


def current_device() -> int:
    return 0


def synchronize(device: object = None) -> None:
    _current().record("hpu.synchronize")


def memory_allocated(device: object = None) -> int:
    return 0


class _Properties:
    def __init__(self, name: str, total_memory: int) -> None:
        self.name = name
        self.total_memory = total_memory


def get_device_properties(device: object = None) -> _Properties:
    sim = _current()
    sim.record("hpu.get_device_properties")
    return _Properties(sim.device_name(), sim.total_memory())
