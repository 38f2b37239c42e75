"""Testing tools for intelrt and its plugin authors: simulated hardware and pytest fixtures.

``simulate`` fakes the vendor runtime only (``torch.xpu``, ``habana_frameworks``, versions,
environment); intelrt's own functions are never patched.
"""

from .simulation import Simulation, current, parse_spec, simulate

__all__ = ["Simulation", "current", "parse_spec", "simulate"]
