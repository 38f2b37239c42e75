"""X6: where the weights go (``device_map``).

With ``devices=`` the plan is for this process, whose Level Zero driver enumerated the devices at
detection: a mask can no longer select one here, so the placement names the device
(``"xpu:2"``), and a model too big for one is split with ``device_map="auto"`` limited to the
named devices by ``max_memory``. Processes the run starts get the mask instead (X2, X11).
"""

from __future__ import annotations

from intelrt.plugin import (
    FIT_HEADROOM,
    Backend,
    Decision,
    Placement,
    PlanError,
    Request,
    Situation,
    bytes_per_parameter,
    fits_one_device,
    format_bytes,
    rank_placement,
)

from .devices import in_process_index
from .facts import MASK_VAR

_PIPELINE = "pipeline() without device= also picks the Intel GPU (transformers' default device order)"


def _named(backend: Backend, request: Request, fits: bool | None,
           room: str) -> Decision:
    """X2/X6 in this process: the named devices by index (a mask here would change nothing)."""
    ids = list(request.devices or ())
    indices = [in_process_index(backend, device) for device in ids]
    where = ", ".join(f"xpu:{i} is device {d}" for i, d in zip(indices, ids, strict=True))
    why = (f"devices={ids}: this process's Level Zero driver enumerated its devices when it loaded and never reads "
           f"{MASK_VAR} again, so the placement names the device ({where})")
    if fits is False and len(indices) > 1:
        budgets = {}
        for index in indices:
            memory = backend.devices[index].total_memory
            if not memory:
                raise PlanError(f"devices={ids}: the memory of xpu:{index} is unknown, so accelerate cannot be limited "
                                "to the named devices; start the run with intelrt launch --devices instead")
            budgets[index] = int(memory / FIT_HEADROOM)
        return Decision(Placement.limited("auto", budgets),
                        f"the weights do not fit one Intel GPU ({room}); accelerate splits them across the named "
                        f"devices only: max_memory lists {', '.join(f'xpu:{i}' for i in indices)} "
                        f"(memory / {FIT_HEADROOM} each), so it leaves the other devices of this process alone; {why}",
                        claim="X6", notes=(_PIPELINE,))
    notes = [_PIPELINE]
    if len(indices) > 1:
        notes.insert(0, f"one process uses one device: the model goes to xpu:{indices[0]}; the other named devices "
                        "take the ranks of intelrt launch")
    if fits is False:
        notes.insert(0, "quantization='4bit' (bitsandbytes) shrinks the weights about 4x (SPEC X9)")
    fit = (f"the weights fit one Intel GPU ({room})" if fits else
           f"the weights may not fit it ({room})" if fits is False else "device memory is unknown")
    return Decision(Placement(f"xpu:{indices[0]}"), f"{fit}; {why}", claim="X2", notes=tuple(notes))


def select_placement(backend: Backend, s: Situation) -> Decision:
    """X6: ``device_map="xpu"`` when the weights fit one Intel GPU, ``"auto"`` (accelerate splits
    them) when they do not and the run has several. With ``devices=``, the named device by index
    (``"xpu:2"``) or ``auto`` limited to the named devices (``max_memory``): X2. In a launched rank,
    its own ``xpu:LOCAL_RANK``, or none when the weights are sharded as they load (X11)."""
    request, model, env, decided = s.request, s.model, s.env, s.decided
    ranked = rank_placement(backend, decided, env)
    if ranked is not None:
        return Decision(ranked.value, ranked.reason, claim="X11", notes=ranked.notes)
    per_param = bytes_per_parameter(decided)
    need = model.parameter_count * per_param if per_param else model.weight_bytes
    memories = [d.total_memory for d in backend.devices if d.total_memory]
    room = (f"{format_bytes(need)} of weights, x{FIT_HEADROOM} headroom, vs {format_bytes(min(memories))} per device"
            if memories else "")
    fits = fits_one_device(backend, model, per_param)
    if request.devices:
        return _named(backend, request, fits, room)
    count = backend.device_count
    if fits is False and count > 1:
        return Decision(Placement("auto"), f"the weights do not fit one Intel GPU ({room}); accelerate splits them across the "
                                f"{count} devices of the run", claim="X6", notes=(_PIPELINE,))
    if fits is False:
        return Decision(Placement("xpu"), f"the run has one Intel GPU and the weights may not fit it ({room})", claim="X6",
                        notes=("quantization='4bit' (bitsandbytes) shrinks them about 4x (SPEC X9)", _PIPELINE))
    why = f"the weights fit one Intel GPU ({room})" if fits else "device memory is unknown; one Intel GPU"
    return Decision(Placement("xpu"), why, claim="X6", notes=(_PIPELINE,))
