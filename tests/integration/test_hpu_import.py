"""H3: importing intelrt and the Gaudi plugin, in a fresh process (moved from
tests/contract/test_hpu_detection.py in issue 41: the contract tier starts no process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.claim("H3")
def test_H3_import_intelrt_and_the_plugin_load_neither_torch_nor_the_stack() -> None:
    code = ("import sys, intelrt, intelrt_hpu.plugin; "
            "print(__import__('json').dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'transformers', 'habana_frameworks'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == []
