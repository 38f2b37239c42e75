"""The behaviour contract is a page of the docs (issue 21): every claim with its source, every
claim id cited by the code, the docs or the tests is on it, and every claim has a test."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "contract.md"
EXPECTED = [f"X{i}" for i in range(1, 12)] + [f"H{i}" for i in range(1, 12)] + [f"C{i}" for i in range(1, 7)]
#: How claims are cited: [X6] in plan text, SPEC X6 in docs and comments, claim="X6" in decisions,
#: @pytest.mark.claim("X6") and test_X6_… in tests.
CITATIONS = (r"\[([XHC]\d{1,2})\]", r"SPEC ([XHC]\d{1,2})\b", r"claim=\"([XHC]\d{1,2})\"",
             r"claim\(\"([XHC]\d{1,2})\"\)", r"\btest_([XHC]\d{1,2})_")


def sections() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^### ([XHC]\d{1,2}) .*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def cited_in(paths: list[Path]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for pattern in CITATIONS:
            for claim in re.findall(pattern, text):
                found.setdefault(claim, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_claim_is_on_the_contract_page_with_its_source() -> None:
    claims = sections()
    assert list(claims) == EXPECTED
    for claim, body in claims.items():
        assert "*Source:*" in body and len(body.split("*Source:*")[0].strip()) > 40, f"{claim}: text or source missing"
    assert "contract.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_every_claim_cited_anywhere_is_on_the_page() -> None:
    sources = [*(ROOT / "core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
               *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    unknown = {c: sorted(where) for c, where in cited_in(sources).items() if c not in sections()}
    assert not unknown, f"claims cited but not in docs/contract.md: {unknown}"


def test_every_claim_has_a_test() -> None:
    tested = cited_in(sorted((ROOT / "tests").rglob("test_*.py")))
    untested = [c for c in EXPECTED if not any("tests/" in w for w in tested.get(c, ()))]
    assert not untested, f"no test is marked for {untested}: mark one with @pytest.mark.claim(...)"
