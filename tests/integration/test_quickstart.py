"""The quickstart runs as written, in order, on a fresh machine with the hub offline (issue 21).

Every ``$ intelrt …`` line of its ``console`` blocks runs as a real process, and its ``python``
blocks run in order in one interpreter, with an empty intelrt cache (the tiny model is built from
scratch) and an empty hub cache. Blocks marked ``<!-- needs the hub -->`` must stop offline with
intelrt's own error, exit status 2 and no traceback (SPEC C4: nothing downloads unless asked, and
asking offline says so).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from intelrt.tiny import BUILD_VERSION

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
NEEDS_HUB = "<!-- needs the hub -->"
INTELRT = shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"


def blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language, code, needs the hub) of every fenced block, in order."""
    found = []
    for match in re.finditer(r"(?P<before>[^\n]*)\n```(?P<lang>\w+)\n(?P<code>.*?)```", text, re.S):
        found.append((match["lang"], match["code"], match["before"].strip() == NEEDS_HUB))
    return found


def fresh_machine(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INTELRT_", "HF_"))}
    env.update(INTELRT_CACHE=str(tmp_path / "intelrt-cache"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1",
               HF_ENDPOINT="http://127.0.0.1:9", OMP_NUM_THREADS="1")
    return env


@pytest.mark.slow
@pytest.mark.claim("C4")
def test_quickstart_runs_in_order_on_a_fresh_machine_offline(tmp_path: Path) -> None:
    env = fresh_machine(tmp_path)
    found = blocks(PAGE.read_text(encoding="utf-8"))
    # text blocks show output (tests/integration/test_docs_commands.py compares them); the others are run
    assert {"bash", "console", "python"} <= {lang for lang, _, _ in found} <= {"bash", "console", "python", "text"}
    python: list[tuple[str, bool]] = []
    commands = 0
    for lang, code, needs_hub in found:
        if lang == "python":
            python.append((code, needs_hub))
        if lang != "console":
            continue  # bash blocks install (make, pip): the suite runs inside what they install
        for line in code.splitlines():
            argv = shlex.split(line.removeprefix("$ "), comments=True)
            assert argv[0] == "intelrt", line
            result = subprocess.run([INTELRT, *argv[1:]], capture_output=True, text=True, env=env, cwd=tmp_path,
                                    timeout=300)
            commands += 1
            assert "Traceback" not in result.stderr, f"{line}\n{result.stderr}"
            if needs_hub:
                assert result.returncode == 2 and "local hub cache" in result.stderr, f"{line}\n{result.stderr}"
                assert result.stderr.count("intelrt: error: ") == 1
            else:
                assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
            if "--dtype bfloat16" in line:
                assert re.search(r"^\s+dtype\s+bfloat16\s+you \(forced\)", result.stdout, re.M), result.stdout
            if argv[1:2] == ["plan"] and len(argv) == 2:
                assert f"intelrt plan for {tmp_path / 'intelrt-cache' / f'tiny-qwen3-v{BUILD_VERSION}'}" in result.stdout
    assert commands >= 6

    # The Python blocks, in order, in one interpreter: a block that needs the hub must raise intelrt's error.
    script = ["import intelrt"]
    for index, (code, needs_hub) in enumerate(python):
        if needs_hub:
            script += ["try:", textwrap.indent(code, "    "),
                       f"    raise SystemExit('block {index} ran without the hub')",
                       "except intelrt.ModelSourceError as exc:",
                       "    assert 'HF_HUB_OFFLINE' in str(exc), exc"]
        else:
            script.append(code)
    result = subprocess.run([sys.executable, "-c", "\n".join(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "intelrt plan for" in result.stdout and "generated_text" not in result.stdout
