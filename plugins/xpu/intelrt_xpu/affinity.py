"""X2: ``ZE_AFFINITY_MASK`` as the Level Zero driver reads it, in the run's device hierarchy.

What Intel's GPU driver (compute-runtime, ``ExecutionEnvironment::parseAffinityMask``) does with
the mask, once, when it loads (docs/backends/fidelity.md cites the lines):

* ``ZE_FLAT_DEVICE_HIERARCHY`` must be exactly ``FLAT``, ``COMPOSITE`` or ``COMBINED``; anything
  else means the product's default: ``FLAT`` on Data Center GPU Max, ``COMPOSITE`` elsewhere.
  In ``FLAT`` and ``COMBINED`` every tile is a device; in ``COMPOSITE`` every card is.
* Entries are read with ``std::stoul`` in base 0 — ``010`` is octal 8, ``0x1`` is 1, ``1abc``
  is 1 — and an entry it cannot read (empty, a word) makes the driver fail to initialise.
* Ids past the last device and (in ``FLAT``/``COMBINED``) ``card.tile`` entries are skipped;
  in ``COMPOSITE`` ``card.tile`` selects one tile. Mask order is never applied.
* An empty mask selects every device.

One thing a process cannot check: in ``COMPOSITE`` mode it sees cards, not how many tiles each
has, so a ``card.tile`` entry for a tile the card lacks (which the driver drops) counts here as
selecting the card.

This module reads a mask the same way without loading anything, so plans and ``intelrt doctor``
name what the driver will skip or fail on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .facts import HIERARCHY_VAR, MASK_VAR

HIERARCHIES = ("FLAT", "COMPOSITE", "COMBINED")
#: Product names whose driver default is FLAT (Xe HPC: compute-runtime's gfx_core_helper_xe_hpc_core.cpp).
FLAT_BY_DEFAULT = ("Data Center GPU Max",)
_NUMBER = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def hierarchy(env: Mapping[str, str], device_names: Sequence[str] = ()) -> tuple[str, str]:
    """(mode, why): the hierarchy the driver runs in, from ``ZE_FLAT_DEVICE_HIERARCHY`` or the default."""
    value = env.get(HIERARCHY_VAR)
    if value in HIERARCHIES:
        return str(value), f"{HIERARCHY_VAR}={value}"
    flat = any(key in name for name in device_names for key in FLAT_BY_DEFAULT)
    mode = "FLAT" if flat else "COMPOSITE"
    default = f"the driver's default for {'Data Center GPU Max' if flat else 'this GPU'}"
    if value is None:
        return mode, default
    return mode, (f"{HIERARCHY_VAR}={value!r} is not one of {', '.join(HIERARCHIES)} (the driver compares exactly, "
                  f"upper case), so {default}")


@dataclass(frozen=True)
class MaskReading:
    """A mask as the driver will read it."""

    value: str
    mode: str
    ids: tuple[int, ...]
    """Device ids selected (tiles in FLAT/COMBINED, cards in COMPOSITE), in mask order, each once."""
    problems: tuple[str, ...]
    """Entries the driver skips or reads differently from how they look."""
    fatal: tuple[str, ...]
    """Entries the driver cannot read: initialising it fails, so every XPU call fails."""
    selects_all: bool = False
    """An empty (or ``default``) mask: the driver shows every device, as without one."""

    def visible(self, count: int | None = None) -> list[int]:
        """The selected ids in the order the driver enumerates them (ascending), below ``count``
        (the machine's device count, when known)."""
        if self.selects_all:
            return list(range(count or 0))
        return sorted(i for i in self.ids if count is None or i < count)

    def beyond(self, visible: int) -> str | None:
        if self.selects_all or len(self.ids) <= visible:
            return None
        return (f"it names {len(self.ids)} device(s) but the driver shows {visible}: ids with no device behind "
                "them are skipped")


def _number(text: str, what: str, problems: list[str]) -> int | None:
    """``std::stoul(text, nullptr, 0)``, with a sentence for every surprise; ``None``: it throws."""
    match = _NUMBER.match(text)
    if match is None:
        return None
    sign, digits = match.groups()
    base = 16 if digits[:2].lower() == "0x" else 8 if len(digits) > 1 and digits[0] == "0" else 10
    number = int(digits, base)
    if sign == "-" and number:
        problems.append(f"{what} {text!r} is negative: the driver reads it as a huge id and skips it")
        return -1
    if match.end() != len(text):
        problems.append(f"{what} {text!r} is read as {number}: the driver stops at the first character that is "
                        "not part of a number")
    elif base != 10:
        problems.append(f"{what} {text!r} is read as {'hexadecimal' if base == 16 else 'octal'} {number}")
    return number


def read_mask(value: str, mode: str) -> MaskReading:
    """Read ``ZE_AFFINITY_MASK=value`` as the driver does in hierarchy ``mode``."""
    problems: list[str] = []
    fatal: list[str] = []
    ids: list[int] = []
    if value in ("", "default"):
        problems.append(f"{MASK_VAR} is set but {'empty' if not value else 'default'}: the driver then shows every "
                        "device, as if it were unset")
        return MaskReading(value, mode, (), tuple(problems), (), selects_all=True)
    entries = value.split(",")
    if entries[-1] == "":
        entries.pop()  # the driver's split: a trailing comma adds no entry
    seen: list[str] = []
    for entry in entries:
        parts = entry.split(".")
        device = _number(parts[0], "entry", problems)
        if device is None:
            fatal.append(f"{entry!r} is not a number (an empty entry: two commas in a row, or one at the start)"
                         if not entry.strip() else f"{entry!r} is not a number")
            continue
        if device < 0:
            continue
        if len(parts) > 1 and mode != "COMPOSITE":
            problems.append(f"{entry!r} is a COMPOSITE-style card.tile entry; with {mode} hierarchy every tile is "
                            "a device and the driver skips it (name the tile's own device id)")
            continue
        if len(parts) > 1 and _number(parts[1], "tile", problems) is None:
            fatal.append(f"{entry!r}: the tile part is not a number")
            continue
        if len(parts) > 3:
            fatal.append(f"{entry!r} has more than card.tile.sub parts")
            continue
        if len(parts) == 3:
            problems.append(f"{entry!r} names a part of a tile, which the driver ignores")
            continue
        key = ".".join(str(_number(p, "", []) or 0) for p in parts)
        if key in seen:
            problems.append(f"{key} is listed twice")
            continue
        seen.append(key)
        if device not in ids:
            ids.append(device)
    return MaskReading(value, mode, tuple(ids), tuple(problems), tuple(fatal))


def describe_problems(reading: MaskReading, visible: int | None) -> list[str]:
    """Every sentence worth a warning, plus the count check when this process's count is known."""
    extra = reading.beyond(visible) if visible is not None else None
    return list(reading.fatal) + list(reading.problems) + ([extra] if extra else [])
