"""The fault catalogue as a whole (issue 34): at least 500 cases, ids unique over every module, each
case on the reliability page, and the page built from the declarations, not by hand."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _page_hook() -> ModuleType:
    module = sys.modules.get("intelrt_docs_catalogue")
    if module is None:
        spec = importlib.util.spec_from_file_location("intelrt_docs_catalogue", DOCS / "catalogue.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["intelrt_docs_catalogue"] = module
        spec.loader.exec_module(module)
    return module


def test_the_catalogue_holds_at_least_500_cases_with_unique_ids() -> None:
    cases = [case for entry in _page_hook().entries() for case in entry.cases]
    assert len(cases) >= 500, f"the fault catalogue has {len(cases)} cases; issue 34 asks for at least 500"
    twice = [name for name, n in Counter(c.id for c in cases).items() if n > 1]
    assert not twice, f"case ids used more than once: {twice}"


def test_the_reliability_page_renders_every_case_of_the_catalogue() -> None:
    hook = _page_hook()
    page = (DOCS / "reliability.md").read_text(encoding="utf-8")
    assert hook.MARKER in page, "docs/reliability.md lost the marker the catalogue is rendered at"
    mkdocs = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/catalogue.py" in mkdocs, "mkdocs.yml does not run the catalogue's page hook"
    rendered = hook.expand(page)
    missing = [case.id for entry in hook.entries() for case in entry.cases if f"| `{case.id}` |" not in rendered]
    assert not missing, f"cases missing from the rendered page: {missing[:10]}"
    for area in {case.area for entry in hook.entries() for case in entry.cases}:
        assert f"{{#faults-{area}}}" in rendered
