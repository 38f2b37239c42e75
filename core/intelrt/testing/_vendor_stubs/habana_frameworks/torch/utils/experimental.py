"""Stand-in for ``habana_frameworks.torch.utils.experimental`` (device generation).

``_get_device_type()`` answers without acquiring a device: the bridge creates a Synapse session
and counts devices by type ("This call can be made prior to device acquire",
gaudi-pytorch-bridge 1.19 ``backend/synapse_helpers/device.cpp`` l.573-590).
"""

import enum

from intelrt.testing.simulation import current as _current


class synDeviceType(enum.Enum):  # noqa: N801 - the real stack's name
    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    sim = _current()
    sim.record("hpu.get_device_type")
    return {"gaudi1": synDeviceType.synDeviceGaudi, "gaudi2": synDeviceType.synDeviceGaudi2,
            "gaudi3": synDeviceType.synDeviceGaudi3}[sim.machine.gaudi_generation()]
