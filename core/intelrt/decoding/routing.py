"""Which path one ``generate`` call takes, and why: the plan's decisions meet the call's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    """The path for one call: ``fast`` (intelrt's loop), ``continuous`` (``generate_batch``) or
    ``generate`` (``model.generate``), with the reason and the rows per padded batch."""

    path: str
    reason: str
    batch_rows: int


def choose_route(plan: Any, count: int, as_list: bool, unsupported: str | None) -> Route:
    """Route ``count`` prompts (``as_list``: the caller passed a list) given the plan and, when the
    fast loop cannot honour the call's settings, ``unsupported`` saying why."""
    decode = plan.decisions.get("decode")
    decode_value = decode.value if decode is not None else {}
    fast = isinstance(decode_value, dict) and decode_value.get("method") == "fast"
    decode_reason = decode.reason if decode is not None else "the plan has no decode decision"
    if not as_list:
        if fast and unsupported is None:
            return Route("fast", decode_reason, 1)
        return Route("generate", unsupported or decode_reason, 1)
    batching = plan.decisions.get("batching")
    value = batching.value if batching is not None and isinstance(batching.value, dict) else {}
    rows = int(value.get("max_batch") or count)
    reason = batching.reason if batching is not None else "the plan has no batching decision"
    if value.get("method") == "continuous":
        if unsupported is None:
            return Route("continuous", reason, count)
        return Route("generate", f"continuous batching would drop settings it cannot apply: {unsupported}",
                     rows if value.get("max_batch") else count)
    if value.get("engine") == "fast" and fast and unsupported is None:
        return Route("fast", reason, rows)
    return Route("generate", unsupported or (reason if not fast else decode_reason), rows)
