"""Stand-in for the Intel Gaudi software stack (``habana-torch-plugin``), for simulation only.

It answers from :func:`intelrt.testing.simulation.current`. In a child process of a simulation
(a probe, a launched rank) it reads the simulated machine from the environment and reports what
it saw back to the parent (``Simulation.children()``). Like the real package it has no
``__version__``: the version is the ``habana-torch-plugin`` distribution's.

Importing this package is not loading the stack: torch's backend autoload imports
``habana_frameworks.autoload`` — and so this package — at every ``import torch``, lazy mode
included. The stack loads with ``habana_frameworks.torch``, which records the environment it was
imported under (``Simulation.import_env``, for SPEC H3).
"""

from intelrt.testing.simulation import current as _current

_current().record("habana_frameworks.package")
