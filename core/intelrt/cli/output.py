"""What a command prints: its result on stdout (a table, or JSON with ``--json``); progress on
stderr, so that stdout stays the result.

Progress is the library's long steps (:mod:`intelrt.support.progress`) and the command's own: on
a terminal each running step is a spinner line with its elapsed time (rich's ``Progress``,
transient), replaced by ``intelrt: what: done in N s`` when it ends; when stderr is not a terminal
(a pipe, a log file, CI), plain lines: ``intelrt: what …`` at the start and the same ``done`` line
at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..support.progress import StepEvent
from ..support.progress import step as step

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["ProgressHandler", "emit", "say", "step", "CurrentStderr"]


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """The command's result: ``data`` as JSON with ``--json``, else ``text`` (secrets redacted)."""
    from ..support.redaction import redact, redact_text

    if args.json:
        print(json.dumps(redact(data), indent=2))
    else:
        print(redact_text(text))


class CurrentStderr:
    """``sys.stderr`` as it is when written to (pytest's capture too); while a spinner runs, a
    whole line goes above it through rich's console instead of onto the spinner's line."""

    def write(self, text: str) -> int:
        with SPINNERS.lock:
            if SPINNERS.progress is not None and text.endswith("\n"):
                SPINNERS.line(text.removesuffix("\n"))
                return len(text)
            return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _Spinners:
    """The running steps of this process, shown on stderr (one rich ``Progress``, started while a
    step runs on a terminal, stopped when the last one ends)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.console: Console | None = None
        self.progress: Progress | None = None
        self.tasks: dict[int, TaskID] = {}

    def _terminal(self) -> Console | None:
        """A rich console on stderr when stderr is a terminal (else ``None``: plain lines)."""
        isatty = getattr(sys.stderr, "isatty", None)
        if not (callable(isatty) and isatty()):
            return None
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)  # sys.stderr resolved at each write
        return self.console if self.console.is_terminal and not self.console.is_dumb_terminal else None

    def line(self, text: str) -> None:
        with self.lock:
            if self.progress is not None:
                from rich.text import Text

                self.progress.console.print(Text(text), soft_wrap=True)
            else:  # one write: print's text and newline are two, and a log line from another thread lands between
                sys.stderr.write(text + "\n")
                sys.stderr.flush()

    def start(self, event: StepEvent) -> None:
        with self.lock:
            console = self._terminal()
            if console is None:
                self.line(f"intelrt: {event.what} …")
                return
            if self.progress is None:
                from rich.progress import Progress, SpinnerColumn, TextColumn
                from rich.table import Column

                # spinner and clock first: a long description is cut at the terminal's edge, not them
                text = Column(ratio=1, no_wrap=True, overflow="ellipsis")
                self.progress = Progress(SpinnerColumn(), _elapsed_column(),
                                         TextColumn("intelrt: {task.description} …", markup=False, table_column=text),
                                         console=console, transient=True, expand=True,
                                         # not rich's redirection of sys.stdout/sys.stderr: it holds a
                                         # line until its newline, so a progress bar started meanwhile
                                         # (Trainer's tqdm, which redraws with \r) would show nothing
                                         redirect_stdout=False, redirect_stderr=False)
                self.progress.start()
            self.tasks[event.key] = self.progress.add_task(event.what, total=None)

    def finish(self, event: StepEvent) -> None:
        with self.lock:
            task = self.tasks.pop(event.key, None)
            if task is not None and self.progress is not None:
                self.progress.remove_task(task)
            if event.phase == "done" and event.report_done:
                self.line(f"intelrt: {event.what}: done in {event.seconds:.1f} s")
            if not self.tasks and self.progress is not None:
                self.progress.stop()
                self.progress = None

    def stop(self) -> None:
        """End every spinner (the command is over, whatever happened)."""
        with self.lock:
            self.tasks.clear()
            if self.progress is not None:
                self.progress.stop()
                self.progress = None


def _elapsed_column() -> Any:
    """``12 s``: a step's time so far (rich's own TimeElapsedColumn shows 0:00:12)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Elapsed(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.elapsed or 0.0:>3.0f} s", style="progress.elapsed")

    return Elapsed()


SPINNERS = _Spinners()


def say(text: str) -> None:
    """One line of progress on stderr (above a running spinner)."""
    SPINNERS.line(f"intelrt: {text}")


class ProgressHandler(logging.Handler):
    """Renders the ``intelrt.progress`` logger: steps as spinners (or plain lines), any other
    record as one ``intelrt: message`` line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, "intelrt_step", None)
            if isinstance(event, StepEvent):
                from ..support.redaction import redact_text

                event = dataclasses.replace(event, what=redact_text(event.what))
            if not isinstance(event, StepEvent):
                say(self.format(record))
            elif event.phase == "start":
                SPINNERS.start(event)
            else:
                SPINNERS.finish(event)
        except Exception:  # noqa: BLE001 - logging's contract: a handler never raises
            self.handleError(record)
