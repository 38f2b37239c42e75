"""docs/quantization.md holds the method × backend table generated from the declarations the plan
reads — intelrt's rows (``intelrt.quantization.methods.TABLE``) and every installed backend's
``quantization_columns`` —: no hand copy can drift from them; a third-party backend's column
joins the table by declaring it."""

from __future__ import annotations

from pathlib import Path

import pytest

from intelrt.cli.quantization_page import contributed_columns
from intelrt.errors import PlanError
from intelrt.hooks.backend import Backend
from intelrt.host.manager import PluginHost
from intelrt.plugin import BackendStatus, Cell, Column, QuantizationColumns, hookimpl
from intelrt.quantization.methods import (
    TABLE,
    Target,
    decide,
    markdown_table,
    render_page,
    table_columns,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quantization.md"


def test_the_page_is_generated_from_the_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert render_page(page, contributed_columns()) == page, (
        "docs/quantization.md differs from the quantization table: run "
        "python -m intelrt.cli.quantization_page docs/quantization.md")


def test_the_page_names_every_method_column_and_request_and_is_in_the_site() -> None:
    page = PAGE.read_text(encoding="utf-8")
    columns = table_columns(contributed_columns())
    assert [c.key for c, _ in columns] == ["cpu", "cuda", "gaudi1", "gaudi2", "gaudi3", "xpu-arc", "xpu-max"]
    assert all(m.title in page for m in TABLE) and all(c.title in page for c, _ in columns)
    assert all(f"`{m.request}`" in page for m in TABLE if m.request)
    assert "quantization.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


NPU = Column("mynpu", "mynpu", None, "MyNPU")


class MyNpuBackend(Backend):
    """A third party's backend: its column says int8 runs there, and nothing else."""

    name = device_type = "mynpu"
    quantization_columns = QuantizationColumns((NPU,), {"torchao-int8": {"mynpu": Cell(
        "yes", "MyNPU's torchao kernels", package="torchao", floor="0.15.0",
        details={"config": "Int8WeightOnlyConfig"})}})

    @classmethod
    def detect(cls, env: object) -> BackendStatus:
        return BackendStatus("mynpu", "mynpu", False, "not here")


class NpuPlugin:
    @hookimpl
    def intelrt_backends(self) -> list[type[Backend]]:
        return [MyNpuBackend]


def test_a_third_party_backend_adds_its_column_and_plans_on_it() -> None:
    host = PluginHost(entry_points=False)
    host.register(NpuPlugin(), "mynpu")
    table = markdown_table(contributed_columns(host))
    head, *rows = table.splitlines()
    assert head.split(" | ")[-3] == "MyNPU"
    int8 = next(r for r in rows if r.startswith("| torchao int8 weight-only |"))
    assert "| yes (`torchao` ≥ 0.15.0; `Int8WeightOnlyConfig`) | yes | yes |" in int8
    target = Target("mynpu", columns=MyNpuBackend.quantization_columns, packages={"torchao": "0.18.0"})
    assert decide("int8", None, target).reason == "torchao int8 weight-only runs on MyNPU (torchao 0.18.0)"
    with pytest.raises(PlanError, match=r"torchao int4 weight-only does not run on MyNPU \(the mynpu backend's "
                                        r"quantization columns say nothing of torchao int4 weight-only\)"):
        decide("int4", None, target)
