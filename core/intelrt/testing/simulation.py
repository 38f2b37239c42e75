"""Simulated vendor runtimes: fake ``torch.xpu`` and a stand-in ``habana_frameworks``.

Only the vendor boundary is faked — torch's device-runtime calls, the Gaudi stack, installed
package versions and environment variables — so intelrt's own probing code runs unchanged, the
same code that runs on real hardware. Use it as a context manager or through the ``simulate``
pytest fixture::

    with simulate("xpu", count=4, bf16=False, torch_version="2.7.0"):
        plan = intelrt.plan(path)

The simulated driver reads its visibility variable (``ZE_AFFINITY_MASK``,
``HABANA_VISIBLE_MODULES``) the first time a device is counted, like the real one, and ignores
later changes until the simulation ends.

A simulated Gaudi machine also reaches child processes (a detection probe, a launched rank): the
machine's description travels in the ``INTELRT_SIMULATION`` environment variable, the stand-in
stack in the child reads it, and what the child's stack saw (its environment at import, its
calls) comes back through :meth:`Simulation.children`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import ConfigurationError

KINDS = ("xpu", "hpu")
GAUDI_GENERATIONS = ("gaudi1", "gaudi2", "gaudi3")
MAX_SIMULATED_DEVICES = 64
"""More devices than one node holds (8 Gaudis; up to 8 cards x 2 tiles of Intel GPUs): ``--simulate`` refuses more."""
_STUBS = Path(__file__).parent / "_vendor_stubs"
_DEFAULT_NAMES = {"xpu": "Intel(R) Data Center GPU Max 1550", "hpu": "GAUDI2"}
_DEFAULT_MEMORY_GIB = {"xpu": 64.0, "hpu": 96.0}
# Which module each distribution provides, for hiding an uninstalled one.
_MODULE_OF = {"habana-torch-plugin": "habana_frameworks"}
#: Carries a simulated machine to child processes (see :func:`current`).
CHILD_VAR = "INTELRT_SIMULATION"
#: What the real Gaudi stack (and transformers' ``is_torch_hpu_available``) patches on torch;
#: a Gaudi simulation puts them back when it ends.
_TORCH_PATCHED_BY_GAUDI = (("", "compile"), ("", "gather"), ("", "take_along_dim"), ("", "scatter"),
                           ("Tensor", "gather"), ("Tensor", "scatter"), ("linalg", "cholesky"))
#: Modules whose cached answers ("is there a Gaudi?") depend on the simulated machine.
_CACHED_PROBES = ("transformers.utils.import_utils", "accelerate.utils.imports")


@dataclass
class Simulation:
    """The facts of a simulated machine; the stubs read them while the simulation is active."""

    kind: str
    count: int
    generation: str | None = None
    name: str | None = None
    memory_gib: float | None = None
    bf16: bool = True
    torch_version: str | None = None
    packages: Mapping[str, str | None] = field(default_factory=dict)
    env: Mapping[str, str | None] = field(default_factory=dict)
    xpu_build: bool = True
    """False simulates a torch build without XPU support (``torch.version.xpu is None``)."""
    calls: list[str] = field(default_factory=list)
    """Every vendor-runtime call made while active (``"xpu.device_count"`` …): tests can check
    what touched the device."""
    import_env: dict[str, str] | None = None
    """For ``hpu``: a copy of ``os.environ`` taken when ``habana_frameworks`` was first imported
    in this process (``None``: this process never imported it)."""
    child_log: str | None = None
    """For ``hpu``: where child processes of the simulation report what their stack saw."""
    _visible: list[int] | None = None

    # -- the simulated driver ------------------------------------------------------------
    def visible_ids(self) -> list[int]:
        """Physical ids the driver exposes, fixed at first use (driver load)."""
        if self._visible is None:
            var = "ZE_AFFINITY_MASK" if self.kind == "xpu" else "HABANA_VISIBLE_MODULES"
            self._visible = _parse_visibility(os.environ.get(var), self.count)
            if self.kind == "hpu" and os.environ.get("HABANA_VISIBLE_DEVICES") and var not in os.environ:
                self._visible = _parse_visibility(os.environ.get("HABANA_VISIBLE_DEVICES"), self.count)
        return self._visible

    def device_name(self) -> str:
        if self.name:
            return self.name
        if self.kind == "hpu":
            return (self.generation or "gaudi2").upper()
        return _DEFAULT_NAMES[self.kind]

    def total_memory(self) -> int:
        gib = self.memory_gib if self.memory_gib is not None else _DEFAULT_MEMORY_GIB[self.kind]
        return int(gib * 1024**3)

    def record(self, call: str) -> None:
        self.calls.append(call)

    def children(self) -> list[dict[str, Any]]:
        """What the stand-in stack saw in each child process that imported it (probes, ranks):
        ``[{"pid": ..., "import_env": {...}, "calls": [...]}, ...]`` in the order they ended."""
        if not self.child_log or not os.path.exists(self.child_log):
            return []
        with open(self.child_log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def describe(self) -> str:
        """The machine as JSON, for :data:`CHILD_VAR`."""
        return json.dumps({"kind": self.kind, "count": self.count, "generation": self.generation,
                           "name": self.name, "memory_gib": self.memory_gib, "bf16": self.bf16,
                           "child_log": self.child_log})


def _parse_visibility(value: str | None, count: int) -> list[int]:
    """What a driver makes of a visibility mask: unknown or malformed entries are dropped."""
    if value is None:
        return list(range(count))
    ids: list[int] = []
    for part in value.split(","):
        part = part.strip().split(".")[0]
        if part.isascii() and part.isdigit() and int(part) < count and int(part) not in ids:
            ids.append(int(part))
    return ids


_active: Simulation | None = None


def current() -> Simulation:
    """The active simulation (the vendor stubs call this).

    In a child process of a simulation (``INTELRT_SIMULATION`` set) the machine is rebuilt from
    the environment, and what the child's stack saw is reported to the parent when it exits.
    """
    global _active
    if _active is None and os.environ.get(CHILD_VAR):
        _active = _from_parent(os.environ[CHILD_VAR])
    if _active is None:
        raise RuntimeError("no intelrt simulation is active")
    return _active


def _from_parent(description: str) -> Simulation:
    try:
        facts = json.loads(description)
        sim = Simulation(kind=facts["kind"], count=facts["count"], generation=facts.get("generation"),
                         name=facts.get("name"), memory_gib=facts.get("memory_gib"), bf16=facts.get("bf16", True),
                         child_log=facts.get("child_log"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(
            f"{CHILD_VAR}={description[:80]!r} does not describe a simulated machine ({type(exc).__name__}: {exc}); "
            f"intelrt.testing.simulate sets it for its child processes only: unset {CHILD_VAR}") from None
    if sim.kind not in KINDS or not isinstance(sim.count, int) or isinstance(sim.count, bool) or sim.count < 0:
        raise ConfigurationError(f"{CHILD_VAR}={description[:80]!r}: kind must be one of {KINDS} and count an "
                                 f"int >= 0; unset {CHILD_VAR}")

    def report() -> None:
        if sim.child_log and (sim.import_env is not None or sim.calls):
            line = json.dumps({"pid": os.getpid(), "import_env": sim.import_env, "calls": sim.calls})
            with open(sim.child_log, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    atexit.register(report)
    return sim


def _clear_cached_probes() -> None:
    """Forget transformers' and accelerate's cached "is there a Gaudi?" answers (and accelerate's
    device state), so they ask the machine that is simulated now."""
    for name in _CACHED_PROBES:
        module = sys.modules.get(name)
        for value in vars(module).values() if module is not None else ():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


def _xpu_namespace(sim: Simulation) -> dict[str, Any]:
    def is_available() -> bool:
        sim.record("xpu.is_available")
        return sim.xpu_build and bool(sim.visible_ids())

    def device_count() -> int:
        sim.record("xpu.device_count")
        return len(sim.visible_ids()) if sim.xpu_build else 0

    def _check(index: Any) -> int:
        if isinstance(index, str):  # "xpu", "xpu:1"
            index = int(index.partition(":")[2] or 0)
        i = 0 if index is None else (index.index or 0 if hasattr(index, "index") else int(index))
        if not 0 <= i < len(sim.visible_ids()):
            raise RuntimeError(f"XPU device index {i} out of range (simulated, {len(sim.visible_ids())} visible)")
        return i

    def get_device_name(index: Any = None) -> str:
        sim.record("xpu.get_device_name")
        _check(index)
        return sim.device_name()

    def get_device_properties(index: Any = None) -> SimpleNamespace:
        sim.record("xpu.get_device_properties")
        _check(index)
        return SimpleNamespace(name=sim.device_name(), total_memory=sim.total_memory(),
                               has_fp64=True, driver_version="1.6.simulated", platform_name="Intel(R) oneAPI Unified Runtime over Level-Zero")

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        sim.record("xpu.is_bf16_supported")
        return sim.bf16

    current = [0]  # the device torch.xpu.set_device() chose (TrainingArguments / accelerate call it)

    def set_device(device: Any) -> None:
        sim.record("xpu.set_device")
        current[0] = _check(device)

    def current_device() -> int:
        sim.record("xpu.current_device")
        return current[0]

    return {"is_available": is_available, "device_count": device_count, "get_device_name": get_device_name,
            "get_device_properties": get_device_properties, "is_bf16_supported": is_bf16_supported,
            "set_device": set_device, "current_device": current_device}


class _Patcher:
    """Set attributes / dict items and put them back, in reverse order."""

    _MISSING = object()

    def __init__(self) -> None:
        self._undo: list[Any] = []

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        old = getattr(obj, name, self._MISSING)
        self._undo.append(lambda: delattr(obj, name) if old is self._MISSING else setattr(obj, name, old))
        setattr(obj, name, value)

    def setitem(self, mapping: Any, key: str, value: Any) -> None:
        old = mapping.get(key, self._MISSING) if hasattr(mapping, "get") else self._MISSING
        def undo() -> None:
            if old is self._MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old
        self._undo.append(undo)
        if value is None and mapping is os.environ:
            mapping.pop(key, None)
        else:
            mapping[key] = value

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def _fake_distributions(packages: Mapping[str, str | None], patcher: _Patcher, root: Path) -> None:
    """Make ``importlib.metadata`` report the given versions; ``None`` hides a package."""
    for dist, version in packages.items():
        module = _MODULE_OF.get(dist, dist.replace("-", "_"))
        if version is None:
            patcher.setitem(sys.modules, module, None)  # import fails, find_spec → None
            continue
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    sys.path.insert(0, str(root))


@contextlib.contextmanager
def simulate(kind: str, count: int = 1, *, generation: str | None = None, name: str | None = None,
             memory_gib: float | None = None, bf16: bool | None = None, torch_version: str | None = None,
             packages: Mapping[str, str | None] | None = None, env: Mapping[str, str | None] | None = None,
             xpu_build: bool = True, xpu_graphs: bool = True) -> Iterator[Simulation]:
    """Pretend this machine has ``count`` devices of ``kind`` (``"xpu"`` or ``"hpu"``).

    :param generation: Gaudi generation, ``"gaudi1"``, ``"gaudi2"`` (default) or ``"gaudi3"``.
    :param bf16: what ``torch.xpu.is_bf16_supported()`` answers (default True).
    :param torch_version: what ``torch.__version__`` reports.
    :param packages: distribution → version to report, or ``None`` to make it not installed.
    :param env: environment variables to set (``None`` unsets) for the simulation's duration.
    :param xpu_graphs: False simulates a torch without XPU graphs (``torch.xpu.XPUGraph`` absent).
    """
    global _active
    if kind not in KINDS:
        raise ValueError(f"simulate() kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"simulate() count must be an int >= 0, got {count!r}")
    if generation is not None and generation not in GAUDI_GENERATIONS:
        raise ValueError(f"generation must be one of {GAUDI_GENERATIONS}, got {generation!r}")
    if _active is not None:
        raise RuntimeError("a simulation is already active; nest none")
    sim = Simulation(kind=kind, count=count, generation=generation or ("gaudi2" if kind == "hpu" else None),
                     name=name, memory_gib=memory_gib, bf16=True if bf16 is None else bf16,
                     torch_version=torch_version, packages=dict(packages or {}), env=dict(env or {}),
                     xpu_build=xpu_build)
    import torch

    patcher = _Patcher()
    tmp = tempfile.TemporaryDirectory(prefix="intelrt-sim-")
    path_before = list(sys.path)
    try:
        for key, value in sim.env.items():
            patcher.setitem(os.environ, key, value)
        if torch_version is not None:
            patcher.setattr(torch, "__version__", torch.torch_version.TorchVersion(torch_version))
        packages = dict(sim.packages)
        if kind == "xpu":
            for attr, fn in _xpu_namespace(sim).items():
                patcher.setattr(torch.xpu, attr, fn)
            patcher.setattr(torch.version, "xpu", "20250301" if xpu_build else None)
            if not xpu_graphs:  # a torch older than the XPU graph API
                patcher.setattr(torch.xpu, "XPUGraph", None)
                patcher.setattr(torch.xpu, "graph", None)
            _clear_cached_probes()  # transformers/accelerate cache "is there an XPU?" (lru_cache)
        else:
            packages.setdefault("habana-torch-plugin", "1.22.0")
            sim.child_log = str(Path(tmp.name) / "children.jsonl")
            patcher.setitem(os.environ, CHILD_VAR, sim.describe())
            for owner, attr in _TORCH_PATCHED_BY_GAUDI:
                target = getattr(torch, owner) if owner else torch
                patcher.setattr(target, attr, getattr(target, attr))
            _clear_cached_probes()
        _fake_distributions(packages, patcher, Path(tmp.name))
        if kind == "hpu" and packages.get("habana-torch-plugin") is not None:
            sys.path.insert(0, str(_STUBS))
        importlib.invalidate_caches()
        _active = sim
        yield sim
    finally:
        _active = None
        for mod in [m for m in sys.modules if m == "habana_frameworks" or m.startswith("habana_frameworks.")]:
            if sys.modules[mod] is not None:
                del sys.modules[mod]
        if hasattr(torch, "hpu") and getattr(torch.hpu, "__intelrt_stub__", False):
            delattr(torch, "hpu")
        patcher.undo()
        sys.path[:] = path_before
        importlib.invalidate_caches()
        if kind in ("hpu", "xpu"):
            _clear_cached_probes()
        tmp.cleanup()


def parse_spec(spec: str) -> dict[str, Any]:
    """``"xpu:4"``, ``"hpu:8:gaudi1"`` → keyword arguments for :func:`simulate` (CLI ``--simulate``);
    anything else → :class:`~intelrt.errors.ConfigurationError` (a ``ValueError``)."""
    usage = "use KIND[:COUNT[:GENERATION]] with KIND xpu or hpu, e.g. xpu:2 or hpu:8:gaudi3"
    parts = spec.split(":")
    kind = parts[0]
    if kind not in KINDS or len(parts) > 3:
        raise ConfigurationError(f"--simulate {spec!r}: {usage}")
    kwargs: dict[str, Any] = {"kind": kind, "count": 1}
    if len(parts) > 1:
        if not (parts[1].isascii() and parts[1].isdigit()):
            raise ConfigurationError(f"--simulate {spec!r}: COUNT must be a whole number; {usage}")
        kwargs["count"] = int(parts[1])
        if kwargs["count"] > MAX_SIMULATED_DEVICES:
            raise ConfigurationError(f"--simulate {spec!r}: COUNT must be <= {MAX_SIMULATED_DEVICES} (more devices "
                                     "than any one machine has)")
    if len(parts) > 2:
        if kind != "hpu":
            raise ConfigurationError(f"--simulate {spec!r}: GENERATION is a Gaudi generation, for hpu only "
                                     f"(e.g. hpu:8:gaudi3); for xpu give KIND:COUNT")
        if parts[2] not in GAUDI_GENERATIONS:
            raise ConfigurationError(f"--simulate {spec!r}: GENERATION must be one of {', '.join(GAUDI_GENERATIONS)}")
        kwargs["generation"] = parts[2]
    return kwargs
