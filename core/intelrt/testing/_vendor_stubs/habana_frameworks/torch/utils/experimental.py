"""Stand-in for ``habana_frameworks.torch.utils.experimental`` (device generation)."""

import enum

from intelrt.testing.simulation import current as _current


class synDeviceType(enum.Enum):  # noqa: N801 - the real stack's name
    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    generation = _current().generation or "gaudi2"
    return {"gaudi1": synDeviceType.synDeviceGaudi, "gaudi2": synDeviceType.synDeviceGaudi2,
            "gaudi3": synDeviceType.synDeviceGaudi3}[generation]
