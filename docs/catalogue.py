"""The fault catalogue of ``reliability.md``, rendered from the tests' declarations (an mkdocs
hook, ``mkdocs.yml: hooks``, as ``docs/reference.py`` renders the hook reference from the code).

The marker ``<!-- fault-catalogue -->`` in a page becomes: the counts per area and outcome, the
counts per risk, then one table per area — every case of every ``tests/*/test_faults_*.py``
module (``tests/faults.py`` declares them), with the test that runs it.
``tests/contract/test_catalogue_page.py`` checks the page holds the marker and that every case
is rendered.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

DOCS = Path(__file__).resolve().parent
TESTS = DOCS.parent / "tests"
MARKER = "<!-- fault-catalogue -->"


def faults_module() -> ModuleType:
    """``tests/faults.py`` (the tests directory is not a package)."""
    module = sys.modules.get("faults")
    if module is not None and getattr(module, "__file__", "") == str(TESTS / "faults.py"):
        return module
    spec = importlib.util.spec_from_file_location("faults", TESTS / "faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["faults"] = module
    spec.loader.exec_module(module)
    return module


def entries() -> list[Any]:
    """Every (module, test, cases) entry of the catalogue, in module order."""
    faults = faults_module()
    return [entry for catalogue in faults.load_catalogue(TESTS) for entry in catalogue.entries]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _says(case: Any) -> str:
    words = "; ".join(f"“{w}”" for w in case.says)
    if case.outcome == "clear error":
        return _cell(f"{case.error if case.error != 'IntelrtError' else 'error'} saying {words}" if words else
                     "an error")
    return _cell(words and f"shows {words}" or "works")


def render() -> str:
    found = [(entry, case) for entry in entries() for case in entry.cases]
    faults = faults_module()
    by_area = Counter((case.area, case.outcome) for _, case in found)
    areas = [a for a in faults.AREAS if any(case.area == a for _, case in found)]
    lines = [f"{len(found)} cases: {sum(1 for _, c in found if c.outcome == faults.CLEAR_ERROR)} end in a clear "
             f"error, {sum(1 for _, c in found if c.outcome == faults.CORRECT)} in the correct behaviour.", "",
             "| area | clear error | correct behaviour | cases |", "| --- | --- | --- | --- |"]
    for area in areas:
        error, correct = by_area[(area, faults.CLEAR_ERROR)], by_area[(area, faults.CORRECT)]
        lines.append(f"| [{area}](#faults-{area}) | {error} | {correct} | {error + correct} |")
    risks = Counter(case.risk for _, case in found)
    lines += ["", "What each case would show if intelrt regressed (the issue's classes of defects):", "",
              "| risk | cases |", "| --- | --- |"]
    lines += [f"| {risk} | {risks[risk]} |" for risk in faults.RISKS if risks[risk]]
    for area in areas:
        lines += ["", f"### {area} {{#faults-{area}}}", "", "| case | fault | trigger | outcome | test |",
                  "| --- | --- | --- | --- | --- |"]
        for entry, case in found:
            if case.area == area:
                lines.append(f"| `{case.id}` | {_cell(case.fault)} | {_cell(case.trigger) or '-'} | {_says(case)} | "
                             f"`{entry.module}::{entry.test}` |")
    return "\n".join(lines)


def expand(markdown: str) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown


# -- the mkdocs hook ----------------------------------------------------------------------------

def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)
