"""Stand-in for ``habana_frameworks.torch``: importing it registers ``torch.hpu`` like the real one."""

import torch as _torch

from . import core, distributed, hpu, utils  # noqa: F401

_torch.hpu = hpu  # type: ignore[attr-defined]
