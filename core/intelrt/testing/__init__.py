"""Testing tools for intelrt and its plugin authors: simulated hardware and pytest fixtures.

``simulate`` fakes the vendor runtime only (``torch.xpu``, ``habana_frameworks``, versions,
environment); intelrt's own functions are never patched. A simulated machine is a
:class:`~intelrt.testing.machine.Machine` (plain data).
"""

from .machine import Machine
from .simulation import Simulation, current, parse_spec, simulate

__all__ = ["Machine", "Simulation", "current", "parse_spec", "simulate"]
