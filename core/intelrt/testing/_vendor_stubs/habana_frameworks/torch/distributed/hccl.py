"""Stand-in for ``habana_frameworks.torch.distributed.hccl``.

The real module registers the ``hccl`` process-group backend with ``torch.distributed``;
accelerate imports it (``is_hpu_available(init_hccl=True)``) before picking ``hccl``. The
stand-in registers ``hccl`` as a Gloo group on CPU tensors, so ranks of a simulated launch
rendezvous for real.
"""

from datetime import timedelta

import torch.distributed as _dist

from intelrt.testing.simulation import current as _current

_current().record("hccl.import")


def _gloo(store: _dist.Store, rank: int, size: int, timeout: timedelta) -> object:
    return _dist.ProcessGroupGloo(store, rank, size, timeout)


if "HCCL" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("hccl", _gloo, devices=["hpu"])
