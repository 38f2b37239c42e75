"""The fault catalogue (issue 34): every case a declared fault with the outcome a user must see,
run by a parametrized test; ``docs/reliability.md``'s catalogue is rendered from these
declarations (``docs/catalogue.py``, an mkdocs hook).

A catalogue module is a test module named ``test_faults_<area>.py`` in either tier. It makes a
:class:`Catalogue` and decorates each test function with ``@catalogue.cases(...)``: the cases are
registered (for the page and the counts) and become the function's ``case`` parameter, one test
per case, marked ``fault`` (``pytest -m fault`` runs the whole catalogue). The test injects the
fault, records what happened as a :class:`Seen` (:func:`cli` runs ``intelrt`` in-process,
:func:`call` an API call) and hands it to :func:`check`, which asserts the declared outcome and
scans the output: no traceback anywhere without ``-v``; for a command that ends in an error,
:func:`check` runs it again with ``-v`` and asserts the traceback is there.

Part B (the server's cases) adds ``test_faults_serve.py`` the same way.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

AREAS = ("load", "plan", "generate", "pipeline", "inputs", "train", "resume", "save", "quantize", "launch", "serve",
         "bench", "plugins", "env", "secrets", "cli")
CLEAR_ERROR = "clear error"
"""The outcome: an error that names what was wrong and how to fix it (no traceback without ``-v``)."""
CORRECT = "correct behaviour"
"""The outcome: the call or command does what it should (and says so where it adapts)."""
OUTCOMES = (CLEAR_ERROR, CORRECT)
RISKS = ("traceback", "silent wrong", "data loss", "leak", "hang", "wrong culprit")
"""What a case would show if intelrt regressed (the issue's classes of defects)."""
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Fault:
    """One case of the catalogue."""

    id: str
    """Unique over the catalogue; the test's parameter id."""
    area: str
    fault: str
    """What is wrong, as the user would say it."""
    outcome: str
    says: tuple[str, ...] = ()
    """Words the error message (or, for a correct behaviour, the output) must contain."""
    risk: str = "traceback"
    trigger: str = ""
    """How the fault is made: the command line, the call, the damaged file (shown on the page)."""
    exit_code: int | None = None
    """A command's exit status (default: 2 for a clear error, 0 for a correct behaviour)."""
    error: str = "IntelrtError"
    """The exception class an API call raises for a clear error (by name: any subclass counts)."""
    data: Any = field(default=None, compare=False)
    """What the test needs to make the fault (argv, keywords, a file …); not shown."""

    def __post_init__(self) -> None:
        if self.area not in AREAS:
            raise ValueError(f"{self.id}: area {self.area!r} is not one of {AREAS}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"{self.id}: outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.risk not in RISKS:
            raise ValueError(f"{self.id}: risk {self.risk!r} is not one of {RISKS}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.=_+-]*", self.id):
            raise ValueError(f"{self.id!r}: ids are lowercase words joined by - (they are test ids)")

    @property
    def expected_exit(self) -> int:
        if self.exit_code is not None:
            return self.exit_code
        return 2 if self.outcome == CLEAR_ERROR else 0


def error(id: str, area: str, fault: str, *says: str, **kwargs: Any) -> Fault:
    """A case whose outcome is a clear error containing ``says``."""
    return Fault(id, area, fault, CLEAR_ERROR, says, **kwargs)


def works(id: str, area: str, fault: str, *says: str, **kwargs: Any) -> Fault:
    """A case whose outcome is the correct behaviour (the test asserts what that is)."""
    return Fault(id, area, fault, CORRECT, says, **kwargs)


@dataclass
class Entry:
    """A test function of a catalogue module and the cases it runs."""

    module: str
    test: str
    cases: tuple[Fault, ...]


class Catalogue:
    """The cases of one catalogue module, each bound to the test function that runs it."""

    def __init__(self, file: str) -> None:
        from pathlib import Path

        path = Path(file).resolve()
        self.module = f"tests/{path.parent.name}/{path.name}"
        """The module as the page names it (``tests/<tier>/test_faults_<area>.py``)."""
        self.entries: list[Entry] = []

    def cases(self, *faults: Fault | Sequence[Fault]) -> Callable[[Callable[..., Any]], Any]:
        flat = tuple(f for item in faults for f in ([item] if isinstance(item, Fault) else item))

        def bind(test: Callable[..., Any]) -> Any:
            self.entries.append(Entry(self.module, test.__name__, flat))
            marked = pytest.mark.parametrize("case", [pytest.param(f, id=f.id) for f in flat])(test)
            return pytest.mark.fault(marked)

        return bind

    @property
    def faults(self) -> list[Fault]:
        return [f for entry in self.entries for f in entry.cases]


# -- what a case produced --------------------------------------------------------------------------

@dataclass
class Seen:
    """What a command or call did: its exit status (commands), its value or exception (calls),
    and everything it printed or logged."""

    stdout: str = ""
    stderr: str = ""
    code: int | None = None
    value: Any = None
    error: BaseException | None = None
    argv: tuple[str, ...] | None = None
    env: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def message(self) -> str:
        """The error as the user reads it: ``intelrt: error: …`` of a command, ``str()`` of an exception."""
        if self.error is not None:
            return str(self.error) + "".join(f" ({n})" for n in getattr(self.error, "__notes__", []))
        lines = [line for line in self.stderr.splitlines() if line.startswith("intelrt: error:")]
        if not lines:
            return ""
        start = self.stderr.index(lines[0])
        return self.stderr[start:]


@contextlib.contextmanager
def environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``env`` applied (``None`` removes a variable), restored afterwards."""
    before = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def cli(*argv: str, env: Mapping[str, str | None] | None = None) -> Seen:
    """``intelrt ARGV`` in this process (``intelrt.cli.main``): exit status, stdout, stderr. A
    fresh plugin host before and after (the environment may change what it loads)."""
    from intelrt.cli import main
    from intelrt.host.manager import reset_host

    out, err = io.StringIO(), io.StringIO()
    env = dict(env or {})
    reset_host()
    try:
        with environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: int | None = main(list(argv))
            except SystemExit as exc:  # --help, --version; anything else is a defect the check names
                code = exc.code if isinstance(exc.code, int) else 1
                err.write(f"\n[SystemExit({exc.code!r}) escaped intelrt.cli.main]\n")
    finally:
        reset_host()
    return Seen(out.getvalue(), err.getvalue(), code, argv=tuple(argv), env=env)


def call(function: Callable[[], Any], *, env: Mapping[str, str | None] | None = None) -> Seen:
    """``function()`` with what it prints and logs captured; its value or the exception it raised."""
    from intelrt.host.manager import reset_host

    out, err = io.StringIO(), io.StringIO()
    records = _Records()
    root = logging.getLogger()
    root.addHandler(records)
    seen = Seen(env=dict(env or {}))
    reset_host()
    try:
        with environment(seen.env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                seen.value = function()
            except Exception as exc:  # noqa: BLE001 - the case's outcome, checked by check()
                seen.error = exc
    finally:
        root.removeHandler(records)
        reset_host()
    seen.stdout, seen.stderr = out.getvalue(), err.getvalue() + "\n".join(records.lines)
    return seen


# -- the check every case ends with ----------------------------------------------------------------

#: Every checked case: (fault, passed). Read by the summary at the end of the session (tests/conftest.py).
CHECKED: list[tuple[Fault, Seen]] = []


def _missing(text: str, words: Sequence[str]) -> list[str]:
    low = text.lower()
    return [w for w in words if w.lower() not in low]


def check(case: Fault, seen: Seen, *, verbose: bool = True) -> Seen:
    """Assert ``case``'s outcome on ``seen`` and that nothing printed a traceback; for a command
    that ended in an error, run it again with ``-v`` and assert the traceback is shown
    (``verbose=False`` for a command that cannot run twice)."""
    assert TRACEBACK not in seen.output, f"{case.id}: a traceback without -v:\n{seen.output[-3000:]}"
    if seen.argv is not None:
        assert seen.code == case.expected_exit, (
            f"{case.id}: exit status {seen.code}, expected {case.expected_exit}:\n{seen.output[-3000:]}")
        if case.outcome == CLEAR_ERROR:
            message = seen.message
            assert message, f"{case.id}: no 'intelrt: error:' paragraph on stderr:\n{seen.output[-3000:]}"
            assert not _missing(message, case.says), (
                f"{case.id}: the error does not say {_missing(message, case.says)}:\n{message}")
            if verbose:
                again = cli("-v", *seen.argv, env=seen.env)
                assert TRACEBACK in again.stderr, f"{case.id}: -v shows no traceback:\n{again.stderr[-3000:]}"
                assert again.code == seen.code
        else:
            assert not _missing(seen.output, case.says), (
                f"{case.id}: the output does not say {_missing(seen.output, case.says)}:\n{seen.output[-3000:]}")
    elif case.outcome == CLEAR_ERROR:
        assert seen.error is not None, f"{case.id}: no error; the call returned {seen.value!r:.300}"
        names = {cls.__name__ for cls in type(seen.error).__mro__}
        assert case.error in names, (
            f"{case.id}: {type(seen.error).__module__}.{type(seen.error).__name__} ({seen.error}), expected "
            f"{case.error}")
        assert not _missing(seen.message, case.says), (
            f"{case.id}: the error does not say {_missing(seen.message, case.says)}:\n{seen.message}")
    else:
        assert seen.error is None, f"{case.id}: {type(seen.error).__name__}: {seen.error}"
    CHECKED.append((case, seen))
    return seen


def no_secret(seen: Seen, *secrets: str) -> None:
    """Not one of ``secrets`` anywhere in what ``seen`` printed, logged or raised."""
    text = seen.output + seen.message
    shown = [s for s in secrets if s in text]
    assert not shown, f"secret(s) {shown} printed:\n{text[-3000:]}"


def catalogue_modules(root: os.PathLike[str] | str) -> list[str]:
    """The catalogue's test modules under ``root`` (the tests directory), as paths."""
    from pathlib import Path

    return sorted(str(p) for p in Path(root).glob("*/test_faults_*.py"))


def load_catalogue(root: os.PathLike[str] | str) -> list[Catalogue]:
    """Import every catalogue module under ``root`` and return their catalogues (for the page)."""
    import importlib.util
    from pathlib import Path

    sys.path.insert(0, str(Path(root)))
    found = []
    try:
        for path in catalogue_modules(root):
            name = f"faults_page_{Path(path).parent.name}_{Path(path).stem}"
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
            found.append(module.catalogue)
    finally:
        sys.path.remove(str(Path(root)))
    return found
