"""SPEC H11: the Gaudi backend page documents every decision, override and claim, and points to
Optimum for Intel Gaudi; every Gaudi claim has a test (datasette's test_docs style)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "backends" / "hpu.md"
CLAIMS = [f"H{i}" for i in range(1, 12)]


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.mark.claim("H11")
def test_H11_page_points_to_optimum_for_intel_gaudi(page: str) -> None:
    assert "[Optimum for Intel Gaudi](https://huggingface.co/docs/optimum-habana/index)" in page


@pytest.mark.claim("H11")
@pytest.mark.parametrize("claim", CLAIMS)
def test_H11_page_cites_every_gaudi_claim(page: str, claim: str) -> None:
    assert re.search(rf"\b{claim}\b", page), f"docs/backends/hpu.md never cites {claim}"


@pytest.mark.claim("H11")
def test_H11_page_documents_each_decision_hook_and_variable(page: str) -> None:
    from intelrt.plugin import Backend
    from intelrt_hpu.backend import HpuBackend

    methods = [name for name in vars(HpuBackend) if callable(getattr(HpuBackend, name, None))
               and getattr(HpuBackend, name) is not getattr(Backend, name, None) and not name.startswith("_")]
    modules = {getattr(HpuBackend, name).__code__.co_names[0] for name in methods
               if getattr(getattr(HpuBackend, name), "__code__", None) is not None}
    owned = {name.split("_", 1)[1] for name in methods if name.startswith(("select_", "check_"))}
    for word in sorted(owned | modules):
        assert word in page, f"docs/backends/hpu.md does not mention {word}"
    for variable in ("PT_ENABLE_INT64_SUPPORT", "PT_HPU_LAZY_MODE", "HABANA_VISIBLE_MODULES",
                     "HABANA_VISIBLE_DEVICES", "MASTER_PORT", "hl-smi -Q index,module_id -f csv"):
        assert variable in page


@pytest.mark.claim("H11")
@pytest.mark.parametrize("claim", CLAIMS)
def test_H11_every_gaudi_claim_has_a_test(claim: str) -> None:
    sources = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").rglob("test_hpu_*.py")))
    assert f'@pytest.mark.claim("{claim}")' in sources and f"test_{claim}_" in sources
