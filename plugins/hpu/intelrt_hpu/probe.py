"""Ask the Gaudi stack how many devices there are, acquiring none, and without loading the stack
too early (SPEC H3, H5).

**Nothing here acquires a Gaudi.** A Gaudi belongs to one process (optimum-habana#367; tgi-gaudi#54:
``synStatus=20 [Device already acquired]``), so detection in the user's process or in the launcher
would take the module a rank needs, and fail on a busy server. Only the calls the bridge answers
"prior to device acquire" are made: ``torch.hpu.is_available()``, ``device_count()`` and
``utils.experimental._get_device_type()`` (gaudi-pytorch-bridge 1.19 ``backend/synapse_helpers/device.cpp``
l.556-590). ``get_device_name``, ``get_device_properties`` and ``mem_get_info`` run ``_lazy_init()``
first, which acquires (``torch/hpu/__init__.py`` l.67-91): the device's name comes from its
generation (what ``get_device_name`` answers: ``GAUDI``, ``GAUDI2``, ``GAUDI3``) and its memory from
the generation's nominal HBM (:data:`~intelrt_hpu.facts.GAUDI_HBM_BYTES`).

**Where to ask.** The stack reads ``PT_ENABLE_INT64_SUPPORT`` once, when ``habana_frameworks.torch``
is imported, and intelrt may write ``os.environ`` only in ``setup_env()`` / ``load()``. Hence:

* the stack is already loaded in this process (``habana_frameworks.torch`` imported: by the user,
  or by ``import torch`` in eager mode, whose ``torch.backends`` autoload imports it): ask it here —
  nothing left to protect. Importing the ``habana_frameworks`` *package* is not loading the stack:
  torch imports ``habana_frameworks.autoload`` at every ``import torch``, lazy mode included;
* ``PT_ENABLE_INT64_SUPPORT`` is already in this process's environment (the user exported it, as
  the Gaudi guide says; intelrt keeps the user's value anyway): importing now changes nothing, so
  ask here;
* otherwise ask in a child process (``python -m intelrt_hpu.probe``) whose environment has
  ``PT_ENABLE_INT64_SUPPORT=1``; this process stays free of the stack until ``setup_env()``.

Run as a module it prints the answer as JSON (the child side of the probe).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .facts import DEVICE_NAMES, GAUDI_HBM_BYTES, GENERATION_NAMES, INT64_VAR, STACK_LOADED_MODULE

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
"""The real stack can take a while to initialise; a probe that takes longer has hung."""

_DEVICE_TYPES = {"synDeviceGaudi": "gaudi1", "synDeviceGaudi2": "gaudi2", "synDeviceGaudi3": "gaudi3"}


@dataclass(frozen=True)
class ProbeResult:
    """What the Gaudi stack answered, and how it was asked."""

    available: bool
    names: tuple[str, ...] = ()
    total_memory: int | None = None
    """Bytes per Gaudi: the generation's nominal HBM (the stack reports memory only after acquiring)."""
    generation: str | None = None
    how: str = ""
    """``in-process`` or ``child process``."""
    error: str | None = None
    """Why the stack could not answer (import error, crash, timeout)."""


def stack_loaded() -> bool:
    """Whether the Gaudi stack (``habana_frameworks.torch``) is already imported in this process."""
    return sys.modules.get(STACK_LOADED_MODULE) is not None


def _ask_stack() -> dict[str, Any]:
    """Import the stack in *this* process and ask it what it answers before any device is
    acquired (the probe's core; no intelrt imports)."""
    import habana_frameworks.torch  # noqa: F401 - registers torch.hpu
    import habana_frameworks.torch.hpu as hthpu

    available = bool(hthpu.is_available())
    count = int(hthpu.device_count()) if available else 0
    generation = None
    if count:
        try:
            from habana_frameworks.torch.utils import experimental as htexp

            kind = htexp._get_device_type()
            generation = next((g for attr, g in _DEVICE_TYPES.items()
                               if getattr(htexp.synDeviceType, attr, object()) == kind), None)
        except (ImportError, AttributeError, RuntimeError):
            generation = None
    name = DEVICE_NAMES.get(generation or "", "GAUDI (generation unknown)")
    return {"available": available and count > 0, "names": [name] * count,
            "total_memory": GAUDI_HBM_BYTES.get(generation or ""), "generation": generation}


def _result(answer: Mapping[str, Any], how: str) -> ProbeResult:
    generation = answer.get("generation")
    return ProbeResult(available=bool(answer.get("available")), names=tuple(answer.get("names") or ()),
                       total_memory=answer.get("total_memory"),
                       generation=generation if generation in GENERATION_NAMES else None, how=how)


def safe_in_process(environ: Mapping[str, str] | None = None) -> bool:
    """Whether importing the stack in this process now cannot break SPEC H3."""
    environ = os.environ if environ is None else environ
    return stack_loaded() or environ.get(INT64_VAR) is not None


_cache: dict[tuple[Any, ...], ProbeResult] = {}
_cache_lock = threading.Lock()


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The probe child's environment: the run's, with int64 support on, seeing this process's modules."""
    child = dict(env)
    child.setdefault(INT64_VAR, "1")
    # The child must import the same habana_frameworks this process would (venvs, editable
    # installs, paths added at run time), so it gets this process's module search path.
    child["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return child


def probe(env: Mapping[str, str]) -> ProbeResult:
    """Ask the stack for its devices, in this process when that is safe, else in a child."""
    if safe_in_process():
        try:
            return _result(_ask_stack(), "in-process")
        except Exception as exc:  # noqa: BLE001 - a broken stack is reported, not raised (detection)
            return ProbeResult(False, how="in-process", error=f"{type(exc).__name__}: {exc}")
    child_env = child_environment(env)
    key = (sys.executable, tuple(sorted(child_env.items())))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    result = _probe_child(child_env)
    if result.error is None:
        with _cache_lock:
            _cache[key] = result
    return result


def _probe_child(child_env: dict[str, str]) -> ProbeResult:
    how = "child process"
    log.debug("probing the Gaudi stack in a child process (%s=%s)", INT64_VAR, child_env[INT64_VAR])
    try:
        done = subprocess.run([sys.executable, "-m", "intelrt_hpu.probe"], env=child_env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(False, how=how, error=f"the probe did not answer within {PROBE_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return ProbeResult(False, how=how, error=f"could not start {sys.executable}: {exc}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(False, how=how, error=f"exit status {done.returncode}: {tail}")
    try:
        return _result(json.loads(lines[-1]), how)
    except (ValueError, TypeError) as exc:
        return ProbeResult(False, how=how, error=f"unreadable answer {lines[-1]!r:.200}: {exc}")


def main() -> int:
    """Child side: print the stack's answer as one JSON line; exit 1 with the error on stderr."""
    try:
        answer = _ask_stack()
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
