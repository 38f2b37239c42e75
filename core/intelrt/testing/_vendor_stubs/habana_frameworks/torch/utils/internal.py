"""Stand-in for ``habana_frameworks.torch.utils.internal`` (the execution mode).

``is_lazy()`` reads ``PT_HPU_LAZY_MODE`` once per process, as the bridge does
(gaudi-pytorch-bridge 1.19 ``utils/internal.py`` l.25-31: ``os.getenv("PT_HPU_LAZY_MODE", "1") != "0"``,
cached). The default follows the installed stack: lazy (``1``) up to 1.20, eager (``0``) from
1.21, when Intel made eager mode the default (:meth:`~intelrt.testing.machine.Machine.stack_default_mode`).
"""

from __future__ import annotations

import os

from intelrt.testing.simulation import current as _current


def is_lazy() -> bool:
    if is_lazy._is_lazy is None:  # type: ignore[attr-defined]
        default = _current().machine.stack_default_mode()
        is_lazy._is_lazy = os.getenv("PT_HPU_LAZY_MODE", default) != "0"  # type: ignore[attr-defined]
    return bool(is_lazy._is_lazy)  # type: ignore[attr-defined]


is_lazy._is_lazy = None  # type: ignore[attr-defined]
