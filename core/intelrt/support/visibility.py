"""Device-visibility variables read the way a driver reads them, naming what it would skip.

``ZE_AFFINITY_MASK`` (Level Zero), ``HABANA_VISIBLE_MODULES`` and ``HABANA_VISIBLE_DEVICES``
(Gaudi) are comma-separated device ids. A driver skips what it cannot use — an empty entry, a
word, a negative number, a repeat, an id with no device behind it — without a word, so a typo
quietly leaves a run with fewer devices (or none, and then the CPU). intelrt parses the same
value, keeps what a driver keeps, and names every skipped entry, so plans and ``intelrt doctor``
can say why. Parsing never raises: problems are data.
"""

from __future__ import annotations

from dataclasses import dataclass


def _whole(text: str) -> bool:
    """ASCII digits only: what a driver's ``strtol`` accepts (``"²"`` passes ``str.isdigit``)."""
    return bool(text) and text.isascii() and text.isdigit()


@dataclass(frozen=True)
class DeviceList:
    """A visibility variable's value: the entries a driver keeps and the ones it skips."""

    name: str
    value: str
    entries: tuple[str, ...]
    """Kept entries, normalised (``"2"``, or ``"0.1"`` for device 0, sub-device 1, where allowed)."""
    problems: tuple[str, ...]
    """One sentence per skipped entry (empty when the value is well formed)."""

    @property
    def ids(self) -> tuple[int, ...]:
        """Device ids in the order given, each once (a sub-device counts as its device)."""
        ids: list[int] = []
        for entry in self.entries:
            device = int(entry.split(".")[0])
            if device not in ids:
                ids.append(device)
        return tuple(ids)

    @property
    def has_subdevices(self) -> bool:
        return any("." in e for e in self.entries)

    @property
    def text(self) -> str:
        """The kept entries as a value for the variable (``parse(...).text`` parses to the same list)."""
        return ",".join(self.entries)

    def beyond(self, visible: int) -> str | None:
        """A problem sentence when the list names more devices than the ``visible`` ones a driver showed."""
        if self.has_subdevices or len(self.ids) <= visible:
            return None
        return (f"it names {len(self.ids)} device(s) but the driver shows {visible}: ids with no device "
                "behind them are skipped")

    def summary(self, visible: int | None = None) -> list[str]:
        """Every problem, plus :meth:`beyond` when ``visible`` is known."""
        extra = self.beyond(visible) if visible is not None else None
        return list(self.problems) + ([extra] if extra else [])


def parse_device_list(name: str, value: str, *, subdevices: bool = False) -> DeviceList:
    """Parse ``value`` of the variable ``name``; ``subdevices`` allows ``DEVICE.SUB`` entries (Level Zero)."""
    if not value.strip():
        return DeviceList(name, value, (), (
            f"{name} is set but empty: drivers differ on whether that shows every device or none; unset it, "
            "or list device ids such as 0,1",))
    entries: list[str] = []
    problems: list[str] = []
    for raw in value.split(","):
        part = raw.strip()
        head, dot, sub = part.partition(".")
        if not part:
            problems.append("an empty entry (two commas in a row, or a comma at either end)")
            continue
        if dot and not subdevices:
            problems.append(f"{part!r} is a sub-device; {name} takes whole device ids")
            continue
        if dot and not (_whole(head) and _whole(sub)):
            problems.append(f"{part!r} is not DEVICE.SUBDEVICE with whole numbers (e.g. 0.1)")
            continue
        if not dot and not _whole(part):
            negative = part.startswith("-") and _whole(part[1:])
            problems.append(f"{part!r} is {'negative' if negative else 'not a whole number'}, so not a device id")
            continue
        normalised = f"{int(head)}.{int(sub)}" if dot else str(int(part))
        if normalised in entries:
            problems.append(f"{normalised} is listed twice")
            continue
        entries.append(normalised)
    return DeviceList(name, value, tuple(entries), tuple(problems))
