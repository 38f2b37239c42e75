"""The one-kernel decode attention under Triton's interpreter (issue 6): the tests in
``tests/interpreted/`` run in a fresh process with ``TRITON_INTERPRET=1``, since Triton decides
between compiling and interpreting when it is first imported."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

INTERPRETED = Path(__file__).parents[1] / "interpreted"


@pytest.mark.slow
@pytest.mark.skipif(find_spec("triton") is None, reason="Triton is not installed (the dev extra installs it)")
def test_decode_attention_kernel_under_the_triton_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", str(INTERPRETED)], env=env,
                            capture_output=True, text=True, timeout=600, cwd=INTERPRETED.parent.parent)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "deselected" not in summary, summary
