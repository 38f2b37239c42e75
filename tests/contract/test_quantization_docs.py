"""docs/quantization.md holds the method × backend table generated from the one declaration the
plan reads (``intelrt.quantization.methods.TABLE``): no hand copy can drift from it."""

from __future__ import annotations

from pathlib import Path

from intelrt.quantization.methods import COLUMNS, TABLE, render_page

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quantization.md"


def test_the_page_is_generated_from_the_table() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert render_page(page) == page, ("docs/quantization.md differs from intelrt.quantization.methods.TABLE: run "
                                       "python -m intelrt.quantization.methods docs/quantization.md")


def test_the_page_names_every_method_column_and_request_and_is_in_the_site() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert all(m.title in page for m in TABLE) and all(c.title in page for c in COLUMNS)
    assert all(f"`{m.request}`" in page for m in TABLE if m.request)
    assert "quantization.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
