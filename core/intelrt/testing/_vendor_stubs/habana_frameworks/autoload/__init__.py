"""Stand-in for ``habana_frameworks.autoload``: the ``torch.backends`` entry point of the Gaudi wheel.

torch runs every ``torch.backends`` entry point at ``import torch`` (``torch/__init__.py``
l.3017-3077, unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``); this one imports
``habana_frameworks.torch`` when autoload is enabled (gaudi-pytorch-bridge 1.19
``autoload/__init__.py`` l.23-44): ``PT_HPU_AUTOLOAD=1`` / ``0`` decide, else autoload is off in
lazy mode and on in eager mode. 1.19 reads an unset ``PT_HPU_LAZY_MODE`` as lazy; the stand-in
reads it as the installed stack does (eager from 1.21).
"""

import os

from intelrt.testing.simulation import current as _current

is_loaded = False  # set by habana_frameworks.torch when it is imported, explicitly or by this entry point


def is_autoload_enabled() -> bool:
    autoload_env = os.getenv("PT_HPU_AUTOLOAD", "-1")
    if autoload_env == "1":
        return True
    if autoload_env == "0":
        return False
    return os.getenv("PT_HPU_LAZY_MODE", _current().machine.stack_default_mode()) == "0"


def __autoload() -> None:  # noqa: N807 - the entry point's name in the real wheel
    if is_loaded or not is_autoload_enabled():
        return
    _current().record("habana_frameworks.autoload")
    import habana_frameworks.torch  # noqa: F401
