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

Like the real drivers, a simulated driver reads its visibility variables (``ZE_AFFINITY_MASK``,
``ZE_FLAT_DEVICE_HIERARCHY``; ``HABANA_VISIBLE_MODULES``) once, when it first initialises in the
process, and ignores later changes until the simulation ends. docs/backends/fidelity.md lists
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
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from .level_zero import DEFAULT_PRODUCT, PRODUCTS, Product

KINDS = ("xpu", "hpu")
GAUDI_GENERATIONS = ("gaudi1", "gaudi2", "gaudi3")
MAX_SIMULATED_DEVICES = 64
"""More devices than one node holds (8 Gaudis; up to 8 cards x 2 tiles of Intel GPUs): ``--simulate`` refuses more."""
XPU_PRODUCTS = tuple(PRODUCTS)
GAUDI_STACK = "1.22.0.740"
"""The simulated ``habana-torch-plugin`` version (``RELEASE.BUILD``, as the real wheels name it)."""
GAUDI_MEMORY_GIB = 96.0
OTHER_XPU_MEMORY_GIB = 16.0
#: The first torch versions with XPU graphs (torch.xpu.XPUGraph) and, in Intel's XPU wheels, XCCL.
XPU_GRAPHS_TORCH = "2.11"
XCCL_TORCH = "2.8"
_STUBS = Path(__file__).parent / "_vendor_stubs"
_HL_SMI = Path(__file__).parent / "hl_smi.py"
# Which module each distribution provides, for hiding an uninstalled one.
_MODULE_OF = {"habana-torch-plugin": "habana_frameworks"}
#: Carries a simulated machine to child processes (see :func:`current`).
CHILD_VAR = "INTELRT_SIMULATION"
#: What the real Gaudi stack (and transformers' ``is_torch_hpu_available``) patches on torch;
#: a Gaudi simulation puts them back when it ends.
_TORCH_PATCHED_BY_GAUDI = (("", "compile"), ("", "gather"), ("", "take_along_dim"), ("", "scatter"),
                           ("Tensor", "gather"), ("Tensor", "scatter"), ("linalg", "cholesky"))
#: Modules whose cached answers ("is there a Gaudi?", "which torch?") depend on the simulated machine.
_CACHED_PROBES = ("transformers.utils.import_utils", "accelerate.utils.imports")
#: torch.xpu's per-process state, reset so each simulation starts with an uninitialised runtime.
_XPU_STATE: dict[str, Any] = {"_initialized": False, "_cached_device_count": None, "default_generators": (),
              "_cached_zes_device_infos": []}
_DESCRIBED = ("kind", "count", "generation", "product", "name", "tiles", "memory_gib", "bf16", "torch_version",
              "packages", "xpu_build", "xccl", "module_ids", "child_log")


@dataclass
class Simulation:
    """The facts of a simulated machine; the simulated runtimes read them while it is active."""

    kind: str
    count: int
    """XPU: cards (GPUs as ``xpu-smi discovery`` lists them); HPU: Gaudi modules."""
    generation: str | None = None
    product: str | None = None
    """XPU: a key of :data:`~intelrt.testing.level_zero.PRODUCTS` (default ``max1550``)."""
    name: str | None = None
    tiles: int | None = None
    """XPU: tiles per card (default: the product's; a Max 1550 has 2)."""
    memory_gib: float | None = None
    """XPU: memory per tile (a FLAT device); HPU: per Gaudi."""
    bf16: bool = True
    """XPU: native bfloat16 (``has_bfloat16_conversions``); torch emulates it where it is False."""
    torch_version: str | None = None
    packages: Mapping[str, str | None] = field(default_factory=dict)
    env: Mapping[str, str | None] = field(default_factory=dict)
    xpu_build: bool = True
    """False simulates a torch build without XPU support (``torch.version.xpu is None``)."""
    xccl: bool = True
    """Whether this torch build has the ``xccl`` collective backend (``is_xccl_available()``)."""
    module_ids: tuple[int, ...] | None = None
    """HPU: the module id of each device index, in ``hl-smi`` order (default: index = module id)."""
    calls: list[str] = field(default_factory=list)
    """Every vendor-runtime call made while active (``"xpu.device_count"`` …): tests can check
    what touched the device."""
    import_env: dict[str, str] | None = None
    """For ``hpu``: a copy of ``os.environ`` taken when ``habana_frameworks`` was first imported
    in this process (``None``: this process never imported it)."""
    child_log: str | None = None
    """Where child processes of the simulation report what their Gaudi stack saw."""
    _visible: list[int] | None = None

    # -- the machine -----------------------------------------------------------------------
    def product_info(self) -> Product:
        """The XPU product: a known one by key or name, else a one-tile GPU named :attr:`name`."""
        if self.product is not None:
            return PRODUCTS[self.product]
        if self.name is None:
            return PRODUCTS[DEFAULT_PRODUCT]
        known = next((p for p in PRODUCTS.values() if p.name == self.name), None)
        return known or Product(self.name, 1, OTHER_XPU_MEMORY_GIB, "COMPOSITE")

    def device_name(self) -> str:
        if self.name:
            return self.name
        if self.kind == "hpu":
            return (self.generation or "gaudi2").upper()
        return self.product_info().name

    def tile_memory(self) -> int:
        """XPU: bytes per tile."""
        gib = self.memory_gib if self.memory_gib is not None else self.product_info().tile_memory_gib
        return int(gib * 1024**3)

    def total_memory(self) -> int:
        """HPU: bytes per Gaudi."""
        gib = self.memory_gib if self.memory_gib is not None else GAUDI_MEMORY_GIB
        return int(gib * 1024**3)

    def gaudi_stack(self) -> str | None:
        """The simulated ``habana-torch-plugin`` version (``None``: not installed)."""
        return self.packages.get("habana-torch-plugin", GAUDI_STACK) if self.kind == "hpu" else None

    def visible_ids(self) -> list[int]:
        """HPU: device indices the stack counts, fixed at its first count (``HABANA_VISIBLE_MODULES``
        lists module ids; ``HABANA_VISIBLE_DEVICES`` only selects what a container mounts)."""
        if self._visible is None:
            self._visible = _parse_visibility(os.environ.get("HABANA_VISIBLE_MODULES"), self.count)
        return self._visible

    def modules(self) -> tuple[int, ...]:
        return self.module_ids if self.module_ids is not None else tuple(range(self.count))

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
        facts = {name: getattr(self, name) for name in _DESCRIBED}
        facts["packages"] = dict(self.packages)
        return json.dumps(facts)


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


def _facts(description: str) -> dict[str, Any]:
    try:
        facts = json.loads(description)
        if not isinstance(facts, dict):
            raise TypeError("not an object")
        Simulation(**{k: facts[k] for k in _DESCRIBED if k in facts})
        kind, count = facts["kind"], facts["count"]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(
            f"{CHILD_VAR}={description[:80]!r} does not describe a simulated machine ({type(exc).__name__}: {exc}); "
            f"intelrt.testing.simulate sets it for its child processes only: unset {CHILD_VAR}") from None
    if kind not in KINDS or not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigurationError(f"{CHILD_VAR}={description[:80]!r}: kind must be one of {KINDS} and count an "
                                 f"int >= 0; unset {CHILD_VAR}")
    return {k: facts[k] for k in _DESCRIBED if k in facts}


def _from_parent(description: str) -> Simulation:
    facts = _facts(description)
    if facts.get("module_ids") is not None:
        facts["module_ids"] = tuple(facts["module_ids"])
    return Simulation(**facts)


def _report_at_exit(sim: Simulation) -> None:
    def report() -> None:
        if sim.child_log and (sim.import_env is not None or sim.calls):
            line = json.dumps({"pid": os.getpid(), "import_env": sim.import_env, "calls": sim.calls})
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


def _install_xpu(sim: Simulation, patcher: _Patcher, graphs: bool) -> None:
    """The XPU build's ``torch._C`` calls, backed by the simulated driver (see :mod:`.xpu_runtime`)."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    from .xpu_runtime import XpuDriver, process_group_xccl

    patcher.setattr(torch._C, "_has_xpu", sim.xpu_build)
    patcher.setattr(torch.version, "xpu", "20250301" if sim.xpu_build else None)
    for name, value in _XPU_STATE.items():
        patcher.setattr(torch.xpu, name, type(value)(value) if isinstance(value, list) else value)
    patcher.setattr(torch.xpu, "_queued_calls", [])
    patcher.setattr(torch.xpu, "_lazy_seed_tracker", type(torch.xpu._lazy_seed_tracker)())
    patcher.delattr(torch.xpu, "_get_device_properties")
    if not sim.xpu_build:
        return
    # torch 2.13 counts devices through Level Zero Sysman when the optional pyzes package is
    # installed; it is not a dependency of torch, and the simulated machine has none.
    patcher.setitem(sys.modules, "pyzes", None)
    driver = XpuDriver(sim)
    for name, function in driver.c_functions().items():
        patcher.setattr(torch._C, name, function)
    # bound from torch._C when torch.xpu is imported, so set where torch.xpu looks them up
    patcher.setattr(torch.xpu, "_exchange_device", driver.exchange_device)
    patcher.setattr(torch.xpu, "_maybe_exchange_device", driver.exchange_device)
    if not graphs:  # a torch older than the XPU graph API has no such attributes at all
        patcher.delattr(torch.xpu, "XPUGraph")
        patcher.delattr(torch.xpu, "graph")
    patcher.setattr(c10d, "_XCCL_AVAILABLE", sim.xccl)
    if sim.xccl:
        patcher.setattr(c10d, "ProcessGroupXCCL", process_group_xccl())


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
def simulate(kind: str, count: int = 1, *, generation: str | None = None, product: str | None = None,
             name: str | None = None, tiles: int | None = None, memory_gib: float | None = None,
             bf16: bool | None = None, torch_version: str | None = None,
             packages: Mapping[str, str | None] | None = None, env: Mapping[str, str | None] | None = None,
             xpu_build: bool = True, xpu_graphs: bool | None = None, xccl: bool | None = None,
             module_ids: Sequence[int] | None = None) -> Iterator[Simulation]:
    """Pretend this machine has ``count`` devices of ``kind`` (``"xpu"`` or ``"hpu"``).

    :param count: XPU: GPU cards (a Max 1550 card is 2 devices in FLAT mode); HPU: Gaudis.
    :param generation: Gaudi generation, ``"gaudi1"``, ``"gaudi2"`` (default) or ``"gaudi3"``.
    :param product: XPU product, one of :data:`XPU_PRODUCTS` (default ``"max1550"``).
    :param name: device name (an XPU name not in :data:`XPU_PRODUCTS` is a one-tile GPU).
    :param tiles: XPU tiles per card (default: the product's).
    :param memory_gib: XPU memory per tile; HPU memory per Gaudi.
    :param bf16: XPU native bfloat16 (``has_bfloat16_conversions``, default True).
    :param torch_version: the torch version reported by ``torch.__version__`` and package metadata.
    :param packages: distribution → version to report, or ``None`` to make it not installed.
    :param env: environment variables to set (``None`` unsets) for the simulation's duration.
    :param xpu_build: False simulates a torch without XPU support.
    :param xpu_graphs: whether torch has XPU graphs (default: torch >= 2.11).
    :param xccl: whether torch has the ``xccl`` backend (default: an XPU build of torch >= 2.8).
    :param module_ids: HPU module id of each device index, as ``hl-smi`` lists them.
    """
    global _active
    if kind not in KINDS:
        raise ValueError(f"simulate() kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"simulate() count must be an int >= 0, got {count!r}")
    if generation is not None and generation not in GAUDI_GENERATIONS:
        raise ValueError(f"generation must be one of {GAUDI_GENERATIONS}, got {generation!r}")
    if product is not None and product not in PRODUCTS:
        raise ValueError(f"product must be one of {XPU_PRODUCTS}, got {product!r}")
    if tiles is not None and (not isinstance(tiles, int) or tiles < 1):
        raise ValueError(f"tiles must be an int >= 1, got {tiles!r}")
    if module_ids is not None and sorted(module_ids) != list(range(count)):
        raise ValueError(f"module_ids must list each module id 0..{count - 1} once, got {list(module_ids)!r}")
    if _active is not None:
        raise RuntimeError("a simulation is already active; nest none")
    sim = Simulation(kind=kind, count=count, generation=generation or ("gaudi2" if kind == "hpu" else None),
                     product=product, name=name, tiles=tiles, memory_gib=memory_gib,
                     bf16=True if bf16 is None else bf16, torch_version=torch_version, packages=dict(packages or {}),
                     env=dict(env or {}), xpu_build=xpu_build,
                     xccl=(xpu_build and _at_least(torch_version, XCCL_TORCH)) if xccl is None else xccl,
                     module_ids=tuple(module_ids) if module_ids is not None else None)
    with _active_simulation(sim, xpu_graphs=_at_least(torch_version, XPU_GRAPHS_TORCH) if xpu_graphs is None
                            else xpu_graphs) as active:
        yield active


@contextlib.contextmanager
def _active_simulation(sim: Simulation, *, xpu_graphs: bool) -> Iterator[Simulation]:
    global _active
    import torch

    patcher = _Patcher()
    tmp = tempfile.TemporaryDirectory(prefix="intelrt-sim-")
    path_before = list(sys.path)
    try:
        for key, value in sim.env.items():
            patcher.setitem(os.environ, key, value)
        packages = dict(sim.packages)
        if sim.torch_version is not None:
            patcher.setattr(torch, "__version__", torch.torch_version.TorchVersion(sim.torch_version))
            packages["torch"] = sim.torch_version
        if sim.child_log is None:
            sim.child_log = str(Path(tmp.name) / "children.jsonl")
        if sim.kind == "xpu":
            _install_xpu(sim, patcher, xpu_graphs)
        else:
            packages.setdefault("habana-torch-plugin", GAUDI_STACK)
            _install_hl_smi(patcher, Path(tmp.name))
            # set_device() records the module it acquired in the process environment, as the bridge does
            patcher.setitem(os.environ, "HLS_MODULE_ID", os.environ.get("HLS_MODULE_ID"))
            for owner, attr in _TORCH_PATCHED_BY_GAUDI:
                target = getattr(torch, owner) if owner else torch
                patcher.setattr(target, attr, getattr(target, attr))
        sim.packages = packages
        patcher.setitem(os.environ, CHILD_VAR, sim.describe())
        _fake_distributions(packages, patcher, Path(tmp.name))
        if sim.kind == "hpu" and packages.get("habana-torch-plugin") is not None:
            sys.path.insert(0, str(_STUBS))
        importlib.invalidate_caches()
        _refresh_torch_version_constants()
        _clear_cached_probes()
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
        _refresh_torch_version_constants()
        _clear_cached_probes()
        tmp.cleanup()


@contextlib.contextmanager
def inherited() -> Iterator[Simulation]:
    """In a child process of a simulation (``INTELRT_SIMULATION`` set by the parent), enter the
    parent's simulated machine — e.g. at the top of a script a simulated launch runs as a rank."""
    global _active
    description = os.environ.get(CHILD_VAR)
    if not description:
        raise ConfigurationError(f"{CHILD_VAR} is not set: this process was not started by a simulation")
    facts = _facts(description)
    if _active is not None and _active.describe() == description:
        _active = None  # rebuilt by current() for the stand-in stack: replaced by the full simulation
    sim = Simulation(**{**facts, "module_ids": tuple(facts["module_ids"]) if facts.get("module_ids") else None})
    _report_at_exit(sim)
    with _active_simulation(sim, xpu_graphs=_at_least(sim.torch_version, XPU_GRAPHS_TORCH)) as active:
        yield active


def parse_spec(spec: str) -> dict[str, Any]:
    """``"xpu:4"``, ``"xpu:2:max1100"``, ``"hpu:8:gaudi1"`` → keyword arguments for :func:`simulate`
    (CLI ``--simulate``); anything else → :class:`~intelrt.errors.ConfigurationError` (a ``ValueError``)."""
    usage = ("use KIND[:COUNT[:GENERATION]] with KIND xpu or hpu, e.g. xpu:2, xpu:2:max1100 or hpu:8:gaudi3 "
             f"(GENERATION: a Gaudi generation or an Intel GPU product: {', '.join(XPU_PRODUCTS)})")
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
