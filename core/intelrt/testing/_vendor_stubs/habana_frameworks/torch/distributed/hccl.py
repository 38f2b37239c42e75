"""Stand-in for ``habana_frameworks.torch.distributed.hccl``.

The real module registers the ``hccl`` process-group backend with ``torch.distributed``;
accelerate imports it (``is_hpu_available(init_hccl=True)``) before picking ``hccl``. The
stand-in only records the import: no collective runs under simulation.
"""

from intelrt.testing.simulation import current as _current

_current().record("hccl.import")
