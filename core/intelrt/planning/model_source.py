"""Find a model's files without downloading and read what planning needs from its config."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelSourceError, UnsafeModelError

log = logging.getLogger(__name__)

SAFE_WEIGHTS = (".safetensors",)
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt",
                    "preprocessor_config.json")


@dataclass(frozen=True)
class ModelInfo:
    """What planning knows about a model, read from local files only."""

    source: str
    """What the user passed (a path or a hub id)."""
    local_dir: str | None
    """Directory holding config.json (a local path or a hub-cache snapshot)."""
    config: dict[str, Any]
    weight_files: tuple[str, ...]
    has_tokenizer: bool
    base: ModelInfo | None = None
    """For a PEFT adapter directory (``adapter_config.json``, no ``config.json``): the base model
    it adapts; ``config`` is the base's. transformers loads the base, then the adapter."""

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", "unknown"))

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.config.get("architectures") or ())

    @property
    def weights_format(self) -> str:
        """``safetensors``, ``pickle``, or ``none`` (not on disk yet)."""
        if any(f.endswith(SAFE_WEIGHTS) for f in self.weight_files):
            return "safetensors"
        if any(f.endswith(PICKLE_WEIGHTS) for f in self.weight_files):
            return "pickle"
        return "none"

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights: measured from the files, else estimated from the config."""
        if self.local_dir and self.weight_files:
            total = sum(os.path.getsize(os.path.join(self.local_dir, f)) for f in self.weight_files
                        if f.endswith(SAFE_WEIGHTS if self.weights_format == "safetensors" else PICKLE_WEIGHTS))
            if total:
                return total + (self.base.weight_bytes if self.base else 0)
        return estimate_parameters(self.config) * 2  # bf16 bytes when nothing is on disk

    @property
    def parameter_count(self) -> int:
        return estimate_parameters(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "local_dir": self.local_dir, "model_type": self.model_type,
                "architectures": list(self.architectures), "weights_format": self.weights_format,
                "weight_bytes": self.weight_bytes, "has_tokenizer": self.has_tokenizer,
                "adapter_of": self.base.source if self.base else None}


def estimate_parameters(config: dict[str, Any]) -> int:
    """A rough decoder/encoder parameter count from the usual config fields (0 if unknown)."""
    text = config.get("text_config") or config
    hidden = int(text.get("hidden_size") or text.get("d_model") or 0)
    layers = int(text.get("num_hidden_layers") or text.get("n_layer") or 0)
    vocab = int(text.get("vocab_size") or 0)
    inter = int(text.get("intermediate_size") or 4 * hidden)
    if not hidden or not layers:
        return 0
    per_layer = 4 * hidden * hidden + 3 * hidden * inter
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings", True) else 2)
    return layers * per_layer + embeddings


def _weights_in(directory: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in directory.iterdir()
                        if p.is_file() and p.name.endswith(SAFE_WEIGHTS + PICKLE_WEIGHTS)
                        and not p.name.startswith(("optimizer", "scheduler", "rng_state", "training_args"))))


def _adapter_directory(source: str, directory: Path, download: bool) -> ModelInfo:
    """A PEFT adapter saved by ``Loaded.train(lora=...)`` or ``PeftModel.save_pretrained``."""
    adapter_file = directory / "adapter_config.json"
    try:
        base_name = json.loads(adapter_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelSourceError(f"{adapter_file}: cannot read it as a JSON object ({exc})") from None
    if not isinstance(base_name, str) or not base_name:
        raise ModelSourceError(f"{adapter_file} names no base_model_name_or_path, so the base model is unknown; "
                               "set it to the base model's directory or hub id")
    try:
        base = resolve_model(base_name, download=download)
    except ModelSourceError as exc:
        raise ModelSourceError(f"{source} is an adapter of {base_name}, which cannot be found: {exc}") from None
    has_tokenizer = any((directory / name).is_file() for name in _TOKENIZER_FILES)
    return ModelInfo(source=source, local_dir=str(directory), config=base.config,
                     weight_files=_weights_in(directory), has_tokenizer=has_tokenizer, base=base)


def _from_directory(source: str, directory: Path, download: bool = False) -> ModelInfo:
    config_file = directory / "config.json"
    if not config_file.is_file() and (directory / "adapter_config.json").is_file():
        return _adapter_directory(source, directory, download)
    if not config_file.is_file():
        raise ModelSourceError(
            f"{source}: no config.json in {directory}. Point intelrt at a directory saved with "
            "save_pretrained() (it holds config.json and the weights).")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{config_file}: cannot read it as JSON ({exc}); re-save the model") from None
    if not isinstance(config, dict):
        raise ModelSourceError(f"{config_file}: expected a JSON object, got {type(config).__name__}")
    has_tokenizer = any((directory / name).is_file() for name in _TOKENIZER_FILES)
    return ModelInfo(source=source, local_dir=str(directory), config=config,
                     weight_files=_weights_in(directory), has_tokenizer=has_tokenizer)


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
"""What the hub accepts as a model id: ``name`` or ``org/name`` of letters, digits, ``-``, ``_``, ``.``
(a mistyped path with a space or a backslash is a path, not an id)."""


def _looks_like_hub_id(source: str) -> bool:
    return _HUB_ID.fullmatch(source) is not None and ".." not in source


def resolve_model(source: str, *, download: bool = False) -> ModelInfo:
    """Read a model's config from a local directory or the hub cache.

    ``download=True`` (used by ``load``) fetches ``config.json`` when a hub id is not cached yet;
    planning never downloads (SPEC C4).
    """
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelSourceError(f"{source} is a file; pass the directory that holds config.json")
        return _from_directory(source, path, download)
    if not _looks_like_hub_id(source):
        raise ModelSourceError(
            f"{source}: no such directory, and it is not a hub id of the form 'org/name'. "
            "Check the path (relative paths are taken from the current directory).")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(source, "config.json")
    if isinstance(cached, str):
        return _from_directory(source, Path(cached).parent)
    if not download:
        raise ModelSourceError(
            f"{source}: config.json is not in the local hub cache, and planning downloads nothing "
            f"(SPEC C4). Run `intelrt run {source}` or `hf download {source}` once with network, "
            "or pass a local directory.")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelSourceError(
            f"{source}: not in the local hub cache and HF_HUB_OFFLINE is set; unset it to download, "
            "or pass a local directory.")
    from huggingface_hub import hf_hub_download

    log.info("downloading config.json of %s", source)
    config_path = hf_hub_download(source, "config.json")
    return _from_directory(source, Path(config_path).parent)


def check_safety(info: ModelInfo, *, trust_remote_code: bool, allow_pickle: bool) -> list[str]:
    """Refuse remote code and pickle weights unless opted in (SPEC C5); return notes."""
    notes: list[str] = []
    if info.base is not None:  # an adapter: its base model must pass the same checks
        notes.extend(check_safety(info.base, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle))
        notes.append(f"PEFT adapter of {info.base.source}: transformers loads the base model, then the adapter")
    if info.config.get("auto_map") and not trust_remote_code:
        raise UnsafeModelError(
            f"{info.source} asks to run its own Python code (config.json has 'auto_map'). "
            "intelrt does not run remote code by default (SPEC C5); read that code, then pass "
            "trust_remote_code=True (CLI: --trust-remote-code) if you trust it.")
    if info.weights_format == "pickle":
        if not allow_pickle:
            raise UnsafeModelError(
                f"{info.source} has only pickle weights ({', '.join(info.weight_files)}); loading "
                "pickle can run arbitrary code, so intelrt loads safetensors only (SPEC C5). Convert "
                "the checkpoint to safetensors, or pass allow_pickle=True (CLI: --allow-pickle) if you trust it.")
        notes.append("pickle weights allowed by the caller (allow_pickle=True)")
    return notes


def require_weights(info: ModelInfo) -> None:
    """A local directory with ``config.json`` (or ``adapter_config.json``) but no weight files cannot
    load: a copy or a save that was cut short. Say so before transformers' "no file named" error."""
    if info.weights_format != "none" or not os.path.isdir(os.path.expanduser(info.source)):
        return  # a hub id's cached snapshot may hold only config.json until load() fetches the weights
    expected = "adapter_model.safetensors" if info.base is not None else "model.safetensors (or its shards)"
    raise ModelSourceError(
        f"{info.source} holds {'adapter_config.json' if info.base is not None else 'config.json'} but no weights "
        f"({expected}): a copy or a save that was cut short (disk full?). Save or copy the model again.")
