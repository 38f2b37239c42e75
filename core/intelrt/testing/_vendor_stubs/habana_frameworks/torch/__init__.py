"""Stand-in for ``habana_frameworks.torch`` (gaudi-pytorch-bridge 1.19 ``habana_frameworks/torch/__init__.py``).

Importing it loads the stack: the environment is recorded (``Simulation.import_env``). Like the
real one, it then sets ``TORCHINDUCTOR_COMPILE_THREADS=1`` in the process
(l.23, so inductor starts no compile-worker pool); marks the autoload entry point as done
(l.26-28); refuses lazy mode on stock PyTorch — the bridge tells Gaudi's fork by a local version
label starting with ``git`` (l.40-48: ``Stock PyTorch version ... is not supported in Lazy mode``;
a version with no local label at all fails on ``None.startswith`` there too); then imports
``core`` (which registers ``torch.hpu``), ``distributed.hccl`` and ``hpu`` (l.53-56).

Not simulated: the compile-time torch version check (l.37-45: the stand-in is built for whatever
torch runs) and the ``.so`` the real one loads.
"""

import os

from intelrt.testing.simulation import current as _current

_sim = _current()
if _sim.import_env is None:
    _sim.import_env = dict(os.environ)  # what the stack's flags (PT_ENABLE_INT64_SUPPORT …) are read from
_sim.record("habana_frameworks.import")

os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"

import habana_frameworks.autoload  # noqa: E402

habana_frameworks.autoload.is_loaded = True

import torch as _torch  # noqa: E402
from packaging.version import Version as _Version  # noqa: E402

from habana_frameworks.torch.utils.internal import is_lazy  # noqa: E402
from intelrt.testing.simulation import current as _current  # noqa: E402

# the simulated torch build's version (a child process of the simulation runs the real torch)
run_time_ver = _Version(_current().machine.reported_torch_version(str(_torch.__version__)) or str(_torch.__version__))
is_torch_fork = run_time_ver.local.startswith("git")  # type: ignore[union-attr]

if is_lazy():
    assert is_torch_fork, f"Stock PyTorch version {run_time_ver} is not supported in Lazy mode."

import habana_frameworks.torch.core  # noqa: E402, F401
import habana_frameworks.torch.distributed.hccl  # noqa: E402, F401
import habana_frameworks.torch.hpu  # noqa: E402, F401

from . import hpex, utils  # noqa: E402, F401
