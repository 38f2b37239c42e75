"""SPEC C3: importing intelrt and listing plugins stay cheap (no torch, no transformers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers")


def _imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = next(row for row in out.stdout.splitlines() if row.startswith("HEAVY="))
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


@pytest.mark.claim("C3")
def test_c3_import_intelrt_imports_neither_torch_nor_transformers() -> None:
    assert _imported_after("import intelrt") == []


@pytest.mark.claim("C3")
def test_c3_plugins_command_imports_neither_torch_nor_transformers() -> None:
    code = "import contextlib, io\nfrom intelrt.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    main(['plugins', '--json'])"
    assert _imported_after(code) == []


@pytest.mark.claim("C2")
def test_c2_import_sets_no_environment_variable() -> None:
    code = ("import os\nbefore = dict(os.environ)\nimport intelrt, intelrt.host.manager\n"
            "intelrt.host.manager.get_host()\nassert dict(os.environ) == before, set(os.environ) ^ set(before)")
    subprocess.run([sys.executable, "-c", code], check=True)
