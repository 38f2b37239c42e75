"""A simulated machine described as data: what a :func:`~intelrt.testing.simulation.simulate` block pretends.

A :class:`Machine` is a frozen value — kind, count, generation or product, bfloat16, torch version
and build, installed extras, execution mode, modules held by other tenants, memory used by other
processes — that can be printed, compared, serialised for child processes and turned back into
the same machine. It says nothing about *how* the vendor runtime behaves (that is
:mod:`.simulation`, :mod:`.xpu_runtime`, :mod:`.gaudi_modules` and ``_vendor_stubs/``), only
*what* is installed and plugged in::

    with simulate(Machine("hpu", 8, generation="gaudi3", mode="eager", busy_modules=(0, 1))):
        ...

docs/backends/fidelity.md lists each fact with the upstream source of its default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol

from ..errors import ConfigurationError
from .level_zero import DEFAULT_PRODUCT, PRODUCTS, Product

KINDS = ("xpu", "hpu")
GAUDI_GENERATIONS = ("gaudi1", "gaudi2", "gaudi3")
MODES = ("lazy", "eager")
MAX_SIMULATED_DEVICES = 64
"""More devices than one node holds (8 Gaudis; up to 8 cards x 2 tiles of Intel GPUs): ``--simulate`` refuses more."""
XPU_PRODUCTS = tuple(PRODUCTS)
GAUDI_STACK = "1.22.0.740"
"""The simulated ``habana-torch-plugin`` version (``RELEASE.BUILD``, as the real wheels name it)."""
EAGER_DEFAULT_FROM = (1, 21)
"""From this Gaudi software release an unset ``PT_HPU_LAZY_MODE`` means eager ("Lazy mode is no
longer the default execution mode ... since 1.21.0", HabanaAI/Gaudi-tutorials#131; the Runtime Flags
page gives default 0); 1.19's ``utils/internal.py`` l.25-27 reads unset as ``"1"``."""
GAUDI_MEMORY_GIB = {"gaudi1": 32.0, "gaudi2": 96.0, "gaudi3": 128.0}
"""HBM per Gaudi: 32 GB (first generation), 96 GB (Gaudi 2), 128 GB (Gaudi 3), Intel's product briefs."""
GAUDI_SERVER_MODULE_IDS = (0, 4, 1, 5, 2, 6, 3, 7)
"""The module id of each device index on an 8-Gaudi server, as ``hl-smi -Q index,module_id -f csv``
printed it in huggingface/optimum-habana#1089: indices and module ids differ, which is why
``HABANA_VISIBLE_MODULES`` (module ids) and ``HABANA_VISIBLE_DEVICES`` (indices) select different Gaudis."""
OTHER_XPU_MEMORY_GIB = 16.0
#: The first torch versions with XPU graphs (torch.xpu.XPUGraph) and, in Intel's XPU wheels, XCCL.
XPU_GRAPHS_TORCH = "2.11"
XCCL_TORCH = "2.8"
XPU_LOCAL_LABEL = "xpu"
"""The local version label of torch's XPU wheels (``2.6.0+xpu`` from download.pytorch.org/whl/xpu)."""
GAUDI_FORK_LABEL = "a0+git7c4a3f1"
"""What Gaudi's PyTorch fork (Intel's Gaudi containers) appends to the version: ``2.6.0a0+git…``;
the bridge tells the fork from stock torch by the local label starting with ``git``."""


@dataclass(frozen=True)
class Machine:
    """The facts of a simulated machine; every field is plain data (JSON round-trips)."""

    kind: str
    """``"xpu"`` (Intel GPUs) or ``"hpu"`` (Intel Gaudi)."""
    count: int = 1
    """XPU: cards (GPUs as ``xpu-smi discovery`` lists them); HPU: Gaudi modules."""
    generation: str | None = None
    """HPU: ``gaudi1``, ``gaudi2`` (default) or ``gaudi3``."""
    product: str | None = None
    """XPU: a key of :data:`~intelrt.testing.level_zero.PRODUCTS` (default ``max1550``)."""
    name: str | None = None
    """Device name (an XPU name not in the products is a one-tile GPU)."""
    tiles: int | None = None
    """XPU: tiles per card (default: the product's; a Max 1550 has 2)."""
    memory_gib: float | None = None
    """XPU: memory per tile (a FLAT device). Not for Gaudi: a Gaudi's memory is its generation's HBM,
    the one figure detection can know without acquiring a Gaudi (SPEC H5), so another would change no
    plan (pick ``generation``)."""
    bf16: bool = True
    """XPU: native bfloat16 (``has_bfloat16_conversions``); torch emulates it where it is False."""
    torch_version: str | None = None
    """The torch version ``torch.__version__`` and package metadata report. ``None``: the
    installed torch's, with the build's local label (``+xpu`` on an XPU build, see
    :meth:`reported_torch_version`)."""
    torch_fork: bool = False
    """HPU: Gaudi's PyTorch fork (``2.x.0a0+git…``) instead of stock torch; lazy mode needs it."""
    packages: Mapping[str, str | None] = field(default_factory=dict)
    """Installed distributions (extras) → version, or ``None`` for not installed."""
    env: Mapping[str, str | None] = field(default_factory=dict)
    """Environment variables for the simulation's duration (``None`` unsets)."""
    mode: str | None = None
    """HPU: ``"lazy"`` or ``"eager"`` (sets ``PT_HPU_LAZY_MODE``); ``None``: the stack's default
    (lazy up to 1.20, eager from 1.21) unless ``env`` sets the variable."""
    xpu_build: bool = True
    """False simulates a torch build without XPU support (``torch.version.xpu is None``)."""
    xpu_graphs: bool | None = None
    """Whether torch has XPU graphs (default: torch >= 2.11)."""
    xccl: bool | None = None
    """Whether this torch build has the ``xccl`` collective backend (default: an XPU build of torch >= 2.8)."""
    module_ids: tuple[int, ...] | None = None
    """HPU: the module id of each device index, in ``hl-smi`` order (default: Habana's sample
    order on 8 Gaudis, :data:`GAUDI_SERVER_MODULE_IDS`; index = module id otherwise)."""
    busy_modules: tuple[int, ...] = ()
    """HPU: module ids another tenant's process holds: acquiring them fails as on a shared server."""
    memory_used_gib: float = 0.0
    """XPU: memory of each device that other processes use (``mem_get_info`` reports it as not free)."""
    pyzes: bool = False
    """XPU: the optional ``pyzes`` package is installed, so torch (2.13) counts Intel GPUs through Level
    Zero Sysman without loading the driver (:mod:`.sysman`); without it, counting loads the driver."""

    def __post_init__(self) -> None:
        _check(self)

    # -- derived facts -------------------------------------------------------------------------
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
            return _GAUDI_NAMES[self.gaudi_generation()]
        return self.product_info().name

    def gaudi_generation(self) -> str:
        return self.generation or "gaudi2"

    def tile_memory(self) -> int:
        """XPU: bytes per tile."""
        gib = self.memory_gib if self.memory_gib is not None else self.product_info().tile_memory_gib
        return int(gib * 1024**3)

    def total_memory(self) -> int:
        """HPU: bytes per Gaudi, its generation's HBM."""
        return int(GAUDI_MEMORY_GIB[self.gaudi_generation()] * 1024**3)

    def gaudi_stack(self) -> str | None:
        """The simulated ``habana-torch-plugin`` version (``None``: not installed)."""
        return self.packages.get("habana-torch-plugin", GAUDI_STACK) if self.kind == "hpu" else None

    def stack_default_mode(self) -> str:
        """HPU: what an unset ``PT_HPU_LAZY_MODE`` means to the installed stack: ``"1"`` (lazy) or ``"0"``."""
        stack = self.gaudi_stack() or ""
        release = tuple(int(p) for p in stack.split(".")[:2] if p.isdigit())
        return "0" if release >= EAGER_DEFAULT_FROM else "1"

    def modules(self) -> tuple[int, ...]:
        """HPU: the module id of each device index, in ``hl-smi`` order."""
        if self.module_ids is not None:
            return self.module_ids
        return GAUDI_SERVER_MODULE_IDS if self.count == len(GAUDI_SERVER_MODULE_IDS) else tuple(range(self.count))

    def reported_torch_version(self, installed: str) -> str | None:
        """The version torch reports on this machine, given the ``installed`` one; ``None``: unchanged.

        An explicit :attr:`torch_version` is reported as given (``"2.6.0+xpu"`` is the XPU wheel,
        ``"2.6.0"`` a build without a local label), except that :attr:`torch_fork` adds the fork's
        label to one that has none. Unset, the installed base version gets the build's label as the
        real wheels carry it: ``+xpu`` on torch's XPU wheels (``2.6.0+xpu``,
        download.pytorch.org/whl/xpu), ``a0+git…`` on Gaudi's fork; a plain Gaudi machine keeps
        the installed (stock) torch."""
        if self.kind == "hpu" and self.torch_fork:
            if self.torch_version is None and installed.endswith(GAUDI_FORK_LABEL):
                return installed  # already this machine's (a process that reads it again)
            version = self.torch_version or installed.split("+")[0]
            return version if "+" in version else f"{version}{GAUDI_FORK_LABEL}"
        if self.torch_version is not None:
            return self.torch_version
        if self.kind == "xpu" and self.xpu_build:
            return f"{installed.split('+')[0]}+{XPU_LOCAL_LABEL}"
        return None

    def environment(self) -> dict[str, str | None]:
        """The variables the simulation sets: :attr:`env`, and ``PT_HPU_LAZY_MODE`` for :attr:`mode`."""
        env = dict(self.env)
        if self.mode is not None:
            env["PT_HPU_LAZY_MODE"] = "1" if self.mode == "lazy" else "0"
        return env

    # -- data ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        facts = asdict(self)
        facts["packages"] = dict(self.packages)
        facts["env"] = dict(self.env)
        return facts

    @classmethod
    def from_json(cls, facts: Mapping[str, Any]) -> Machine:
        """The machine :meth:`to_json` wrote; unknown keys are refused (a typo is not a fact)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(facts) - known)
        if unknown:
            raise ConfigurationError(f"not facts of a simulated machine: {', '.join(unknown)} (known: "
                                     f"{', '.join(sorted(known))})")
        values = dict(facts)
        for key in ("module_ids", "busy_modules"):
            if isinstance(values.get(key), list):
                values[key] = tuple(values[key])
        return cls(**values)

    def describe(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def with_facts(self, **facts: Any) -> Machine:
        return replace(self, **facts)


_GAUDI_NAMES = {"gaudi1": "GAUDI", "gaudi2": "GAUDI2", "gaudi3": "GAUDI3"}


def _ids(name: str, value: Sequence[int] | None) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigurationError(f"{name} must be a tuple of module ids, got {value!r}")


def _check(machine: Machine) -> None:
    """Refuse a machine no vendor sells (or a fact of the wrong kind), naming the fact."""
    if machine.kind not in KINDS:
        raise ConfigurationError(f"simulate() kind must be one of {KINDS}, got {machine.kind!r}")
    count = machine.count
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ConfigurationError(f"simulate() count must be an int >= 0, got {count!r}")
    if machine.generation is not None and machine.generation not in GAUDI_GENERATIONS:
        raise ConfigurationError(f"generation must be one of {GAUDI_GENERATIONS}, got {machine.generation!r}")
    if machine.product is not None and machine.product not in PRODUCTS:
        raise ConfigurationError(f"product must be one of {XPU_PRODUCTS}, got {machine.product!r}")
    if machine.tiles is not None and (not isinstance(machine.tiles, int) or machine.tiles < 1):
        raise ConfigurationError(f"tiles must be an int >= 1, got {machine.tiles!r}")
    if machine.mode is not None and machine.mode not in MODES:
        raise ConfigurationError(f"mode must be one of {MODES} (or None for the stack's default), got {machine.mode!r}")
    if machine.mode is not None and machine.env.get("PT_HPU_LAZY_MODE") is not None:
        raise ConfigurationError(f"mode={machine.mode!r} and env PT_HPU_LAZY_MODE={machine.env['PT_HPU_LAZY_MODE']!r} "
                                 "both set the execution mode: give one")
    _ids("module_ids", machine.module_ids)
    _ids("busy_modules", machine.busy_modules)
    if machine.module_ids is not None and sorted(machine.module_ids) != list(range(count)):
        raise ConfigurationError(f"module_ids must list each module id 0..{count - 1} once, got "
                                 f"{list(machine.module_ids)!r}")
    outside = [m for m in machine.busy_modules if not 0 <= m < count]
    if outside:
        raise ConfigurationError(f"busy_modules {outside} are not module ids of this {count}-Gaudi machine")
    if machine.kind != "hpu" and (machine.busy_modules or machine.torch_fork or machine.mode is not None):
        raise ConfigurationError("busy_modules, torch_fork and mode describe Gaudi machines (kind='hpu')")
    if machine.kind == "hpu" and machine.memory_gib is not None:
        raise ConfigurationError(f"memory_gib={machine.memory_gib!r} describes an Intel GPU tile; a Gaudi's memory is its "
                                 "generation's HBM (32, 96, 128 GiB), the only figure detection can know without "
                                 "acquiring a Gaudi, so it would change no plan: pick generation= instead")
    if machine.kind != "xpu" and (machine.memory_used_gib or machine.pyzes):
        raise ConfigurationError("memory_used_gib and pyzes describe Intel GPUs (kind='xpu')")
    if machine.memory_used_gib < 0:
        raise ConfigurationError(f"memory_used_gib must be >= 0, got {machine.memory_used_gib!r}")


class SimulationView(Protocol):
    """What the simulated vendor runtimes (``xpu_runtime``, ``sysman``, ``gaudi_modules``) read of the
    active simulation (``simulation.Simulation``): its machine, with the machine's facts read through
    (``sim.count``, ``sim.device_name()``), and what this process's runtime did. Declared here, below
    the runtimes and the simulation alike, so that neither imports the other for a type."""

    machine: Machine
    acquired: int | None
    state_dir: str | None

    def record(self, call: str) -> None: ...

    def visible_ids(self) -> list[int]: ...

    def __getattr__(self, name: str) -> Any: ...

