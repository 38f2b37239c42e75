"""What a request option is: its vocabulary, the normaliser that turns what a caller passed into
the request's value (refusing anything else with a :class:`ConfigurationError` that says what was
wrong), and :class:`RequestOption`, the declaration :class:`~intelrt.hooks.request.Request`'s
fields carry (``plan()``'s and ``load()``'s parameters are generated from it, the CLI's plan flags
built from it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError
from .payloads import (
    FORCEABLE_WARMUPS,
    INFERENCE_STRATEGIES,
    QUANTIZATION_REQUESTS,
    TRAINING_STRATEGIES,
)

AUTO = "auto"
DTYPES = ("auto", "float32", "bfloat16", "float16")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
QUANTIZATIONS = QUANTIZATION_REQUESTS
QUANTIZATION_ALIASES = {"4": "4bit", "8": "8bit"}
"""``4`` / ``8`` stay bitsandbytes' (as before torchao joined); ``int4`` / ``int8`` are torchao's."""
SWITCH = ("auto", "on", "off")
BATCHING = (AUTO, "continuous", "padded")
WORKLOADS = ("auto", "one-shot", "server", "batch")
"""The kind of work a load serves (it decides how much warm-up pays for itself)."""
WARMUPS = (AUTO, *FORCEABLE_WARMUPS)
"""How the fast decode step is prepared: as it is, captured in a device graph, or compiled and captured."""
SHARDING = (AUTO, *TRAINING_STRATEGIES)
PARALLEL = (AUTO, *INFERENCE_STRATEGIES)


def text_choice(name: str, value: object, allowed: Sequence[str] | None = None) -> str:
    """``value`` as a non-empty string (one of ``allowed`` when given), else a ConfigurationError."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string, got {value!r}")
    if allowed is not None and value not in allowed:
        raise ConfigurationError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


DeviceId = int | str
"""One entry of ``devices=``: a device id (``2``), or a ``"card.tile"`` id (``"0.1"``: tile 1 of card 0)
for Intel GPUs in COMPOSITE mode, where each card is one device and a tile is named as the Level Zero
driver names it in ``ZE_AFFINITY_MASK`` (level-zero-spec ``PROG.rst`` l.2506-2764)."""

_WHOLE = re.compile(r"[0-9]+")
_CARD_TILE = re.compile(r"([0-9]+)\.([0-9]+)")


def _device_id(text: str, devices: object) -> DeviceId:
    part = text.strip()
    if part.isascii() and _WHOLE.fullmatch(part):
        return int(part)
    tile = _CARD_TILE.fullmatch(part) if part.isascii() else None
    if tile is not None:
        return f"{int(tile[1])}.{int(tile[2])}"
    if part.startswith("-") and part[1:].isascii() and part[1:].isdigit():
        raise ConfigurationError(f"devices={devices!r}: device ids are >= 0")
    raise ConfigurationError(f"devices={devices!r}: every id must be a whole number (e.g. '0,2'), or card.tile "
                             "(e.g. '0.1') for one tile of an Intel GPU in COMPOSITE mode")


def normalize_devices(devices: object) -> tuple[DeviceId, ...] | None:
    """``None``, a list of ids or ``"0,2"`` → a tuple of ids (:data:`DeviceId`: ints, and ``"card.tile"``
    strings such as ``"0.1"``); an int count is refused (ambiguous)."""
    if devices is None:
        return None
    ids: list[DeviceId]
    if isinstance(devices, str):
        parts = [p.strip() for p in devices.split(",")]
        if not devices.strip() or any(not p for p in parts):
            raise ConfigurationError(f"devices={devices!r}: give device ids separated by commas, e.g. '0,2'")
        ids = [_device_id(p, devices) for p in parts]
    elif isinstance(devices, (list, tuple)):
        if not all((isinstance(d, int) and not isinstance(d, bool)) or isinstance(d, str) for d in devices):
            raise ConfigurationError(f"devices={devices!r}: every id must be an int (or a 'card.tile' string)")
        ids = [d if isinstance(d, int) else _device_id(d, devices) for d in devices]
    else:
        raise ConfigurationError(
            f"devices={devices!r}: pass a list of device ids such as [0, 2] (or '0,2'); "
            "to use every visible device, leave devices unset")
    if not ids:
        raise ConfigurationError("devices=[] selects nothing: leave devices unset to use every visible device")
    if any(isinstance(i, int) and i < 0 for i in ids):
        raise ConfigurationError(f"devices={devices!r}: device ids are >= 0")
    if len(set(ids)) != len(ids):
        raise ConfigurationError(f"devices={devices!r}: a device id is repeated")
    return tuple(ids)


def normalize_backend(value: object) -> str:
    return text_choice("backend", value).lower()


def normalize_dtype(value: object) -> str:
    return text_choice("dtype", DTYPE_ALIASES.get(str(value), value), DTYPES)


def normalize_kernels(value: object) -> str | bool:
    if isinstance(value, bool):
        return value
    choice = text_choice("kernels", value, SWITCH)
    return {"on": True, "off": False}.get(choice, choice)


def normalize_quantization(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).lower()
    return text_choice("quantization", QUANTIZATION_ALIASES.get(text, text), QUANTIZATIONS)


def normalize_compile(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "none"
    return text_choice("compile", value)


def switch(name: str) -> Callable[[object], str]:
    def normalize(value: object) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        return text_choice(name, value, SWITCH)

    return normalize


def one_of(name: str, allowed: Sequence[str]) -> Callable[[object], str]:
    return lambda value: text_choice(name, value, allowed)


def text(name: str) -> Callable[[object], str]:
    return lambda value: text_choice(name, value)


def flag(name: str) -> Callable[[object], bool]:
    def normalize(value: object) -> bool:
        if not isinstance(value, bool):
            raise ConfigurationError(f"{name} must be True or False, got {value!r}")
        return value

    return normalize


@dataclass(frozen=True)
class RequestOption:
    """One option of ``plan()`` / ``load()`` (and the CLI flag ``--name-with-dashes``): read from the
    metadata of a :class:`~intelrt.hooks.request.Request` field (see :func:`request_option`)."""

    name: str
    default: Any
    help: str
    normalize: Callable[[Any], Any]
    choices: tuple[str, ...] | None = None
    """The values the command line accepts (``None``: any text, checked by ``normalize``)."""
    flag: bool = False
    """A switch: ``--name`` on the command line sets True."""
    metavar: str | None = None
    accepts: str | None = None
    """The annotation ``plan()`` / ``load()`` give the option where a caller may pass more than the
    request keeps (``devices="0,2"``, ``compile=True``); ``None``: the field's own type."""

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def to_json(self, value: Any) -> Any:
        return list(value) if isinstance(value, tuple) else value


#: ``from_pretrained`` keywords the plan decides, and the request option to use instead.
PLANNED_KWARGS = {"device_map": "devices=/backend=", "dtype": "dtype=", "torch_dtype": "dtype=",
                  "attn_implementation": "attention=", "use_kernels": "kernels=", "kernel_config": "kernels=",
                  "quantization_config": "quantization=", "trust_remote_code": "trust_remote_code=",
                  "distributed_config": "parallel=/sharding=", "tp_plan": "parallel='tensor'",
                  "tp_size": "parallel='tensor'", "device_mesh": "parallel=/sharding=",
                  "use_safetensors": "allow_pickle="}



def request_option(default: Any, help: str, normalize: Callable[[Any], Any], *, choices: tuple[str, ...] | None = None,
                   flag: bool = False, metavar: str | None = None, accepts: str | None = None) -> Any:
    """A :class:`~intelrt.hooks.request.Request` field that is a request option: its default and, as
    field metadata, what the CLI and the docs show of it, how a caller's value is normalised and
    (``accepts``) what ``plan()`` / ``load()`` take when that is more than the field's type."""
    return field(default=default, metadata={"option": {"help": help, "normalize": normalize, "choices": choices,
                                                       "flag": flag, "metavar": metavar, "accepts": accepts}})
