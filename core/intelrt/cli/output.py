"""What a command prints: its result on stdout (a table, or JSON with ``--json``); progress of
long steps on stderr, so that stdout stays the result."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """The command's result: ``data`` as JSON with ``--json``, else ``text`` (secrets redacted)."""
    from ..support.redaction import redact, redact_text

    if args.json:
        print(json.dumps(redact(data), indent=2))
    else:
        print(redact_text(text))


def say(text: str) -> None:
    """One line of progress on stderr."""
    print(f"intelrt: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """``what …`` when the step starts, ``what: done in N s`` when it ends (nothing more on failure:
    the error says what happened)."""
    say(f"{what} …")
    start = time.perf_counter()
    yield
    say(f"{what}: done in {time.perf_counter() - start:.1f} s")
