"""The columns of intelrt's quantization table, as the contract declares them: what a backend says
about each quantization method on its devices.

intelrt keeps the rows — the methods transformers runs, and their cells on the CPU and on CUDA
(``intelrt.quantization.methods``) — and renders the table (docs/quantization.md). Every other
column comes from the backend whose devices it describes: a :class:`~intelrt.hooks.backend.Backend`
declares :class:`QuantizationColumns` (``Backend.quantization_columns``), one :class:`Column` per
kind of device it drives (Intel Arc and Max, Gaudi 1/2/3 …) and, per method, the :class:`Cell`
of each. A third-party backend adds its column the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .payloads import JSONValue

RUNS = ("yes", "dequantized", "no")
"""``yes``: quantized kernels run; ``dequantized``: transformers loads it but expands the weights
to the model dtype on this device (it runs, saving no memory); ``no``: refused."""


@dataclass(frozen=True)
class Column:
    """One column of the table: a backend's kind of device (where what runs differs by it, one per
    ``Backend.variant``)."""

    key: str
    kind: str
    """torch device type: ``cpu``, ``cuda``, ``xpu``, ``hpu`` …"""
    variant: str | None
    """The ``Backend.variant`` it describes (``None``: the backend has one kind of device)."""
    title: str
    claim: str | None = None
    """The SPEC claim a quantization decision on this column proves (``X9`` on Intel GPUs, ``H7`` on Gaudi)."""
    requests: Mapping[str, str] = field(default_factory=dict)
    """``quantization=`` values that mean another method here than the table's first row for them, by
    method key (``{"fp8": "inc-fp8"}``: Intel Neural Compressor's FP8 where torchao's float8 does not run)."""


@dataclass(frozen=True)
class Cell:
    """Whether a method runs in a column, and what it takes there."""

    runs: str
    source: str
    package: str | None = None
    """The distribution that runs it here (``None``: torch alone)."""
    floor: str | None = None
    dtype: str | None = None
    """The dtype transformers loads it in here (``None``: the plan's dtype)."""
    requires: tuple[tuple[str, str], ...] = ()
    """Other distributions and their floors (GPTQ: optimum)."""
    capability: tuple[int, int] | None = None
    """CUDA only: the least compute capability."""
    details: Mapping[str, JSONValue] = field(default_factory=dict)
    """The builder's inputs here (a torchao config class and its layout …)."""
    note: str | None = None
    dequantizes_without_package: bool = False
    """transformers dequantizes a checkpoint (rather than refusing it) when ``package`` or
    ``requires`` are missing here (``Mxfp4HfQuantizer.validate_environment``)."""
    compute_dtypes: tuple[str, ...] = ()
    """The dtypes its kernels compute in; a model in another is cast to the first (auto-round's
    ``convert_model.post_init``: "Forced model to torch.float16")."""
    torch_floor: str | None = None
    """The least torch the method's kernels need on this device (the backend's reported torch)."""
    kernel: str | None = None
    """What computes a quantized projection here, and where that choice is made (the decode
    decision names it: ``QuantizationChoice.details['kernel']``)."""
    checkpoint_schemes: tuple[str, ...] = ()
    """The only schemes of a pre-quantized checkpoint that run here (bitsandbytes' Gaudi backend:
    ``nf4``); empty: every scheme the method has."""

    def __post_init__(self) -> None:
        if self.runs not in RUNS:
            raise ValueError(f"Cell.runs={self.runs!r} is not one of {RUNS}")


@dataclass(frozen=True)
class QuantizationColumns:
    """A backend's columns of the quantization table: its ``columns`` and, per method key (the
    table's rows: ``intelrt.quantization.methods.TABLE``), the cell of each column. A method the
    backend gives no cell does not run there (the refusal says the backend declares none)."""

    columns: tuple[Column, ...]
    cells: Mapping[str, Mapping[str, Cell]]
    default: str | None = None
    """The column of a device whose variant is not one of the columns' (``None``: the first)."""

    def __post_init__(self) -> None:
        if not self.columns:
            raise TypeError("QuantizationColumns declares at least one column")
        keys = {c.key for c in self.columns}
        stray = sorted({k for cells in self.cells.values() for k in cells} - keys)
        if stray or (self.default is not None and self.default not in keys):
            raise TypeError(f"QuantizationColumns names columns it does not declare: {stray or [self.default]}")

    def column_for(self, variant: str | None) -> Column:
        """The column of a device of ``variant`` (``Backend.variant``)."""
        found = next((c for c in self.columns if c.variant is not None and c.variant == variant), None)
        if found is not None:
            return found
        return next(c for c in self.columns if c.key == self.default) if self.default else self.columns[0]

    def cell(self, method: str, column: str) -> Cell | None:
        """The cell of method ``method`` (a row's key) in ``column``, or ``None`` when none is declared."""
        return self.cells.get(method, {}).get(column)
