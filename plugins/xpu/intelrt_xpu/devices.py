"""X2, X3, X11: which Intel GPUs a run sees (``ZE_AFFINITY_MASK``) and in which order.

Device ids are the ids the Level Zero driver enumerates with no mask, in the run's hierarchy:
tiles in FLAT mode (the default on Data Center GPU Max, where a Max 1550 card is two devices),
cards in COMPOSITE mode — see :mod:`intelrt_xpu.affinity`. ``devices=[0, 2]`` becomes
``ZE_AFFINITY_MASK=0,2`` for the processes the run starts (also when the environment already
holds another mask: that mask is replaced for the run, with a warning). The driver reads the
mask once, when it loads, and detection has loaded it in the planning process: there the mask
would change nothing, so ``load()`` leaves it out of its own process and the placement names
the device instead (:mod:`intelrt_xpu.placement`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from intelrt.plugin import (
    Backend,
    DeviceId,
    EnvVar,
    Finding,
    Plan,
    PlanError,
    Request,
)

from .affinity import MaskReading, describe_problems, hierarchy, read_mask
from .collective import xccl_missing, xccl_usable
from .facts import (
    AMBIGUOUS_VIEW,
    DRIVER_CANDIDATES_KEY,
    DRIVER_MASK_KEY,
    HIERARCHY_KEY,
    HIERARCHY_VAR,
    MARK_VAR,
    MASK_VAR,
    PCI_ORDER_VAR,
    Detected,
)

SET_ON_COMMAND_LINE = (f"set it on the run's own command line ({MASK_VAR}=0,2 torchrun ...), or pass devices= to "
                        f"intelrt (CLI --devices); `unset {MASK_VAR}` if it is a leftover export")


def mask_reading(env: Mapping[str, str], backend: Detected | None = None) -> MaskReading | None:
    """The environment's mask read in the hierarchy detection ran in (``None``: no mask)."""
    mask = env.get(MASK_VAR)
    if mask is None:
        return None
    mode = backend.versions.get(HIERARCHY_KEY) if backend is not None else None
    if mode is None:
        mode = hierarchy(env, [d.name for d in backend.devices] if backend is not None else ())[0]
    return read_mask(mask, str(mode))


def malformed_mask(env: Mapping[str, str], backend: Detected | None, visible: int | None) -> Finding | None:
    """A warning naming each entry of the environment's mask that the driver skips or misreads."""
    reading = mask_reading(env, backend)
    if reading is None:
        return None
    problems = describe_problems(reading, visible)
    if not problems:
        return None
    seen = f"; this process sees {visible} Intel GPU device(s)" if visible is not None else ""
    return Finding("warning", f"{MASK_VAR} has entries the driver ignores",
                   f"{MASK_VAR}={reading.value!r} ({reading.mode} hierarchy): {'; '.join(problems)}{seen}",
                   fix=f"correct or unset {MASK_VAR} (device ids in the run's hierarchy, e.g. 0,1), or pass devices= "
                       "to intelrt", claim="X2")


def _candidate_readings(backend: Detected) -> list[MaskReading | None] | None:
    """The masks this process's driver may have read when the view is ambiguous (``None``: it is not)."""
    raw = backend.versions.get(DRIVER_CANDIDATES_KEY)
    if raw is None:
        return None
    names = [d.name for d in backend.devices]
    readings: list[MaskReading | None] = []
    for mask, stated in json.loads(str(raw)):
        mode = hierarchy({HIERARCHY_VAR: stated} if stated is not None else {}, names)[0]
        readings.append(None if mask is None else read_mask(mask, mode))
    return readings


def _said(reading: MaskReading | None) -> str:
    return f"{MASK_VAR}={reading.value}" if reading is not None else f"no {MASK_VAR}"


def driver_reading(backend: Detected, devices: Sequence[DeviceId] = ()) -> MaskReading | None:
    """The mask this process's driver read when it loaded (``None``: none), in its hierarchy — never
    the one in ``os.environ`` now, which it does not read again (:mod:`intelrt_xpu.driver_view`).
    When that is ambiguous, one of the candidates if each puts every one of ``devices`` at the same
    index here; ``PlanError`` when they do not agree (one of them may be the wrong GPU)."""
    candidates = _candidate_readings(backend)
    if candidates is None:
        mask = backend.versions.get(DRIVER_MASK_KEY)
        return None if mask is None else read_mask(str(mask), str(backend.versions.get(HIERARCHY_KEY) or "FLAT"))
    placed: list[str] = []
    indices: set[tuple[int, ...]] = set()
    for reading in candidates:
        try:
            here = tuple(_index_under(backend, reading, d) for d in devices)
        except PlanError:
            placed.append(f"under {_said(reading)} it is not in this process")
            indices.add(())
            continue
        placed.append(f"under {_said(reading)} it is {', '.join(f'xpu:{i}' for i in here)}")
        indices.add(here)
    if len(indices) > 1:
        note = next((n for n in backend.notes if AMBIGUOUS_VIEW in n), "")
        raise PlanError(f"devices={list(devices)}: intelrt cannot tell which Intel GPU that is in this process "
                        f"({'; '.join(placed)}): {note}. Export {MASK_VAR} before Python starts or not at all "
                        "(devices= alone selects), plan before anything touches torch.xpu, install pyzes (torch "
                        "then counts Intel GPUs without loading the driver), or start the run with the plan's "
                        f"environment: intelrt launch --devices {','.join(map(str, devices))}")
    return candidates[0]


def _index_under(backend: Backend | Detected, reading: MaskReading | None, device: DeviceId) -> int:
    """Where device id ``device`` is in a process whose driver read ``reading``; ``PlanError`` when it
    cannot reach it there."""
    if isinstance(device, str):
        if _shows_tiles(reading, [device]):
            return 0
        device = card_of(device)
    if reading is None or reading.selects_all:
        if device >= backend.device_count:
            raise PlanError(f"devices: id {device} does not exist: this machine shows {backend.device_count} Intel "
                            f"GPU device(s), ids 0..{backend.device_count - 1}")
        return device
    visible = reading.visible()[:backend.device_count]
    if device not in visible:
        raise PlanError(f"devices: id {device} is not visible in this process: its Level Zero driver read "
                        f"{MASK_VAR}={reading.value} when it loaded (devices {', '.join(map(str, visible)) or 'none'}) "
                        f"and never reads it again. Unset {MASK_VAR} before starting Python, or start the run "
                        f"with the plan's environment: intelrt launch --devices {device} (or {MASK_VAR}={device} "
                        "python ...)")
    return visible.index(device)


def in_process_index(backend: Backend, device: DeviceId) -> int:
    """Where device id ``device`` is in *this* process, whose driver enumerated the devices when it
    loaded (with the mask it read then, if any); ``PlanError`` when this process cannot reach it, or
    cannot tell where it is. A ``card.tile`` id is its card here, unless the driver read exactly that
    tile (then it is device 0)."""
    return _index_under(backend, driver_reading(backend, [device]), device)


def ascending(ids: Sequence[int]) -> bool:
    return all(a < b for a, b in zip(ids, ids[1:], strict=False))


def _order_note(what: str, ids: Sequence[int]) -> Finding:
    order = sorted(set(ids))
    mapping = ", ".join(f"xpu:{n} is device {d}" for n, d in enumerate(order))
    return Finding("info", f"{what} is not ascending: order is not applied",
                   f"the driver enumerates the selected devices in its own order (by PCI bus id with "
                   f"{PCI_ORDER_VAR}=1), not in mask order: {mapping}", claim="X3")


def _inherited(backend: Backend, request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding] | None:
    mask = env.get(MASK_VAR)
    if mask is None:
        return None
    items: list[EnvVar | Finding] = []
    malformed = malformed_mask(env, backend, backend.device_count)
    if malformed is not None:
        items.append(request.warn_or_refuse(malformed))
    if env.get(MARK_VAR) == mask:
        items.append(Finding("info", f"{MASK_VAR}={mask} selects this run's devices",
                             "intelrt set it for this run (devices=, intelrt launch)", claim="X2"))
    else:
        detail = (f"{MASK_VAR}={mask} was not given to intelrt for this run, yet it decides which Intel GPUs the "
                  f"run sees ({backend.device_count} visible); a forgotten export silently routes later runs to "
                  "the wrong devices")
        items.append(request.warn_or_refuse(Finding("warning", f"{MASK_VAR} inherited from the environment",
                                                    detail, fix=SET_ON_COMMAND_LINE, claim="X2")))
    reading = mask_reading(env, backend)
    ids = list(reading.ids) if reading is not None else []
    if not ascending(ids):
        items.append(_order_note(f"{MASK_VAR}={mask}", ids))
    return items


def card_of(device: DeviceId) -> int:
    """The device (card, in COMPOSITE mode) a ``devices=`` entry names: ``2`` → 2, ``"0.1"`` → 0."""
    return device if isinstance(device, int) else int(device.split(".")[0])


def _shows_tiles(seen: MaskReading | None, tiles: list[str]) -> bool:
    """Whether a driver that read ``seen`` shows exactly these tiles (it read a mask of them): only then
    does a ``card.tile`` id name a device here; otherwise the process sees whole cards."""
    return seen is not None and [e.strip() for e in seen.value.split(",") if e.strip()] == tiles


def _tiles(backend: Backend, ids: list[DeviceId]) -> None:
    """``card.tile`` ids are COMPOSITE mode's: in FLAT/COMBINED every tile is a device of its own id."""
    mode = str(backend.versions.get(HIERARCHY_KEY) or "FLAT")
    tiles = [d for d in ids if isinstance(d, str)]
    if tiles and mode != "COMPOSITE":
        per_card = 2 if any("Max 1550" in d.name for d in backend.devices) else None
        flat = (", ".join(f"{t} is device {int(t.split('.')[0]) * per_card + int(t.split('.')[1])}" for t in tiles)
                if per_card else "card c tile t is device c * tiles_per_card + t")
        raise PlanError(f"devices={ids}: {', '.join(tiles)} names a tile as card.tile, which only COMPOSITE mode "
                        f"knows; this run's Level Zero hierarchy is {mode}, where every tile is a device with its own "
                        f"id ({flat}). Name the tile's device id, or set {HIERARCHY_VAR}=COMPOSITE for the run")


def _selected(backend: Backend, request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    ids = list(request.devices or ())
    _tiles(backend, ids)
    ambiguous = backend.versions.get(DRIVER_CANDIDATES_KEY) is not None
    seen = None if ambiguous else driver_reading(backend)
    items: list[EnvVar | Finding] = []
    if ambiguous:
        # Which mask this driver read is not known, so neither is the machine's size (in-process
        # placement refuses devices the candidates disagree on: in_process_index).
        items.append(request.warn_or_refuse(Finding(
            "warning", f"devices={ids} not checked against the machine",
            f"intelrt cannot tell which {MASK_VAR} this process's Level Zero driver read, so not whether device(s) "
            f"{', '.join(map(str, ids))} exist; the driver of each process the run starts drops ids that do not",
            fix=f"plan in a process started without {MASK_VAR} to check the ids", claim="X2")))
    elif seen is None or seen.selects_all:
        # This driver read no mask: it shows every device, so detection's count is the machine's.
        count = backend.device_count
        bad = [i for i in ids if card_of(i) >= count]
        if bad:
            raise PlanError(f"devices={ids}: this machine shows {count} Intel GPU device(s), ids 0..{count - 1} "
                            f"(in its {backend.versions.get('hierarchy', 'FLAT')} hierarchy); "
                            f"{', '.join(map(str, bad))} does not exist")
    else:
        # This process sees only the devices of the mask its driver read: ids outside it cannot be checked here.
        unchecked = [i for i in ids if card_of(i) not in seen.ids]
        if unchecked:
            detail = (f"this process sees only the devices of the {MASK_VAR}={seen.value} its driver read, so "
                      f"intelrt cannot tell whether device(s) {', '.join(map(str, unchecked))} exist; the driver "
                      "drops ids that do not")
            items.append(request.warn_or_refuse(Finding(
                "warning", f"devices={ids} not checked against the machine", detail,
                fix=f"plan in a process started without {MASK_VAR} to check the ids (device ids of the run's "
                    "hierarchy: in FLAT mode each tile, while `xpu-smi discovery` lists cards)",
                claim="X2")))
    mask = ",".join(map(str, ids))
    items += [
        EnvVar(MASK_VAR, mask, f"devices={ids} selects these Intel GPU devices in the processes the run starts; Level "
                               "Zero reads it once, when the driver loads, so it is set in their environment, not "
                               "exported in your shell", claim="X2", overwrite_user=True, in_process=False),
        EnvVar(PCI_ORDER_VAR, "1", "ids follow PCI bus order (lowest first), so the same ids pick the same GPUs "
                                   "on every run", claim="X3", in_process=False),
        EnvVar(MARK_VAR, mask, f"tells the run's processes that {MASK_VAR} was chosen for this run, so they do not "
                               "warn about an inherited mask", claim="X2", overwrite_user=True, in_process=False),
        Finding("info", f"{MASK_VAR}={mask} takes effect in the run's processes",
                f"the driver reads the mask once, when it loads; this process loaded it during detection "
                f"({backend.device_count} device(s) visible here), so load() in this process names the device "
                "instead (placement xpu:N) and leaves the mask out of it (setup_env() too); processes started with "
                "the plan's environment get the mask: intelrt launch, torchrun, or a process started with "
                "plan.child_environment()", claim="X2"),
    ]
    tiles = [i for i in ids if isinstance(i, str)]
    if tiles and not _shows_tiles(seen, tiles):
        items.append(request.warn_or_refuse(Finding(
            "warning", f"devices={ids}: a tile is reached only by the run's processes",
            f"{', '.join(tiles)} selects a tile of a COMPOSITE card through {MASK_VAR}, which a driver reads when it "
            f"loads; this process's driver shows whole cards, so load() here runs on the whole card (every tile of it)",
            fix=f"start the run with the plan's environment: intelrt launch --devices {mask} (or {MASK_VAR}={mask} "
                "python ...)", claim="X2")))
    cards = [card_of(i) for i in ids]
    if not ascending(cards):
        items.append(_order_note(f"devices={ids}", cards))
    return items


def run_environment(backend: Backend, request: Request, env: Mapping[str, str]) -> list[EnvVar | Finding] | None:
    """X2/X3: ``devices=`` → ``ZE_AFFINITY_MASK`` (replacing an inherited one) and
    ``ZE_ENABLE_PCI_ID_DEVICE_ORDER=1`` (yours kept); an inherited mask gets a warning, a
    non-ascending one a note. Ids beyond the machine's devices → ``PlanError``."""
    if request.devices is None:
        return _inherited(backend, request, env)
    return _selected(backend, request, env)


def ranks_devices(backend: Backend, env: Mapping[str, str]) -> int:
    """How many Intel GPUs the ranks of a launch see: their drivers read the mask of ``env``, which may
    not be the one this process's driver read (one exported after torch counted the devices here) —
    so this process's count decides only when the two agree. A mask read against the machine this
    process shows (its driver read none), or an upper bound (the number of ids it names)."""
    reading = mask_reading(env, backend)
    try:
        here = driver_reading(backend)
    except PlanError:
        here = None
    if reading is None or reading.selects_all or (here is not None and here.value == reading.value):
        return backend.device_count
    if backend.versions.get(DRIVER_CANDIDATES_KEY) is None and (here is None or here.selects_all):
        return len(reading.visible(backend.device_count))
    return len(reading.ids)


def launch_environment(backend: Backend, plan: Plan, nproc: int, env: Mapping[str, str]) -> list[EnvVar | Finding]:
    """X11: one ``ZE_AFFINITY_MASK`` shared by every rank (a per-rank mask hangs XCCL
    collectives); each rank picks ``xpu:LOCAL_RANK``; one process per selected Intel GPU."""
    if not isinstance(nproc, int) or nproc < 1:
        raise PlanError(f"nproc={nproc!r}: launch at least one process (one per Intel GPU)")
    devices = plan.request.devices
    planned = next((s.value for s in plan.env if s.name == MASK_VAR), None)
    mask = planned if planned is not None else env.get(MASK_VAR)
    selected = len(devices) if devices else ranks_devices(backend, env)
    if nproc > selected:
        where = f"devices={list(devices)}" if devices else (
            f"{MASK_VAR}={mask}" if mask is not None else "all visible")
        if not devices and selected != backend.device_count:
            where += (f", which the ranks' drivers read; this process shows {backend.device_count} because its "
                      "driver loaded before that mask was set, and reads a mask only once")
        hint = ("; a mask with one device per rank hangs XCCL collectives: give every rank one shared mask"
                if mask is not None and selected == 1 else "")
        raise PlanError(f"nproc={nproc}: intelrt launches one process per Intel GPU, and this run has {selected} "
                        f"({where}); pass --nproc {selected} or select more devices with --devices{hint}")
    if nproc > 1 and not xccl_usable(backend):
        raise PlanError(f"nproc={nproc} needs the xccl collective backend: {xccl_missing(backend)}")
    items: list[EnvVar | Finding] = []
    if mask is not None:
        items.append(EnvVar(MASK_VAR, mask, f"one mask shared by all {nproc} rank(s): each rank sees the same "
                                            "devices and picks its own by LOCAL_RANK (a per-rank mask hangs XCCL "
                                            "collectives)", claim="X11", overwrite_user=bool(devices)))
        if devices:
            items.append(EnvVar(MARK_VAR, mask, f"marks {MASK_VAR} as chosen for this run", claim="X11",
                                overwrite_user=True))
    items.append(Finding("info", f"{nproc} rank(s), one per Intel GPU, each on xpu:LOCAL_RANK",
                         "torchrun / accelerate launch set LOCAL_RANK; accelerate (and so Trainer) calls "
                         "torch.xpu.set_device(LOCAL_RANK) and joins the xccl process group", claim="X11"))
    return items
