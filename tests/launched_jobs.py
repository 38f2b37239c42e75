"""Running a launched job (``intelrt launch``, or a benchmark that launches its ranks) from a test.

On the 2-core machine running two test workers, a launched CPU rank has twice died of SIGABRT about a
second after starting, with no message of its own (the other rank then reports gloo's "connection
reset by peer"); alone, under load and four at once the same jobs pass. Until its cause is known,
such a job runs once more, with a warning that keeps the first run's error lines; the second run
must succeed, and any other failure fails at once."""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Mapping, Sequence

ABORTED = "SIGABRT"
"""How torchrun's report names a rank that died of the abort signal."""


def error_lines(stderr: str) -> str:
    """Each rank's first error lines, then the tail of ``stderr`` (torchrun's summary comes last)."""
    first = [line for line in stderr.splitlines()
             if line.startswith("[rank") and ("Error" in line or "what()" in line or "Abort" in line)][:20]
    return "\n".join(first) + "\n...\n" + stderr[-4000:]


def run_job(argv: Sequence[str], *, timeout: float, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``argv``'s completed run (output captured), run again once if a rank of it died of SIGABRT."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=dict(env))
    if result.returncode != 0 and ABORTED in result.stderr:
        warnings.warn(f"a launched rank died of SIGABRT; running the job once more. First run:\n"
                      f"{error_lines(result.stderr)}", stacklevel=2)
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=dict(env))
    return result
