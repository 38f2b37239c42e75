"""The simulated Level Zero GPU driver: which devices a process sees, decided once, at driver init.

A port of what Intel's driver (intel/compute-runtime) does when it loads, so the simulation is as
strict as the hardware; docs/backends/fidelity.md cites each rule's source line:

* ``ZE_FLAT_DEVICE_HIERARCHY`` is compared case-sensitively with ``COMPOSITE``, ``FLAT`` and
  ``COMBINED``; anything else means the product's default (``FLAT`` on Data Center GPU Max,
  ``COMPOSITE`` elsewhere).
* ``FLAT`` and ``COMBINED`` expose every tile of a multi-tile card as a device; ``COMPOSITE``
  exposes whole cards (tiles are sub-devices).
* ``ZE_AFFINITY_MASK`` is split at commas; each entry's first part is read with ``std::stoul``
  (base 0: ``0x1`` is hex, ``010`` octal); an entry it cannot read aborts driver initialisation.
  Indices past the last device are skipped. In FLAT/COMBINED, ``X.Y`` entries are skipped; in
  COMPOSITE, ``X`` selects card X and ``X.Y`` tile Y of card X. Mask order is never applied.
* An unset, empty or ``default`` mask selects every device.

Pure functions of the machine and two variable values: no torch, no process state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HIERARCHY_VAR = "ZE_FLAT_DEVICE_HIERARCHY"
MASK_VAR = "ZE_AFFINITY_MASK"
HIERARCHIES = ("FLAT", "COMPOSITE", "COMBINED")


@dataclass(frozen=True)
class Product:
    """An Intel GPU model as the simulation knows it."""

    name: str
    tiles: int
    """Tiles (Xe stacks) per card."""
    tile_memory_gib: float
    default_hierarchy: str
    """What the driver uses when ``ZE_FLAT_DEVICE_HIERARCHY`` is unset or not one of its values."""
    native_bf16: bool = True
    max_allocation: int | None = None
    """Bytes one allocation may take (``maxMemAllocSize``) without relaxed allocation limits;
    ``None``: no limit below the memory size."""


ARC_MAX_ALLOCATION = 4294959104
"""Arc's single-allocation limit, 4 GiB less 8 KiB (``CL_DEVICE_MAX_MEM_ALLOC_SIZE``; intel/compute-runtime#627:
"Too low 4GB allocation limit on Intel Arc GPUs"). Stock torch then fails a 4 GiB tensor with
"XPU out of memory. Tried to allocate 4.00 GiB" although the card has 15.11 GiB free
(intel/intel-xpu-backend-for-triton#7477, intel/intel-extension-for-pytorch#863)."""


PRODUCTS: dict[str, Product] = {
    # Xe HPC: 2 stacks of 64 GiB (65520 MiB as torch reports each FLAT device); FLAT by default.
    "max1550": Product("Intel(R) Data Center GPU Max 1550", 2, 65520 / 1024, "FLAT"),
    # Xe HPC, one stack of 56 Xe cores, 48 GB.
    "max1100": Product("Intel(R) Data Center GPU Max 1100", 1, 48.0, "FLAT"),
    # Client Xe HPG: 16 GB, which torch reports as a total capacity of 15.11 GiB (intel/intel-xpu-backend-for-triton#7477).
    "arc-a770": Product("Intel(R) Arc(TM) A770 Graphics", 1, 15.11, "COMPOSITE", max_allocation=ARC_MAX_ALLOCATION),
}
DEFAULT_PRODUCT = "max1550"


class DriverInitError(RuntimeError):
    """The simulated driver failed to initialise (the real one throws out of ``zeInit``)."""


@dataclass(frozen=True)
class Device:
    """One device as the driver exposes it to this process."""

    card: int
    tiles: tuple[int, ...]
    """The card's tiles this device covers: one in FLAT/COMBINED, the enabled ones in COMPOSITE."""

    @property
    def uuid(self) -> bytes:
        """16 bytes naming the physical card and tile (0 for a whole COMPOSITE card)."""
        tile = self.tiles[0] + 1 if len(self.tiles) == 1 else 0
        return bytes.fromhex(f"{self.card:08x}{0:016x}{tile:08x}")


def hierarchy_mode(value: str | None, product: Product) -> str:
    """The mode the driver runs in for ``ZE_FLAT_DEVICE_HIERARCHY=value`` (exact match only)."""
    return value if value in HIERARCHIES else product.default_hierarchy


def split_entries(value: str) -> list[str]:
    """``StringHelpers::split(value, ",")``: a trailing comma adds no entry, an inner or leading one does."""
    entries: list[str] = []
    pos = 0
    while pos < len(value):
        comma = value.find(",", pos)
        entries.append(value[pos:] if comma < 0 else value[pos:comma])
        if comma < 0:
            break
        pos = comma + 1
    return entries


_STOUL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_ULONG = 2**64


def stoul(text: str) -> int:
    """``static_cast<uint32_t>(std::stoul(text, nullptr, 0))``; raises :class:`DriverInitError`
    where ``std::stoul`` throws (nothing to read, or out of range)."""
    match = _STOUL.match(text)
    if match is None:
        raise DriverInitError(f"std::stoul cannot read ZE_AFFINITY_MASK entry {text!r} (std::invalid_argument)")
    sign, digits = match.groups()
    base = 16 if digits[:2].lower() == "0x" else 8 if len(digits) > 1 and digits[0] == "0" else 10
    number = int(digits, base)
    if number >= _ULONG:
        raise DriverInitError(f"ZE_AFFINITY_MASK entry {text!r} is out of range for std::stoul (std::out_of_range)")
    if sign == "-":
        number = (_ULONG - number) % _ULONG
    return number % 2**32


def enumerate_devices(cards: int, product: Product, hierarchy: str | None, mask: str | None,
                      tiles: int | None = None) -> list[Device]:
    """The devices a process sees on ``cards`` cards of ``product`` with these variable values."""
    per_card = product.tiles if tiles is None else tiles
    mode = hierarchy_mode(hierarchy, product)
    expose_tiles = mode != "COMPOSITE"
    enabled: dict[int, set[int]] = {}
    if mask is None or mask in ("", "default"):
        enabled = {card: set(range(per_card)) for card in range(cards)}
    else:
        flat = [(card, tile) for card in range(cards) for tile in range(per_card)]
        count = len(flat) if expose_tiles else cards
        for entry in split_entries(mask):
            parts = entry.split(".")
            index = stoul(parts[0])
            if index >= count:
                continue
            if expose_tiles:
                if len(parts) > 1:
                    continue  # tiles are devices: X.Y means nothing
                card, tile = flat[index]
                enabled.setdefault(card, set()).add(tile)
            elif len(parts) == 1:
                enabled.setdefault(index, set()).update(range(per_card))
            else:
                tile = stoul(parts[1])
                if tile < per_card and len(parts) == 2:
                    enabled.setdefault(index, set()).add(tile)
                elif tile < per_card and len(parts) != 3:
                    raise DriverInitError(f"ZE_AFFINITY_MASK entry {entry!r} has more than three parts "
                                          "(UNRECOVERABLE_IF in the driver)")
    devices: list[Device] = []
    for card in sorted(enabled):
        chosen = tuple(sorted(enabled[card]))
        if expose_tiles:
            devices += [Device(card, (tile,)) for tile in chosen]
        elif chosen:
            devices.append(Device(card, chosen))
    return devices
