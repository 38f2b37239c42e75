"""A program that ends while one of intelrt's threads is inside torch ends with its own exit status
(``support/torch_threads.py``): a daemon thread still in a torch operation when the interpreter
finalizes makes the process abort ("terminate called without an active exception", status 134),
as a fresh process of the first-minute benchmark did once the compiled step was loading at its end."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ABORT = "terminate called without an active exception"


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=300)


def test_a_program_ending_while_intelrt_builds_on_a_thread_exits_with_its_own_status() -> None:
    done = run("""
        import sys, time, torch
        from intelrt.support.torch_threads import start_torch_thread

        def build():  # torch work that outlives the program: seconds of matrix products
            a = torch.randn(800, 800)
            ends = time.monotonic() + 3
            while time.monotonic() < ends:
                a @ a
            print("built", flush=True)

        start_torch_thread(build, name="intelrt-test-build", what="a test build")
        time.sleep(0.3)
        sys.exit(3)
    """)
    assert ABORT not in done.stderr, done.stderr
    assert done.returncode == 3 and done.stdout == "built\n", (done.returncode, done.stdout, done.stderr[-2000:])


def test_a_program_ending_in_the_middle_of_a_stream_exits_cleanly(tiny_model: Path) -> None:
    done = run(f"""
        import intelrt

        loaded = intelrt.load({str(tiny_model)!r})
        stream = loaded.stream("Intel GPUs are", max_new_tokens=450, eos_token_id=None)
        next(stream)
        print("read", flush=True)
        # the program ends here, the stream half read and still referenced
    """)
    assert ABORT not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0 and done.stdout == "read\n", (done.returncode, done.stdout, done.stderr[-2000:])
