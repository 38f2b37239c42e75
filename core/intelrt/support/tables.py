"""Text for people: tables that fit the terminal (long cells wrap inside their column) and
counted nouns ("1 device", "2 devices"). The plan, the doctor report and the CLI print with them."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable, Sequence

MIN_WRAPPED_WIDTH = 20
"""A wrapped column is never squeezed below this many characters (narrower reads worse than overflow)."""
GAP = "  "


def terminal_width(default: int = 100) -> int:
    """Columns of the terminal (``COLUMNS`` first, as ``shutil`` reads it); ``default`` when not a terminal."""
    return max(shutil.get_terminal_size((default, 24)).columns, 40)


def plural(count: int, singular: str, many: str | None = None) -> str:
    """``"1 hook"``, ``"3 hooks"``, ``"0 processes"`` (``many`` for irregular plurals)."""
    return f"{count} {singular if count == 1 else (many or singular + 's')}"


def wrap(text: str, width: int, indent: str = "", subsequent: str | None = None) -> list[str]:
    """``text`` wrapped to ``width`` columns; paths and ids are never broken at hyphens."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(paragraph, width, initial_indent=indent,
                                   subsequent_indent=indent if subsequent is None else subsequent,
                                   break_on_hyphens=False, break_long_words=False) or [indent])
    return lines


def _fit(widths: list[int], wrappable: Sequence[int], available: int) -> list[int]:
    """Shrink the ``wrappable`` columns, in that order, down to :data:`MIN_WRAPPED_WIDTH` until the
    row fits ``available``; what still does not fit overflows."""
    widths = list(widths)
    for column in wrappable:
        excess = sum(widths) - available
        if excess <= 0:
            break
        widths[column] = max(widths[column] - excess, min(MIN_WRAPPED_WIDTH, widths[column]))
    return widths


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[str]], *, width: int | None = None,
          indent: str = "  ", wrappable: Sequence[int] | None = None) -> list[str]:
    """Aligned columns under ``headers`` that fit ``width`` (default: the terminal's).

    Columns in ``wrappable`` (default: the last) wrap their text when the table is too wide, the
    first listed shrinking first; the others keep their natural width.
    """
    body = [[str(cell) for cell in row] for row in rows]
    all_rows = ([list(headers)] if headers else []) + body
    if not all_rows:
        return []
    columns = max(len(r) for r in all_rows)
    all_rows = [r + [""] * (columns - len(r)) for r in all_rows]
    natural = [max((max((len(line) for line in r[i].splitlines()), default=0) for r in all_rows), default=0)
               for i in range(columns)]
    total = width if width is not None else terminal_width()
    available = total - len(indent) - len(GAP) * (columns - 1)
    widths = _fit(natural, wrappable if wrappable is not None else [columns - 1], available)
    wrapped = [[wrap(cell, widths[i]) if cell else [""] for i, cell in enumerate(row)] for row in all_rows]
    widths = [max(len(line) for cells in wrapped for line in cells[i]) for i in range(columns)]
    lines: list[str] = []
    for cells in wrapped:
        for k in range(max(len(c) for c in cells)):
            parts = [(cells[i][k] if k < len(cells[i]) else "").ljust(widths[i]) for i in range(columns)]
            lines.append((indent + GAP.join(parts)).rstrip())
    return lines
