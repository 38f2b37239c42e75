"""``plan()``'s and ``load()``'s request option parameters, and the call that passes them on,
rendered from :class:`~intelrt.hooks.request.Request` (issue 41: each fact once).

    python -m intelrt.hooks.signature --write

Each option's name, annotation and default is declared once, as a field of ``Request``. The two
functions spell the options out between marker comments, generated from that declaration, so
that their signatures stay plain Python that mypy, an IDE and ``help()`` read. (A ``TypedDict``
with ``Unpack`` cannot declare them: both functions also take ``**from_pretrained_kwargs``, which
needs PEP 728's ``extra_items``.) ``tests/contract/test_layout.py`` fails when a marked region
differs from what this module renders; the command above rewrites the regions in place, and
without ``--write`` names the stale files. Nothing imports this module at run time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from .options import AUTO
from .request import REQUEST_OPTIONS, Request

COMMAND = "python -m intelrt.hooks.signature --write"
LINE_LENGTH = 100
"""ruff's ``line-length`` (pyproject.toml): the generated lines stay within it."""
PACKAGE = Path(__file__).resolve().parents[1]
FILES = (PACKAGE / "planning" / "planner.py", PACKAGE / "runtime" / "loading.py")
"""The modules of ``plan()`` and ``load()``: each holds one region of each kind."""


@dataclass(frozen=True)
class Parameter:
    """One request option as ``plan()`` / ``load()`` take it."""

    name: str
    annotation: str
    default: object

    def declaration(self) -> str:
        """``name: annotation = default``; a default of ``"auto"`` is spelt ``AUTO`` (both modules import it)."""
        default = "AUTO" if isinstance(self.default, str) and self.default == AUTO else repr(self.default)
        return f"{self.name}: {self.annotation} = {default}"

    def keyword(self) -> str:
        """``name=name``: the parameter passed on under its own name."""
        return f"{self.name}={self.name}"


REGIONS: dict[str, Callable[[Parameter], str]] = {"parameters": Parameter.declaration,
                                                  "keywords": Parameter.keyword}
"""The kinds of region: the signature's parameters, and the keywords of the call that forwards them."""


def begin(kind: str) -> str:
    return f"# <request option {kind}: {COMMAND}>"


def end(kind: str) -> str:
    return f"# </request option {kind}>"


def request_parameters() -> tuple[Parameter, ...]:
    """The request options in :data:`~intelrt.hooks.request.REQUEST_OPTIONS`' order, each annotated
    with what a caller may pass: its ``accepts`` where set, else the type of its ``Request`` field."""
    annotations = {f.name: f.type for f in fields(Request)}
    parameters = []
    for declared in REQUEST_OPTIONS:
        annotation = declared.accepts or annotations[declared.name]
        if not isinstance(annotation, str):  # request.py's ``from __future__ import annotations`` makes it text
            raise TypeError(f"Request.{declared.name}'s annotation is not text: {annotation!r}")
        parameters.append(Parameter(declared.name, annotation, declared.default))
    return tuple(parameters)


def wrap(items: Sequence[str], indent: str) -> list[str]:
    """``items``, each followed by a comma, filled into lines of at most :data:`LINE_LENGTH` columns.
    Every item ends with a comma, so that a region is valid Python whatever follows it."""
    lines: list[str] = []
    line: list[str] = []
    for item in (f"{item}," for item in items):
        if line and len(indent) + len(" ".join([*line, item])) > LINE_LENGTH:
            lines.append(indent + " ".join(line))
            line = []
        line.append(item)
    if line:
        lines.append(indent + " ".join(line))
    return lines


def missing_regions(source: str) -> list[str]:
    """The kinds of region ``source`` does not hold exactly once."""
    stripped = [line.strip() for line in source.splitlines()]
    return [kind for kind in REGIONS if stripped.count(begin(kind)) != 1 or stripped.count(end(kind)) != 1]


def render(source: str, parameters: Sequence[Parameter] | None = None) -> str:
    """``source`` with the lines between each pair of markers replaced by ``parameters`` (default:
    :func:`request_parameters`) rendered for that kind, indented as its opening marker."""
    rendered = [*(request_parameters() if parameters is None else parameters)]
    opening = {begin(kind) for kind in REGIONS}
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        kind = next((kind for kind in REGIONS if line.strip() == begin(kind)), None)
        if kind is None:
            continue
        close = next((i for i in range(index, len(lines)) if lines[i].strip() == end(kind)), None)
        if close is None or any(lines[i].strip() in opening for i in range(index, close)):
            raise ValueError(f"{begin(kind)!r} (line {index}) is not closed by {end(kind)!r}")
        indent = line[:len(line) - len(line.lstrip())]
        out.extend(f"{text}\n" for text in wrap([REGIONS[kind](p) for p in rendered], indent))
        out.append(f"{indent}{end(kind)}\n")
        index = close + 1
    return "".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelrt.hooks.signature",
                                     description="plan()'s and load()'s request options, from Request's fields")
    parser.add_argument("--write", action="store_true", help="rewrite the stale regions (default: name them)")
    args = parser.parse_args(argv)
    stale = 0
    for path in FILES:
        source = path.read_text(encoding="utf-8")
        if missing_regions(source):
            sys.stderr.write(f"{path}: no single region of {', '.join(missing_regions(source))}\n")
            return 2
        rendered = render(source)
        if rendered == source:
            continue
        stale += 1
        if args.write:
            path.write_text(rendered, encoding="utf-8")
            sys.stdout.write(f"rewrote {path}\n")
        else:
            sys.stderr.write(f"{path}: stale; run {COMMAND}\n")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
