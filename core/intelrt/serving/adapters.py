"""LoRA adapters served beside the base model (``--lora NAME=DIR``, ``POST
/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` as ``vllm serve`` names them): a request
picks one by sending its name as ``model``; ``/v1/models`` lists them with the base as ``parent``.

The registry checks what it can without the engine — a PEFT LoRA directory
(``adapter_config.json`` with ``peft_type`` ``LORA``), a name that is free — and hands loading to
the engine (``AdapterEngine``), which decodes each row with its own adapter in one batch (PEFT's
mixed-batch ``adapter_names=``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import ConfigurationError
from .errors import ApiError


class AdapterEngine(Protocol):
    """What the engine does for the registry (``load_adapter`` may take seconds: called off the loop)."""

    def load_adapter(self, name: str, path: str) -> None: ...

    def unload_adapter(self, name: str) -> None: ...


@dataclass(frozen=True)
class Adapter:
    name: str
    path: str
    rank: int | None
    base: str | None
    """``base_model_name_or_path`` of its ``adapter_config.json``."""


def parse_lora_option(value: str) -> tuple[str, str]:
    """``NAME=DIR`` (``--lora``) → (name, directory)."""
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ConfigurationError(f"--lora {value!r}: write NAME=DIR (the name clients send as model, the adapter's "
                                 "directory)")
    return name.strip(), path.strip()


def read_adapter(name: str, path: str) -> Adapter:
    """The adapter in ``path``, checked; ``ConfigurationError`` saying what is wrong."""
    directory = Path(path).expanduser()
    config = directory / "adapter_config.json"
    if not config.is_file():
        raise ConfigurationError(f"LoRA adapter {name!r}: {directory} has no adapter_config.json (save it with "
                                 "PeftModel.save_pretrained or intelrt train --lora)")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"LoRA adapter {name!r}: cannot read {config} as JSON ({exc})") from None
    if not isinstance(data, dict) or str(data.get("peft_type", "")).upper() != "LORA":
        raise ConfigurationError(f"LoRA adapter {name!r}: {config} is not a LoRA adapter (peft_type "
                                 f"{data.get('peft_type') if isinstance(data, dict) else None!r})")
    rank = data.get("r")
    return Adapter(name, str(directory), rank if isinstance(rank, int) else None,
                   data.get("base_model_name_or_path"))


class Adapters:
    """The adapters a server serves, by name; thread-safe."""

    def __init__(self, base_name: str) -> None:
        self.base_name = base_name
        self._adapters: dict[str, Adapter] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._adapters)

    def get(self, name: str) -> Adapter | None:
        with self._lock:
            return self._adapters.get(name)

    def all(self) -> list[Adapter]:
        with self._lock:
            return [self._adapters[n] for n in sorted(self._adapters)]

    def load(self, name: str, path: str, engine: AdapterEngine | None) -> Adapter:
        """Check, hand to ``engine``, register; ``ApiError`` for the client otherwise."""
        if name == self.base_name:
            raise ApiError(400, f"lora_name {name!r} is the base model's name; pick another", param="lora_name")
        if self.get(name) is not None:
            raise ApiError(400, f"the LoRA adapter {name!r} is already loaded; unload it first", param="lora_name")
        try:
            adapter = read_adapter(name, path)
        except ConfigurationError as exc:
            raise ApiError(400, str(exc), param="lora_path") from None
        if engine is None:
            raise ApiError(501, "this server's decode engine does not decode LoRA adapters per request, so none can "
                                "be loaded", "server_error", param="lora_name", code="adapters_unsupported")
        try:
            engine.load_adapter(name, adapter.path)
        except Exception as exc:  # noqa: BLE001 - the engine's reason (shapes, target modules), for the client
            raise ApiError(400, f"the LoRA adapter {name!r} cannot be loaded onto this model: {exc}",
                           param="lora_path") from None
        with self._lock:
            self._adapters[name] = adapter
        return adapter

    def unload(self, name: str, engine: AdapterEngine | None) -> None:
        if self.get(name) is None:
            raise ApiError(404, f"no LoRA adapter named {name!r} is loaded (loaded: {', '.join(self.names()) or 'none'})",
                           "not_found_error", param="lora_name", code="adapter_not_found")
        if engine is not None:
            engine.unload_adapter(name)
        with self._lock:
            self._adapters.pop(name, None)
