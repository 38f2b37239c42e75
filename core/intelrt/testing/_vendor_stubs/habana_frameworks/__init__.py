"""Stand-in for the Intel Gaudi software stack (``habana-torch-plugin``), for simulation only.

It answers from :func:`intelrt.testing.simulation.current` and records the environment it was
imported under, so tests can prove what was set *before* the stack loaded (SPEC H3). In a child
process of a simulation (a probe, a launched rank) it reads the simulated machine from the
environment and reports what it saw back to the parent (``Simulation.children()``). Like the real
package it has no ``__version__``: the version is the ``habana-torch-plugin`` distribution's.
"""

import os

from intelrt.testing.simulation import current as _current

_sim = _current()
if _sim.import_env is None:
    _sim.import_env = dict(os.environ)
_sim.record("habana_frameworks.import")
