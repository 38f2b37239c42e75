"""The command line's parser pieces: a parser that reports mistakes through the error contract,
value types with bounds (checked while parsing, before anything loads), and the options every
command shares (``-v``, ``--json``, ``--simulate``)."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .failures import UsageError

SIMULATE_HELP = ("plan as on a machine you do not have: KIND:COUNT[:GENERATION], e.g. xpu:2 (two Data Center GPU "
                 "Max 1550 cards, the default: 4 devices, one per tile in FLAT mode; xpu:2:max1100 for one-tile "
                 "cards), hpu:8:gaudi3; or any machine intelrt.testing simulates, as JSON (e.g. "
                 "'{\"kind\": \"hpu\", \"torch_fork\": true}': Gaudi's PyTorch fork, which lazy mode needs) or "
                 "@FILE")


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions and epilogs wrap paragraph by paragraph; indented lines (examples) stay as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(lines), width, initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False))
        return "\n\n".join(out)


class Parser(argparse.ArgumentParser):
    """argparse, except that a mistake raises :class:`UsageError` instead of exiting, so it is
    reported like every other error (one paragraph, exit 2, JSON with ``--json``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, command=self.prog.removeprefix("intelrt").strip() or "")


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in ``[minimum, maximum]`` (argparse type)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


def counts(minimum: int = 1) -> Callable[[str], tuple[int, ...]]:
    """One or more whole numbers >= ``minimum``, comma-separated (argparse type): ``32,1024,4096``."""
    one = count(minimum)

    def parse(text: str) -> tuple[int, ...]:
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"must be a whole number, or whole numbers separated by commas, got "
                                             f"{text!r}")
        return tuple(one(part) for part in parts)

    return parse


def positive_number() -> Callable[[str], float]:
    """A finite number > 0 (argparse type): ``nan``, ``inf``, 0 and negatives are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
        return value

    return parse


def non_negative_seconds() -> Callable[[str], float]:
    """A finite number of seconds >= 0 (argparse type; 0 turns the watch it sets off)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (0: off), got {text!r}")
        return value

    return parse


def common_options() -> argparse.ArgumentParser:
    """``-v`` and ``--json``, accepted after the subcommand too (``intelrt plan -v``)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="log what intelrt does (-vv: more detail, and other libraries' messages); "
                             "errors come with their traceback")
    parent.add_argument("--json", action="store_true",
                        help="print the result as JSON on stdout (errors too: {\"error\": {type, message, fix}})")
    return parent


def json_requested(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Whether ``--json`` is among the command's own options (before ``--`` and, for ``launch``,
    before the script, whose arguments are the script's). Read before parsing, so that a mistake
    in the command line is reported as JSON too."""
    subparsers = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    tokens = list(argv)
    command = next((t for t in tokens if not t.startswith("-")), None)
    if subparsers is None or command not in subparsers.choices:
        return "--json" in tokens
    sub = subparsers.choices[command]
    takes_value = {o for a in sub._actions if a.nargs != 0 for o in a.option_strings}
    remainder = any(a.nargs == argparse.REMAINDER for a in sub._actions)
    rest = tokens[tokens.index(command) + 1:]
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            return False
        if token == "--json":
            return True
        if token in takes_value:
            i += 2
            continue
        if not token.startswith("-") and remainder:
            return False  # launch: the script and its own arguments start here
        i += 1
    return False


def verbose_requested(argv: Sequence[str]) -> int:
    """How many ``-v`` a command line that could not be parsed asked for (before ``--``), so that its
    error comes with the traceback too."""
    count = 0
    for token in argv:
        if token == "--":
            break
        if token == "--verbose":
            count += 1
        elif len(token) > 1 and token.startswith("-") and set(token[1:]) == {"v"}:
            count += len(token) - 1
    return count


def refuse(parser: argparse.ArgumentParser, flag: str, reason: str) -> None:
    """``flag`` belongs to other commands: given here, it is refused with ``reason`` (hidden from help)."""
    class Refused(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            raise UsageError(reason, command=parser.prog.removeprefix("intelrt").strip())

    parser.add_argument(flag, action=Refused, nargs="?", help=argparse.SUPPRESS)


def non_empty() -> Callable[[str], str]:
    """Text with something in it (argparse type)."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        return text

    return parse
