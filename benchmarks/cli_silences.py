"""The longest silence of each ``intelrt`` command, as a user at a terminal sees it (issue 32).

    python benchmarks/cli_silences.py --output results/        # every command, on a terminal and piped
    python benchmarks/cli_silences.py --only plan run --mode tty

Each command runs in a process of its own, its stdout and stderr on one pseudo-terminal (``tty``:
what a person at a terminal sees, spinners included) or on one pipe (``pipe``: what a log file or
CI gets). Every chunk of output is timestamped as it arrives. Per command it prints:

- ``first``: seconds from start to the first output;
- ``silence``: the longest stretch without any output (start to first output included) — on a
  terminal a spinner's redraw counts as output, since the person sees the clock move;
- ``line gap``: the longest stretch between two completed lines (what a log reader sees);
- ``exit``: seconds from the last output to the process's exit (interpreter teardown);
- ``total`` and the exit status.

``serve`` is measured up to its readiness line, then sent SIGTERM: ``exit`` is from there.
The embedded tiny model is built into a fresh cache by the first command (``plan (first use)``),
so that command shows the build's silence. Results go to ``DIR/cli_silences.json``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (label, arguments after ``intelrt``): the commands of docs/quickstart.md and docs/cli.md.
COMMANDS: list[tuple[str, list[str]]] = [
    ("plan (first use)", ["plan"]),
    ("plugins", ["plugins"]),
    ("doctor", ["doctor"]),
    ("plan", ["plan"]),
    ("plan --simulate xpu:2", ["plan", "--simulate", "xpu:2"]),
    ("run", ["run"]),
    ("run --compile on", ["run", "--compile", "on"]),
    ("train --demo", ["train", "--demo"]),
    ("bench --tiny", ["bench", "--tiny"]),
    ("serve", ["serve", "--port", "0"]),
    ("launch --dry-run", ["launch", "--dry-run", "--simulate", "xpu:2", "train.py"]),
]
READY = (b"ready on http", b"intelrt serve: context:")
"""The line ``intelrt serve`` prints once it accepts requests (before issue 32, its last start-up line)."""


@dataclass
class Measure:
    command: str
    mode: str
    returncode: int | None = None
    first_s: float = 0.0
    silence_s: float = 0.0
    line_gap_s: float = 0.0
    exit_s: float = 0.0
    total_s: float = 0.0
    longest_silence_before: str = ""
    """The last line printed before the longest silence (what the user stared at)."""
    tail: list[str] = field(default_factory=list)


def _measure(label: str, argv: list[str], mode: str, env: dict[str, str], timeout: float, cwd: Path) -> Measure:
    if mode == "tty":
        parent, child = pty.openpty()
        # a terminal of 40 x 100 (a new pseudo-terminal is 0 x 0: tqdm would draw bars of no width)
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        out = err = child
    else:
        parent, child = os.pipe()
        out = err = child
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "intelrt.cli", *argv], stdout=out, stderr=err,
                               stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    os.close(child)
    chunks: list[tuple[float, bytes]] = []
    stop_sent: float | None = None
    serving = argv[0] == "serve"
    buffer = b""
    while True:
        if time.monotonic() - start > timeout and process.poll() is None:
            process.kill()
        ready, _, _ = select.select([parent], [], [], 0.05)
        if ready:
            try:
                data = os.read(parent, 65536)
            except OSError:  # the pty's other side closed
                data = b""
            if not data:
                break
            now = time.monotonic()
            chunks.append((now, data))
            buffer += data
            if serving and stop_sent is None and any(mark in buffer for mark in READY):
                process.send_signal(signal.SIGTERM)
                stop_sent = now
        elif process.poll() is not None:
            # the process ended; read what is left without blocking
            continue_reading = select.select([parent], [], [], 0.2)[0]
            if not continue_reading:
                break
    returncode = process.wait()
    end = time.monotonic()
    os.close(parent)
    m = Measure(label, mode, returncode, total_s=end - start)
    if not chunks:
        m.silence_s = m.exit_s = m.total_s
        return m
    m.first_s = chunks[0][0] - start
    times = [start] + [t for t, _ in chunks if stop_sent is None or t <= stop_sent]
    gaps = [(b - a, i) for i, (a, b) in enumerate(zip(times, times[1:], strict=False))]
    m.silence_s, where = max(gaps)
    text = b"".join(d for t, d in chunks if t <= times[where]).decode(errors="replace")
    lines_before = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    m.longest_silence_before = lines_before[-1][:160] if lines_before else "(start)"
    line_times = [start]
    for t, data in chunks:
        if stop_sent is not None and t > stop_sent:
            break
        line_times.extend(t for _ in range(data.count(b"\n")))
    m.line_gap_s = max((b - a for a, b in zip(line_times, line_times[1:], strict=False)), default=m.total_s)
    m.exit_s = end - (stop_sent if stop_sent is not None else chunks[-1][0])
    if stop_sent is not None:  # after SIGTERM: from the signal to the last output, then to the exit
        m.exit_s = end - max(stop_sent, chunks[-1][0])
    m.tail = b"".join(d for _, d in chunks).decode(errors="replace").replace("\r", "\n").splitlines()[-3:]
    return m


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=None, metavar="DIR", help="write DIR/cli_silences.json")
    parser.add_argument("--mode", choices=("tty", "pipe", "both"), default="both")
    parser.add_argument("--only", nargs="*", default=None, metavar="LABEL",
                        help="only these commands (labels as listed, e.g. plan 'train --demo')")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command before it is killed")
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="INTELRT_CACHE for the runs (default: a fresh temporary one, so the first command "
                             "builds the tiny model)")
    args = parser.parse_args(argv)
    cache = args.cache or tempfile.mkdtemp(prefix="intelrt-silences-")
    path = os.pathsep.join(str(ROOT / p) for p in ("core", "plugins/xpu", "plugins/hpu"))
    env = {**os.environ, "INTELRT_CACHE": cache, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p),
           "COLUMNS": os.environ.get("COLUMNS", "100")}
    modes = ("tty", "pipe") if args.mode == "both" else (args.mode,)
    workdir = Path(tempfile.mkdtemp(prefix="intelrt-silences-run-"))  # launch's script, train's outputs
    (workdir / "train.py").write_text("print('a rank')\n", encoding="utf-8")
    results: list[Measure] = []
    print(f"{'command':<24} {'mode':<5} {'first':>7} {'silence':>8} {'line gap':>9} {'exit':>6} {'total':>7} rc  "
          "silent after", flush=True)
    for label, command in COMMANDS:
        if args.only is not None and label not in args.only:
            continue
        for mode in modes:
            if label == "plan (first use)" and mode != modes[0]:
                continue  # the model is built once
            m = _measure(label, command, mode, env, args.timeout, workdir)
            results.append(m)
            print(f"{label:<24} {mode:<5} {m.first_s:>6.1f}s {m.silence_s:>7.1f}s {m.line_gap_s:>8.1f}s "
                  f"{m.exit_s:>5.1f}s {m.total_s:>6.1f}s {m.returncode:>2}  {m.longest_silence_before[:60]!r}",
                  flush=True)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cli_silences.json").write_text(json.dumps([asdict(r) for r in results], indent=2), encoding="utf-8")
        print(f"written to {out / 'cli_silences.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
