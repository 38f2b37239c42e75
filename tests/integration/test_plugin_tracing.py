"""C6: INTELRT_DEBUG traces hook calls, in a process of its own (moved from
tests/contract/test_plugins.py in issue 41: the contract tier starts no process)."""

from __future__ import annotations

import pytest


@pytest.mark.claim("C6")
def test_c6_debug_traces_hook_calls_to_stderr(tiny_model, capfd) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    code = f"import intelrt; intelrt.plan({str(tiny_model)!r})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**__import__("os").environ, "INTELRT_DEBUG": "1"}, check=True)
    assert "intelrt-trace: call intelrt_select_attention" in result.stderr
    assert "CpuBackend.select_attention <- cpu returned None" in result.stderr
    assert "defaults.select_attention <- defaults returned Decision(value='sdpa'" in result.stderr
