"""LoRA adapters the decode engine serves per row: several adapters and the base model in one batch.

The engine's model stays the transformers model it always was; loading an adapter wraps it once in
PEFT's ``PeftModel`` (``peft/peft_model.py``, ``PeftModel.from_pretrained`` / ``load_adapter``),
which injects the LoRA layers into the model's own modules in place. No adapter is *active*
(``LoraModel.set_adapter([])``), so a forward without adapter names is the base model's — the
compact step and captured graphs of base-only batches stay right. A batch holding adapter rows runs
the model's own forward inside PEFT's mixed-batch hooks (``peft/tuners/lora/model.py``,
``LoraModel._enable_peft_forward_hooks`` with ``adapter_names=``: each row's adapter, ``"__base__"``
for the base model's rows; ``LoraLayer._mixed_batch_forward`` applies each adapter to its rows).

An adapter's PEFT name is the engine's own (``intelrt_lora_N``, never reused), so loading a name
again while requests still decode with the old weights gives a new adapter, and the prefix cache
keys blocks by that adapter (the same prompt under two adapters has different keys and values).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BASE = "__base__"
"""PEFT's name, in ``adapter_names``, for a row of the base model."""
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
"""The files ``PeftModel.save_pretrained`` writes the weights to (safetensors by default)."""


@dataclass(frozen=True)
class EngineAdapter:
    """One adapter the engine holds: ``name`` (what requests send), ``key`` (its PEFT name),
    ``salt`` (the prefix cache's parent digest for its rows' first block)."""

    name: str
    key: str
    path: str
    salt: bytes


def check_adapter_directory(path: str) -> Path:
    """``path`` as a LoRA adapter directory PEFT can load; ``ValueError`` naming the missing or bad file."""
    directory = Path(path)
    config = directory / "adapter_config.json"
    if not config.is_file():
        raise ValueError(f"{config} does not exist: an adapter directory holds adapter_config.json and "
                         f"{WEIGHT_FILES[0]} (PeftModel.save_pretrained writes both)")
    if not any((directory / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(f"{directory / WEIGHT_FILES[0]} does not exist (nor {WEIGHT_FILES[1]}): the adapter's "
                         "weights are missing")
    return directory


class EngineAdapters:
    """The LoRA adapters injected into ``model`` (one engine's), by request name. Not thread-safe:
    the engine's own thread loads, unloads and decodes (the server's scheduler sees to it)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._peft: Any = None
        self._by_name: dict[str, EngineAdapter] = {}
        self._held: dict[str, EngineAdapter] = {}
        """Every adapter still in the model, by key (unloaded names whose rows are decoding included)."""
        self._made = 0

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def resolve(self, name: str) -> EngineAdapter:
        """The adapter requests name ``name``; ``ValueError`` when none is loaded under it."""
        adapter = self._by_name.get(name)
        if adapter is None:
            raise ValueError(f"no LoRA adapter named {name!r} is loaded (loaded: {', '.join(self.names) or 'none'})")
        return adapter

    def load(self, name: str, path: str) -> EngineAdapter:
        """Inject the adapter in ``path`` under ``name``; ``ValueError`` saying what is wrong (the
        model is left as it was)."""
        if name in self._by_name:
            raise ValueError(f"a LoRA adapter named {name!r} is loaded already; unload it first")
        directory = check_adapter_directory(path)
        from peft import PeftConfig, PeftModel, PeftType

        try:
            config = PeftConfig.from_pretrained(str(directory))
        except Exception as exc:  # noqa: BLE001 - a bad adapter_config.json, said with its file
            raise ValueError(f"{directory / 'adapter_config.json'} cannot be read by PEFT: {exc}") from None
        if config.peft_type != PeftType.LORA:
            raise ValueError(f"{directory / 'adapter_config.json'} is a {config.peft_type} adapter; the engine "
                             "serves LoRA adapters")
        self._made += 1
        key = f"intelrt_lora_{self._made}"
        try:
            if self._peft is None:
                self._peft = PeftModel.from_pretrained(self.model, str(directory), adapter_name=key,
                                                       is_trainable=False)
            else:
                self._peft.load_adapter(str(directory), adapter_name=key, is_trainable=False)
        except Exception as exc:  # noqa: BLE001 - PEFT raises many kinds; said with the directory
            self._drop_layers(key)
            raise ValueError(f"the adapter in {directory} does not fit this model ({type(exc).__name__}: "
                             f"{str(exc)[:300]})") from None
        finally:
            self._deactivate()
        self.model.eval()
        salt = hashlib.sha256(f"lora\0{key}".encode()).digest()
        adapter = self._by_name[name] = self._held[key] = EngineAdapter(name, key, str(directory), salt)
        log.info("intelrt engine: LoRA adapter %r loaded from %s", name, directory)
        return adapter

    def unload(self, name: str) -> EngineAdapter:
        """Take ``name`` away from new requests (``ValueError`` when not loaded); its weights stay
        until :meth:`delete` (once no row decodes with them)."""
        adapter = self.resolve(name)
        del self._by_name[name]
        return adapter

    def delete(self, key: str) -> None:
        """Remove the adapter ``key`` from the model (its rows are all gone)."""
        adapter = self._held.pop(key, None)
        if adapter is None or self._peft is None:
            return
        self._peft.base_model.delete_adapter(key)
        self._deactivate()
        log.info("intelrt engine: LoRA adapter %r removed from the model", adapter.name)

    @property
    def holds_unloaded(self) -> bool:
        """Some unloaded adapter is still in the model (its rows were decoding)."""
        return len(self._held) > len(self._by_name)

    def retired(self, in_use: set[str]) -> list[str]:
        """Keys of unloaded adapters no row in ``in_use`` decodes with (ready for :meth:`delete`)."""
        live = {a.key for a in self._by_name.values()}
        return [key for key in self._held if key not in live and key not in in_use]

    @contextlib.contextmanager
    def rows(self, keys: Sequence[str]) -> Iterator[None]:
        """Forwards of the model inside this block apply adapter ``keys[i]`` to row ``i``
        (``BASE``: none)."""
        if self._peft is None:
            raise RuntimeError("no LoRA adapter was ever loaded into this model")
        with self._peft.base_model._enable_peft_forward_hooks(adapter_names=list(keys)):
            yield

    def _deactivate(self) -> None:
        """No adapter active: a forward without adapter names is the base model's."""
        if self._peft is not None:
            self._peft.base_model.set_adapter([], inference_mode=True)

    def _drop_layers(self, key: str) -> None:
        """Undo a half-done injection of ``key`` (PEFT injects before it loads the weights)."""
        from peft.tuners.lora import LoraLayer

        for module in self.model.modules():
            if isinstance(module, LoraLayer) and key in module.lora_A:
                module.delete_adapter(key)
        if self._peft is not None:
            self._peft.peft_config.pop(key, None)
