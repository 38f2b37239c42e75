"""Simulated vendor runtimes: the XPU driver under torch's own ``torch.xpu``, and a stand-in Gaudi stack.

Only the vendor boundary is faked — the ``torch._C``-level XPU calls (:mod:`.xpu_runtime`, with
the Level Zero driver model of :mod:`.level_zero`), the Gaudi software stack (``habana_frameworks``,
``_vendor_stubs/``), the vendor tools (a simulated ``hl-smi`` on ``PATH``), the torch build's
``xccl`` collective backend, installed package versions and environment variables. torch's
``torch.xpu`` Python module, transformers, accelerate and intelrt run unmodified on top, the same
code that runs on real hardware. Use it as a context manager or through the ``simulate`` pytest
fixture::

    with simulate("xpu", count=2, env={"ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"}):
        plan = intelrt.plan(path)
    with simulate(Machine("hpu", 8, generation="gaudi3", busy_modules=(0, 1))):
        ...

The machine is a :class:`~intelrt.testing.machine.Machine` (plain data); the simulation is as
strict as the real stacks: a driver reads its visibility variables (``ZE_AFFINITY_MASK``,
``ZE_FLAT_DEVICE_HIERARCHY``; ``HABANA_VISIBLE_MODULES``) once, when it first initialises in the
process; a Gaudi is held by one process at a time, across processes; in eager mode the Gaudi
stack is loaded by ``import torch`` (this process imported torch before the simulation began, so
the simulation runs torch's backend autoload when it starts). docs/backends/fidelity.md lists
every simulated behaviour with the upstream source it follows.

A simulated machine also reaches child processes (a detection probe, a launched rank): its
description travels in the ``INTELRT_SIMULATION`` environment variable. The stand-in Gaudi stack
reads it by itself; a Python child enters the same simulation with :func:`inherited`; what a
child's Gaudi stack saw comes back through :meth:`Simulation.children`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..support import startup
from . import gaudi_modules
from .machine import (
    GAUDI_GENERATIONS,
    GAUDI_STACK,
    KINDS,
    MAX_SIMULATED_DEVICES,
    XCCL_TORCH,
    XPU_GRAPHS_TORCH,
    XPU_PRODUCTS,
    Machine,
)

__all__ = ["CHILD_VAR", "GAUDI_GENERATIONS", "GAUDI_STACK", "KINDS", "MAX_SIMULATED_DEVICES", "XPU_PRODUCTS",
           "Machine", "Simulation", "current", "inherited", "parse_spec", "simulate"]

_STUBS = Path(__file__).parent / "_vendor_stubs"
_HL_SMI = Path(__file__).parent / "hl_smi.py"
# Which module each distribution provides, for hiding an uninstalled one.
_MODULE_OF = {"habana-torch-plugin": "habana_frameworks", "neural-compressor-pt": "neural_compressor",
              "optimum-quanto": "optimum.quanto"}
"""Distributions whose module is not their name with ``_`` for ``-``."""
#: The entry point the real wheel declares (gaudi-pytorch-bridge ``python_packages/setup.py`` l.91-93):
#: torch runs it at ``import torch`` (``torch/__init__.py`` l.3017-3077, ``_import_device_backends``).
_GAUDI_ENTRY_POINTS = "[torch.backends]\ndevice_backend = habana_frameworks.autoload:__autoload\n"
#: Carries a simulated machine to child processes (see :func:`current`).
CHILD_VAR = "INTELRT_SIMULATION"
#: What the real Gaudi stack (and transformers' ``is_torch_hpu_available``) patches on torch;
#: a Gaudi simulation puts them back when it ends.
_TORCH_PATCHED_BY_GAUDI = (("", "compile"), ("", "gather"), ("", "take_along_dim"), ("", "scatter"),
                           ("Tensor", "gather"), ("Tensor", "scatter"), ("linalg", "cholesky"))
#: Variables the Gaudi stack writes into its own process (``habana_frameworks/torch/__init__.py`` l.23,
#: ``core/__init__.py`` l.121-125, ``hpu/__init__.py`` l.356, ``distributed/hccl/__init__.py``
#: l.27-104): put back when the simulation ends, as a process's environment ends with it.
_ENV_WRITTEN_BY_GAUDI = ("HLS_MODULE_ID", "TORCHINDUCTOR_COMPILE_THREADS", "HABANA_PROFILE", "MASTER_ADDR",
                         "MASTER_PORT", "ID", "WORLD_SIZE", "RANK", "LOCAL_RANK")
#: Modules whose cached answers ("is there a Gaudi?", "which torch?") depend on the simulated machine.
_CACHED_PROBES = ("transformers.utils.import_utils", "accelerate.utils.imports")
#: torch.xpu's per-process state, reset so each simulation starts with an uninitialised runtime.
_XPU_STATE: dict[str, Any] = {"_initialized": False, "_cached_device_count": None, "default_generators": (),
              "_cached_zes_device_infos": []}


class Simulation:
    """One process's view of a simulated :class:`~intelrt.testing.machine.Machine`: the machine's
    facts (read through, ``sim.count``), and what the vendor runtime did in this process."""

    def __init__(self, machine: Machine | None = None, /, **facts: Any) -> None:
        self.machine: Machine = machine if machine is not None else Machine(**facts)
        self.calls: list[str] = []
        """Every vendor-runtime call made while active (``"xpu.device_count"`` …): tests can
        check what touched the device."""
        self.import_env: dict[str, str] | None = None
        """For ``hpu``: a copy of ``os.environ`` taken when ``habana_frameworks`` was first imported
        in this process (``None``: this process never imported it)."""
        self.acquired: int | None = None
        """For ``hpu``: the module id this process acquired (``None``: none yet)."""
        self.child_log: str | None = None
        """Where child processes of the simulation report what their Gaudi stack saw."""
        self.xpu_driver: Any = None
        """For ``xpu``: the simulated driver of this process (:class:`~intelrt.testing.xpu_runtime.XpuDriver`)."""
        self.state_dir: str | None = None
        """Shared by every process of the simulation: which Gaudi modules are held (lock files)."""
        self.packages: dict[str, str | None] = dict(self.machine.packages)
        """The distributions the simulation reports (the machine's, plus torch and the Gaudi stack)."""
        self._visible: list[int] | None = None

    def __getattr__(self, name: str) -> Any:
        # The machine's facts and derived facts read through (sim.count, sim.device_name()).
        if name.startswith("_") or name == "machine":
            raise AttributeError(name)
        return getattr(self.machine, name)

    def __repr__(self) -> str:
        return f"Simulation({self.machine!r})"

    def visible_ids(self) -> list[int]:
        """HPU: module ids the stack counts, fixed at its first count: ``HABANA_VISIBLE_MODULES``'s,
        else every module in device-index order (``HABANA_VISIBLE_DEVICES`` only selects what a
        container mounts)."""
        if self._visible is None:
            listed = os.environ.get("HABANA_VISIBLE_MODULES")
            self._visible = (_parse_visibility(listed, self.machine.count) if listed is not None
                             else list(self.machine.modules()))
        return self._visible

    def int64_support(self) -> bool | None:
        """HPU: whether the stack this process imported computes in int64 (``None``: not imported).

        ``PT_ENABLE_INT64_SUPPORT`` at import wins; unset, eager mode has it on except on
        first-generation Gaudi, lazy mode off (gaudi-pytorch-bridge 1.19 ``common/eager/utils.cpp``
        l.29-42, ``common/lazy/utils.cpp`` l.33-35, ``scripts/env_flags.yaml`` l.624-635)."""
        if self.import_env is None:
            return None
        value = self.import_env.get("PT_ENABLE_INT64_SUPPORT")
        if value is not None:
            return value.strip().lower() in ("1", "true", "yes", "on", "y")
        lazy = self.import_env.get("PT_HPU_LAZY_MODE", self.machine.stack_default_mode()) != "0"
        return not lazy and self.machine.gaudi_generation() != "gaudi1"

    def record(self, call: str) -> None:
        self.calls.append(call)

    def children(self) -> list[dict[str, Any]]:
        """What the stand-in stack saw in each child process that imported it (probes, ranks):
        ``[{"pid": ..., "import_env": {...}, "calls": [...]}, ...]`` in the order they ended."""
        if not self.child_log or not os.path.exists(self.child_log):
            return []
        with open(self.child_log, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def holder(self, module: int) -> str | None:
        """HPU: who holds ``module`` now — a pid, ``"tenant"`` (another tenant), or ``None`` (free)."""
        return gaudi_modules.holder(self.state_dir, module) if self.state_dir else None

    def allocate(self, device: int, size: int) -> int:
        """XPU: hold ``size`` bytes on device ``device`` the way the tensors of a load would (the
        caching allocator's path, limits and errors included); returns a handle for :meth:`free`."""
        if self.xpu_driver is None:
            raise RuntimeError("allocate() needs an active simulation of an XPU build (kind='xpu')")
        return int(self.xpu_driver.allocate(device, size))

    def free(self, handle: int) -> None:
        """XPU: release what :meth:`allocate` holds."""
        self.xpu_driver.release(handle)

    def describe(self) -> str:
        """The machine and where its processes meet, as JSON, for :data:`CHILD_VAR`."""
        return json.dumps({"machine": self.machine.to_json(), "child_log": self.child_log,
                           "state_dir": self.state_dir})


def _parse_visibility(value: str | None, count: int) -> list[int]:
    """What the Gaudi stack makes of ``HABANA_VISIBLE_MODULES``: unknown or malformed entries are dropped."""
    if value is None:
        return list(range(count))
    ids: list[int] = []
    for part in value.split(","):
        part = part.strip()
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
        _report_at_exit(_active)
    if _active is None:
        raise RuntimeError("no intelrt simulation is active")
    return _active


def _from_parent(description: str) -> Simulation:
    """The simulation :meth:`Simulation.describe` wrote; anything else → ConfigurationError."""
    try:
        facts = json.loads(description)
        if not isinstance(facts, dict) or not isinstance(facts.get("machine"), dict):
            raise TypeError("not an object with a 'machine'")
        machine = Machine.from_json(facts["machine"])
        for name in ("packages", "env"):
            mapping = getattr(machine, name)
            if not isinstance(mapping, dict) or not all(
                    isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in mapping.items()):
                raise TypeError(f"{name} must map names to strings")
        for name in ("child_log", "state_dir"):
            if facts.get(name) is not None and not isinstance(facts[name], str):
                raise TypeError(f"{name} must be a path")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(
            f"{CHILD_VAR}={description[:80]!r} does not describe a simulated machine ({type(exc).__name__}: {exc}); "
            f"intelrt.testing.simulate sets it for its child processes only: unset {CHILD_VAR}") from None
    sim = Simulation(machine)
    sim.child_log, sim.state_dir = facts.get("child_log"), facts.get("state_dir")
    return sim


def _report_at_exit(sim: Simulation) -> None:
    def report() -> None:
        if sim.state_dir:
            gaudi_modules.release_mine(sim.state_dir)
        if sim.child_log and (sim.import_env is not None or sim.calls):
            line = json.dumps({"pid": os.getpid(), "import_env": sim.import_env, "calls": sim.calls,
                               "acquired": sim.acquired})
            with open(sim.child_log, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    atexit.register(report)


def _clear_cached_probes() -> None:
    """Forget transformers' and accelerate's cached "is there a device?" answers (and accelerate's
    device state), and torch's cached accelerator module, so they ask the machine simulated now."""
    for name in _CACHED_PROBES:
        module = sys.modules.get(name)
        for value in vars(module).values() if module is not None else ():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()
    import torch

    torch.get_device_module.cache_clear()
    torch.xpu.get_device_capability.cache_clear()


def _refresh_torch_version_constants() -> None:
    """accelerate reads torch's version once, at import: make it read the (simulated or real) one again."""
    versions = sys.modules.get("accelerate.utils.versions")
    if versions is not None:
        from importlib.metadata import version

        from packaging.version import parse

        versions.torch_version = parse(version("torch"))  # type: ignore[attr-defined]


class _Patcher:
    """Set attributes / dict items and put them back, in reverse order."""

    _MISSING = object()

    def __init__(self) -> None:
        self._undo: list[Any] = []

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        old = getattr(obj, name, self._MISSING) if name in vars(obj) else self._MISSING
        self._undo.append(lambda: delattr(obj, name) if old is self._MISSING else setattr(obj, name, old))
        setattr(obj, name, value)

    def delattr(self, obj: Any, name: str) -> None:
        if name in vars(obj):
            old = vars(obj)[name]
            self._undo.append(lambda: setattr(obj, name, old))
            delattr(obj, name)

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

    def undo_with(self, action: Any) -> None:
        self._undo.append(action)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def _fake_distributions(packages: Mapping[str, str | None], patcher: _Patcher, root: Path) -> None:
    """Make ``importlib.metadata`` report the given versions; ``None`` hides a package. The Gaudi
    stack's distribution also declares its ``torch.backends`` entry point, as the real wheel does.
    A distribution given a version whose module is not importable here gets a stand-in module
    (:data:`STUB_MARK`), so version checks that look for the module (``find_spec``, as
    ``package_version`` and transformers' ``is_*_available`` do) see it installed; importing the
    stand-in gives nothing else, so only planning can use it — and not for a library transformers
    imports as soon as it looks installed (hqq: its modeling code imports ``hqq.core``)."""
    for dist, version in packages.items():
        module = _MODULE_OF.get(dist, dist.replace("-", "_"))
        if version is None:
            patcher.setitem(sys.modules, module, None)  # import fails, find_spec → None
            continue
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        if dist == "habana-torch-plugin":
            (info / "entry_points.txt").write_text(_GAUDI_ENTRY_POINTS)
        elif _missing_module(module):
            _stub_module(root, module, dist, version)
    sys.path.insert(0, str(root))


STUB_MARK = "__intelrt_stub__"
"""Set on a stand-in module the simulation writes for a faked distribution that is not installed."""


def _missing_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module.split(".")[0]) is None
    except (ImportError, ValueError):
        return True


def _stub_module(root: Path, module: str, dist: str, version: str) -> None:
    """``module`` (dotted: its packages too) as an empty package under ``root``."""
    folder = root
    for part in module.split("."):
        folder = folder / part
        folder.mkdir(exist_ok=True)
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(f'"""intelrt simulation: a stand-in for {dist} {version}, which is not installed."""\n'
                            f"{STUB_MARK} = True\n__version__ = {version!r}\n")


def _install_xpu(sim: Simulation, patcher: _Patcher, graphs: bool, xccl: bool) -> None:
    """The XPU build's ``torch._C`` calls, backed by the simulated driver (see :mod:`.xpu_runtime`)."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    from . import sysman
    from .xpu_runtime import XpuDriver, process_group_xccl

    xpu_build = sim.machine.xpu_build
    if xpu_build and sim.machine.packages.get("bitsandbytes", "") is not None:
        _import_before_the_device("bitsandbytes")
    patcher.setattr(torch._C, "_has_xpu", xpu_build)
    patcher.setattr(torch.version, "xpu", "20250301" if xpu_build else None)
    for name, value in _XPU_STATE.items():
        patcher.setattr(torch.xpu, name, type(value)(value) if isinstance(value, list) else value)
    patcher.setattr(torch.xpu, "_queued_calls", [])
    patcher.setattr(torch.xpu, "_lazy_seed_tracker", type(torch.xpu._lazy_seed_tracker)())
    patcher.delattr(torch.xpu, "_get_device_properties")
    if not xpu_build:
        return
    # torch 2.13 counts devices through Level Zero Sysman when the optional pyzes package is
    # installed (not a dependency of torch): a stand-in when the machine has it, else none.
    patcher.setitem(sys.modules, "pyzes", sysman.module(sim) if sim.machine.pyzes else None)
    driver = XpuDriver(sim)
    sim.xpu_driver = driver
    for name, function in driver.c_functions().items():
        patcher.setattr(torch._C, name, function)
    # bound from torch._C when torch.xpu is imported, so set where torch.xpu looks them up
    patcher.setattr(torch.xpu, "_exchange_device", driver.exchange_device)
    patcher.setattr(torch.xpu, "_maybe_exchange_device", driver.exchange_device)
    if not graphs:  # a torch older than the XPU graph API has no such attributes at all
        patcher.delattr(torch.xpu, "XPUGraph")
        patcher.delattr(torch.xpu, "graph")
    patcher.setattr(c10d, "_XCCL_AVAILABLE", xccl)
    if xccl:
        patcher.setattr(c10d, "ProcessGroupXCCL", process_group_xccl())


def _import_before_the_device(module: str) -> None:
    """Import ``module`` now, before the simulated XPU exists, when it is installed and not yet imported.

    For a library that builds tensors on the XPU at import: bitsandbytes puts its NF4 and FP4 code
    tables on ``xpu`` when ``torch.xpu.is_available()`` (bitsandbytes 0.50 ``backends/utils.py``
    ``_NF4_QUANT_TABLE``), and no tensor can live on the simulated ``xpu`` (a CPU build of torch has no
    XPU allocator). Imported first, it is as in a process that imported it before touching the XPU:
    its tables stay on the CPU and its XPU kernels (``backends/xpu/ops.py``) are not registered —
    neither matters to a simulation, whose tensors are all on the CPU — where importing it inside
    the simulation would fail ("PyTorch is not linked with support for xpu devices") although it
    does not on real hardware."""
    if module in sys.modules or _missing_module(module):
        return
    importlib.import_module(module)


def _install_gaudi(sim: Simulation, patcher: _Patcher, root: Path) -> None:
    """What a Gaudi host has outside Python (``hl-smi``, other tenants' modules) and what its stack
    changes in a process (environment, torch functions, checkpointing's device type), undone at the end."""
    import torch
    import torch.utils.checkpoint as checkpoint

    _install_hl_smi(patcher, root)
    for name in _ENV_WRITTEN_BY_GAUDI:
        patcher.setitem(os.environ, name, os.environ.get(name))
    for owner, attr in _TORCH_PATCHED_BY_GAUDI:
        target = getattr(torch, owner) if owner else torch
        patcher.setattr(target, attr, getattr(target, attr))
    patcher.setattr(checkpoint.DefaultDeviceType, "_default_device_type",
                    checkpoint.DefaultDeviceType.get_device_type())
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:  # a config module: its values live outside vars(), so undo by hand
        threads = inductor.compile_threads
        patcher.undo_with(lambda: setattr(inductor, "compile_threads", threads))
    assert sim.state_dir is not None
    gaudi_modules.mark_busy(sim.state_dir, sim.machine.busy_modules)


def _install_hl_smi(patcher: _Patcher, root: Path) -> None:
    """Put a simulated ``hl-smi`` first on ``PATH`` (it reads the machine from :data:`CHILD_VAR`)."""
    tools = root / "bin"
    tools.mkdir()
    tool = tools / "hl-smi"
    tool.write_text(f"#!/bin/sh\nexec {json.dumps(sys.executable)} {json.dumps(str(_HL_SMI))} \"$@\"\n")
    tool.chmod(0o755)
    patcher.setitem(os.environ, "PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")


def _at_least(version: str | None, floor: str) -> bool:
    from ..support.versions import at_least

    return version is None or at_least(version, floor)


@contextlib.contextmanager
def simulate(kind: str | Machine, count: int = 1, *, generation: str | None = None, product: str | None = None,
             name: str | None = None, tiles: int | None = None, memory_gib: float | None = None,
             bf16: bool | None = None, torch_version: str | None = None, torch_fork: bool = False,
             packages: Mapping[str, str | None] | None = None, env: Mapping[str, str | None] | None = None,
             mode: str | None = None, xpu_build: bool = True, xpu_graphs: bool | None = None,
             xccl: bool | None = None, module_ids: Sequence[int] | None = None,
             busy_modules: Sequence[int] = (), memory_used_gib: float = 0.0,
             pyzes: bool = False) -> Iterator[Simulation]:
    """Pretend this machine has ``count`` devices of ``kind`` (``"xpu"`` or ``"hpu"``), or is ``kind``
    when it is a :class:`~intelrt.testing.machine.Machine` (then no other argument is allowed).

    :param count: XPU: GPU cards (a Max 1550 card is 2 devices in FLAT mode); HPU: Gaudis.
    :param generation: Gaudi generation, ``"gaudi1"``, ``"gaudi2"`` (default) or ``"gaudi3"``.
    :param product: XPU product, one of :data:`XPU_PRODUCTS` (default ``"max1550"``).
    :param name: device name (an XPU name not in :data:`XPU_PRODUCTS` is a one-tile GPU).
    :param tiles: XPU tiles per card (default: the product's).
    :param memory_gib: XPU memory per tile (a Gaudi's is its generation's HBM: refused for ``hpu``).
    :param bf16: XPU native bfloat16 (``has_bfloat16_conversions``, default True).
    :param torch_version: the torch version reported by ``torch.__version__`` and package metadata,
        as given (default: the installed torch's, ``+xpu`` on an XPU build as its wheels name it).
    :param torch_fork: HPU: Gaudi's PyTorch fork (``…a0+git…``), the only torch lazy mode runs on.
    :param packages: distribution → version to report, or ``None`` to make it not installed.
    :param env: environment variables to set (``None`` unsets) for the simulation's duration.
    :param mode: HPU execution mode, ``"lazy"`` or ``"eager"`` (default: the stack's).
    :param xpu_build: False simulates a torch without XPU support.
    :param xpu_graphs: whether torch has XPU graphs (default: torch >= 2.11).
    :param xccl: whether torch has the ``xccl`` backend (default: an XPU build of torch >= 2.8).
    :param module_ids: HPU module id of each device index, as ``hl-smi`` lists them.
    :param busy_modules: HPU module ids other tenants hold.
    :param memory_used_gib: XPU memory other processes use on each device.
    :param pyzes: XPU: the optional ``pyzes`` package is installed (torch counts without loading the driver).
    """
    if isinstance(kind, Machine):
        machine = kind
    else:
        machine = Machine(kind=kind, count=count, generation=generation, product=product, name=name, tiles=tiles,
                          memory_gib=memory_gib, bf16=True if bf16 is None else bf16, torch_version=torch_version,
                          torch_fork=torch_fork, packages=dict(packages or {}), env=dict(env or {}), mode=mode,
                          xpu_build=xpu_build, xpu_graphs=xpu_graphs, xccl=xccl,
                          module_ids=tuple(module_ids) if module_ids is not None else None,
                          busy_modules=tuple(busy_modules), memory_used_gib=memory_used_gib, pyzes=pyzes)
    if _active is not None:
        raise RuntimeError("a simulation is already active; nest none")
    with _active_simulation(Simulation(machine)) as active:
        yield active


@contextlib.contextmanager
def _active_simulation(sim: Simulation) -> Iterator[Simulation]:
    global _active
    import torch

    machine = sim.machine
    patcher = _Patcher()
    tmp = tempfile.TemporaryDirectory(prefix="intelrt-sim-")
    path_before = list(sys.path)
    try:
        for key, value in machine.environment().items():
            patcher.setitem(os.environ, key, value)
        packages = dict(machine.packages)
        installed = str(torch.__version__)  # simulations do not nest: this is the real one
        reported = machine.reported_torch_version(installed)
        if reported is not None:
            patcher.setattr(torch, "__version__", torch.torch_version.TorchVersion(reported))
            packages["torch"] = reported
        torch_version = reported or installed
        if sim.child_log is None:
            sim.child_log = str(Path(tmp.name) / "children.jsonl")
        if sim.state_dir is None:
            sim.state_dir = str(Path(tmp.name) / "state")
            Path(sim.state_dir).mkdir()
        if machine.kind == "xpu":
            graphs = _at_least(torch_version, XPU_GRAPHS_TORCH) if machine.xpu_graphs is None else machine.xpu_graphs
            xccl = (machine.xpu_build and _at_least(torch_version, XCCL_TORCH)) if machine.xccl is None \
                else machine.xccl
            _install_xpu(sim, patcher, graphs, xccl)
        else:
            packages.setdefault("habana-torch-plugin", GAUDI_STACK)
            _install_gaudi(sim, patcher, Path(tmp.name))
        sim.packages = packages
        patcher.setitem(os.environ, CHILD_VAR, sim.describe())
        _fake_distributions(packages, patcher, Path(tmp.name))
        if machine.kind == "hpu" and packages.get("habana-torch-plugin") is not None:
            sys.path.insert(0, str(_STUBS))
        importlib.invalidate_caches()
        _refresh_torch_version_constants()
        _clear_cached_probes()
        _active = sim
        # The simulation stands for a process start: intelrt's snapshot of the user's environment is
        # taken now, before the Gaudi stack (autoloaded just below) writes its own values.
        snapshot = startup.restart()
        patcher.undo_with(lambda: startup.restore(snapshot))
        if machine.kind == "hpu" and torch._is_device_backend_autoload_enabled():
            # This process imported torch before the simulation began: what `import torch` runs for
            # the installed backends (the Gaudi stack's entry point) has to run now.
            torch._import_device_backends()
        yield sim
    finally:
        _active = None
        if sim.state_dir:
            gaudi_modules.release_mine(sim.state_dir)
        _forget_gaudi_stack(torch)
        patcher.undo()
        sys.path[:] = path_before
        importlib.invalidate_caches()
        _refresh_torch_version_constants()
        _clear_cached_probes()
        tmp.cleanup()


def _forget_gaudi_stack(torch: Any) -> None:
    """Unload the stand-in stack: its modules, ``torch.hpu`` and the ``hpu_backend`` it registered."""
    for mod in [m for m in sys.modules if m == "habana_frameworks" or m.startswith("habana_frameworks.")]:
        if sys.modules[mod] is not None:
            del sys.modules[mod]
    if getattr(getattr(torch, "hpu", None), "__intelrt_stub__", False):
        delattr(torch, "hpu")
        sys.modules.pop("torch.hpu", None)
    registry = sys.modules.get("torch._dynamo.backends.registry")
    if registry is not None:
        compiler = registry._COMPILER_FNS.get("hpu_backend")
        if getattr(compiler, "__intelrt_stub__", False):
            registry._COMPILER_FNS.pop("hpu_backend", None)
            registry._BACKENDS.pop("hpu_backend", None)


@contextlib.contextmanager
def inherited() -> Iterator[Simulation]:
    """In a child process of a simulation (``INTELRT_SIMULATION`` set by the parent), enter the
    parent's simulated machine — e.g. at the top of a script a simulated launch runs as a rank."""
    global _active
    description = os.environ.get(CHILD_VAR)
    if not description:
        raise ConfigurationError(f"{CHILD_VAR} is not set: this process was not started by a simulation")
    sim = _from_parent(description)
    if _active is not None and _active.describe() == description:
        # `import torch` autoloaded the stand-in stack, which rebuilt the machine: keep what it saw
        sim.import_env, sim.acquired, sim.calls = _active.import_env, _active.acquired, _active.calls
        _active.child_log = None  # superseded: only the full simulation reports at exit
        _active = None
    _report_at_exit(sim)
    with _active_simulation(sim) as active:
        yield active


def _machine_spec(spec: str, usage: str) -> dict[str, Any]:
    """A :class:`~intelrt.testing.machine.Machine` as JSON (``{"kind": "hpu", "torch_fork": true}``), or
    ``@FILE`` holding it: every machine :func:`simulate` can pretend, from the command line."""
    text = spec
    if spec.startswith("@"):
        try:
            text = Path(spec[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"--simulate {spec!r}: cannot read {spec[1:]} ({exc.strerror or exc})") from None
    try:
        facts = json.loads(text)
        if not isinstance(facts, dict):
            raise TypeError(f"expected a JSON object, got {type(facts).__name__}")
        machine = Machine.from_json(facts)
    except (ValueError, TypeError) as exc:  # ConfigurationError is a ValueError: its words are kept
        raise ConfigurationError(f"--simulate {spec[:120]!r}: not a simulated machine ({exc}); {usage}") from None
    if machine.count > MAX_SIMULATED_DEVICES:
        raise ConfigurationError(f"--simulate {spec[:120]!r}: count must be <= {MAX_SIMULATED_DEVICES} (more devices "
                                 "than any one machine has)")
    return {"kind": machine}


def parse_spec(spec: str) -> dict[str, Any]:
    """``"xpu:4"``, ``"xpu:2:max1100"``, ``"hpu:8:gaudi1"`` → keyword arguments for :func:`simulate`
    (CLI ``--simulate``); a :class:`~intelrt.testing.machine.Machine` as JSON, or ``@FILE`` holding it,
    for every other fact (Gaudi's PyTorch fork, busy modules, pyzes …); anything else →
    :class:`~intelrt.errors.ConfigurationError` (a ``ValueError``)."""
    usage = ("use KIND[:COUNT[:GENERATION]] with KIND xpu or hpu, e.g. xpu:2, xpu:2:max1100 or hpu:8:gaudi3 "
             f"(GENERATION: a Gaudi generation or an Intel GPU product: {', '.join(XPU_PRODUCTS)}), or a machine as "
             'JSON, e.g. \'{"kind": "hpu", "count": 8, "torch_fork": true}\' (the fields of '
             "intelrt.testing.Machine), or @FILE holding it")
    if spec.startswith(("{", "@")):
        return _machine_spec(spec, usage)
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
        models = GAUDI_GENERATIONS if kind == "hpu" else XPU_PRODUCTS
        if parts[2] not in models:
            raise ConfigurationError(f"--simulate {spec!r}: GENERATION for {kind} must be one of {', '.join(models)}")
        kwargs["generation" if kind == "hpu" else "product"] = parts[2]
    return kwargs
