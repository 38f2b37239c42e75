"""Stand-in for the Intel Gaudi software stack (``habana-torch-plugin``), for simulation only.

It answers from :func:`intelrt.testing.simulation.current` and records the environment it was
imported under, so tests can prove what was set *before* the stack loaded (SPEC H3).
"""

import os

from intelrt.testing.simulation import current as _current

_sim = _current()
if _sim.import_env is None:
    _sim.import_env = dict(os.environ)
_sim.record("habana_frameworks.import")
