"""X5 from the command line, as a process (moved from tests/contract/test_xpu_attention.py in issue 41:
the contract tier starts no process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.claim("X5")
def test_X5_cli_plan_with_flash_attention_3_exits_non_zero(tiny_model: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "intelrt.cli", "plan", str(tiny_model), "--simulate", "xpu:4", "--devices", "0,2",
         "--attention", "flash_attention_3"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "FlashAttention-3 runs only on NVIDIA GPUs" in result.stderr
    assert "intelrt-xpu" in result.stderr  # the error names the plugin that refused
