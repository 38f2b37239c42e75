"""Stand-in for ``habana_frameworks.torch.core`` (gaudi-pytorch-bridge 1.19 ``torch/core/__init__.py``).

Importing it registers ``torch.hpu`` with ``torch._register_device_module`` (l.46) and the
``hpu_backend`` dynamo backend (l.55 imports ``dynamo/compile_backend/backends.py``, whose
``@register_backend`` runs in both modes); eager mode also imports the backend's custom-op meta
registrations (l.140-146, not simulated). Like the real one it sets ``HABANA_PROFILE`` when unset
(l.121-125).
"""

import os

import torch as _torch

from habana_frameworks.torch import hpu as _hpu
from intelrt.testing.simulation import current as _current

_torch._register_device_module("hpu", _hpu)

from habana_frameworks.torch.dynamo.compile_backend import backends as _backends  # noqa: E402, F401

if "HABANA_PROFILE" not in os.environ:
    os.environ["HABANA_PROFILE"] = "profile_api_light"


def mark_step() -> None:
    _current().record("hpu.mark_step")
