"""Find a model's files without downloading and read what planning needs from its config; check
that its weight files are what they claim to be before anything loads them."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelSourceError, UnsafeModelError
from ..hooks.model import PICKLE_WEIGHTS, SAFE_WEIGHTS, ModelInfo

log = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt", "vocab.json",
                    "spiece.model", "sentencepiece.bpe.model")
TOKENIZER_TEXT_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "added_tokens.json",
                        "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja", "chat_template.json")
"""The tokenizer's files that are text (what ``AutoTokenizer.from_pretrained`` reads as JSON or UTF-8)."""
#: What transformers' processors are saved as (``processing_utils``, ``image_processing_base``,
#: ``feature_extraction_utils``, ``video_processing_utils``: ``PROCESSOR_NAME`` …, ``CHAT_TEMPLATE_FILE``).
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
                   "chat_template.jinja", "chat_template.json")
INTERRUPTED_SAVE = ".intelrt-previous-"
"""The directory a training's final save keeps the previous model's files in while it swaps the new
ones in (``intelrt.training.saving``); one left behind means that save was killed mid-way."""
#: safetensors' own limit on the JSON header (the Rust loader refuses anything larger).
SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024
#: Bytes per element of the safetensors dtypes (a dtype not listed is checked by its offsets only).
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1,
                "F8_E5M2FNUZ": 1, "F8_E8M0": 1}
#: How pickle checkpoints begin: a zip archive (``torch.save`` since torch 1.6) or a pickle PROTO opcode.
_PICKLE_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def _weights_in(directory: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in directory.iterdir()
                        if p.is_file() and p.name.endswith(SAFE_WEIGHTS + PICKLE_WEIGHTS)
                        and not p.name.startswith(("optimizer", "scheduler", "rng_state", "training_args"))))


def _has_tokenizer(directory: Path) -> bool:
    return any((directory / name).is_file() for name in _TOKENIZER_FILES)


def _processor_files(directory: Path) -> tuple[str, ...]:
    return tuple(name for name in PROCESSOR_FILES if (directory / name).is_file())


class AdapterChainError(ModelSourceError):
    """A :class:`ModelSourceError`: adapters that name each other (or themselves) as their base, or an
    adapter of an adapter. Passed up the chain unchanged."""


Fetch = Callable[[str], Path]
"""``fetch(hub_id)``: the local directory holding the hub model's ``config.json``, downloaded."""


def _adapter_directory(source: str, directory: Path, fetch: Fetch | None, chain: tuple[tuple[str, str], ...]
                       ) -> ModelInfo:
    """A PEFT adapter saved by ``Loaded.train(lora=...)`` or ``PeftModel.save_pretrained``.

    ``base_model_name_or_path`` is followed; ``chain`` holds the adapters met on the way
    (directory, as named), so an adapter naming itself, or two naming each other, is an error
    instead of endless recursion."""
    adapter_file = directory / "adapter_config.json"
    try:
        base_name = json.loads(adapter_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelSourceError(f"{adapter_file}: cannot read it as a JSON object ({exc})") from None
    if not isinstance(base_name, str) or not base_name:
        raise ModelSourceError(f"{adapter_file} names no base_model_name_or_path, so the base model is unknown; "
                               "set it to the base model's directory or hub id")
    chain = (*chain, (os.path.realpath(directory), source))
    try:
        base = resolve_model(base_name, fetch=fetch, _chain=chain)
    except AdapterChainError:
        raise
    except ModelSourceError as exc:
        raise ModelSourceError(f"{source} is an adapter of {base_name}, which cannot be found: {exc}") from None
    if base.base is not None:
        raise AdapterChainError(
            f"{source} is an adapter of {base_name}, which is itself an adapter (of {base.base.source}); "
            f"transformers puts one adapter on a full model. Merge {base_name} into its base (peft's "
            "merge_and_unload(), then save_pretrained) and set base_model_name_or_path in "
            f"{adapter_file} to the merged model.")
    return ModelInfo(source=source, local_dir=str(directory), config=base.config,
                     weight_files=_weights_in(directory), has_tokenizer=_has_tokenizer(directory),
                     base=base, processor_files=_processor_files(directory))


def _refuse_a_loop(directory: Path, chain: tuple[tuple[str, str], ...]) -> None:
    real = os.path.realpath(directory)
    met = [real_dir for real_dir, _ in chain]
    if real not in met:
        return
    loop = [name for _, name in chain[met.index(real):]]
    if len(loop) == 1:
        raise AdapterChainError(
            f"{loop[0]} is an adapter whose adapter_config.json names its own directory as its base model "
            "(base_model_name_or_path): it has no base to load (an adapter trained into its base model's "
            "directory?). Set base_model_name_or_path to the base model's directory or hub id.")
    raise AdapterChainError(
        f"adapters name each other as their base model: {' -> '.join([*loop, loop[0]])}; none of them leads to "
        "a full model. Set base_model_name_or_path in their adapter_config.json to the base model's directory "
        "or hub id.")


def _from_directory(source: str, directory: Path, fetch: Fetch | None = None,
                    chain: tuple[tuple[str, str], ...] = ()) -> ModelInfo:
    _refuse_a_loop(directory, chain)
    config_file = directory / "config.json"
    if not config_file.is_file() and (directory / "adapter_config.json").is_file():
        return _adapter_directory(source, directory, fetch, chain)
    if not config_file.is_file():
        kept = sorted(p.name for p in directory.glob(f"{INTERRUPTED_SAVE}*") if p.is_dir())
        if kept:
            raise ModelSourceError(
                f"{source}: a save into {directory} was killed while it replaced the model, so it holds no config.json "
                f"now; the previous model is kept in {kept[0]}. intelrt.load({source!r}) (or `intelrt run`, or the "
                "next `intelrt train` into it) puts it back.")
        raise ModelSourceError(
            f"{source}: no config.json in {directory}. Point intelrt at a directory saved with "
            "save_pretrained() (it holds config.json and the weights).")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{config_file}: cannot read it as JSON ({exc}); re-save the model") from None
    if not isinstance(config, dict):
        raise ModelSourceError(f"{config_file}: expected a JSON object, got {type(config).__name__}")
    _check_identity(config_file, config)
    _check_generation_config(directory)
    return ModelInfo(source=source, local_dir=str(directory), config=config, weight_files=_weights_in(directory),
                     has_tokenizer=_has_tokenizer(directory), processor_files=_processor_files(directory))


def _check_generation_config(directory: Path) -> None:
    """A ``generation_config.json`` that cannot be read is dropped by transformers without a word
    (``from_pretrained`` falls back to defaults made from config.json): the model's own sampling
    settings would be lost silently."""
    path = directory / "generation_config.json"
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelSourceError(f"{path}: cannot read it as JSON ({exc}); transformers would drop the model's generation "
                               "settings without a word. Save it again (generation_config.save_pretrained), or remove "
                               "it to use the defaults") from None
    if not isinstance(data, dict):
        raise ModelSourceError(f"{path}: expected a JSON object, got {type(data).__name__}")


def damaged_text_file(directory: str | os.PathLike[str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` in ``directory`` that is not UTF-8 text (or, for ``.json``, not JSON),
    with why; ``None`` when all that exist read well."""
    for name in names:
        path = Path(directory) / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            if name.endswith(".json"):
                json.loads(text)
        except UnicodeDecodeError as exc:
            return f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        except ValueError as exc:
            return f"{name} is not valid JSON ({exc})"
        except OSError as exc:
            return f"{name} cannot be read ({exc.strerror or exc})"
    return None


def _check_identity(config_file: Path, config: dict[str, object]) -> None:
    """``architectures`` and ``model_type`` say which class loads the model: a string where the list
    belongs was read letter by letter (a bare base model, loaded silently for the wrong task)."""
    names = config.get("architectures")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) and n for n in names)):
        raise ModelSourceError(f"{config_file}: architectures must be a list of class names, e.g. "
                               f"[\"Qwen3ForCausalLM\"], got {names!r:.80}; correct it (or save the model again)")
    kind = config.get("model_type")
    if kind is not None and not (isinstance(kind, str) and kind):
        raise ModelSourceError(f"{config_file}: model_type must be a name such as \"qwen3\", got {kind!r:.80}; "
                               "correct it (or save the model again)")


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
"""What the hub accepts as a model id: ``name`` or ``org/name`` of letters, digits, ``-``, ``_``, ``.``
(a mistyped path with a space or a backslash is a path, not an id)."""


def _looks_like_hub_id(source: str) -> bool:
    return _HUB_ID.fullmatch(source) is not None and ".." not in source


SHOWN_PATH = 120
"""Characters of a path an error quotes (a 5,000-character path is named by its start and length)."""


def shown(path: str) -> str:
    return path if len(path) <= SHOWN_PATH else f"{path[:SHOWN_PATH]}… ({len(path):,} characters)"


def path_problem(source: str) -> str | None:
    """Why ``source`` cannot even be looked up as a path (``os.stat`` would raise), or ``None``."""
    if "\x00" in source:
        return "a path cannot hold a NUL character; pass the model's directory or a hub id (org/name)"
    try:
        os.stat(os.path.expanduser(source))
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return (f"the path is too long for this system ({exc.strerror}: at most {os.pathconf('/', 'PC_NAME_MAX')} "
                    "bytes per name); pass the model's directory or a hub id (org/name)")
    return None


def resolve_model(source: str, *, fetch: Fetch | None = None, _chain: tuple[tuple[str, str], ...] = ()) -> ModelInfo:
    """Read a model's config from a local directory or the hub cache.

    ``fetch`` (passed by ``load``) gets ``config.json`` of a hub id that is not cached yet; without
    it a hub id must be in the cache: planning never downloads (SPEC C4).
    """
    path = Path(source).expanduser()
    if path_problem(source) is not None:
        raise ModelSourceError(f"{shown(source)}: {path_problem(source)}")
    if path.exists():
        if not path.is_dir():
            raise ModelSourceError(f"{source} is a file; pass the directory that holds config.json")
        return _from_directory(source, path, fetch, _chain)
    if not _looks_like_hub_id(source):
        raise ModelSourceError(
            f"{source}: no such directory, and it is not a hub id of the form 'org/name'. "
            "Check the path (relative paths are taken from the current directory).")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(source, "config.json")
    if isinstance(cached, str):
        return _from_directory(source, Path(cached).parent, chain=_chain)
    if fetch is None:
        raise ModelSourceError(
            f"{source}: config.json is not in the local hub cache, and planning downloads nothing "
            f"(SPEC C4). Run `intelrt run {source}` or `hf download {source}` once with network, "
            "or pass a local directory.")
    return _from_directory(source, fetch(source), chain=_chain)


def check_safetensors(path: str | os.PathLike[str]) -> None:
    """Read the safetensors header of ``path`` — 8 bytes of little-endian header length, then a JSON
    object whose tensors' byte ranges must tile the rest of the file — without loading a tensor.

    A pickle renamed ``.safetensors`` → :class:`UnsafeModelError`; an empty, truncated or garbled
    file → :class:`ModelSourceError`; each names the file.
    """
    name = os.fspath(path)
    again = "copy or download it again (a copy or a download that was cut short?)"
    try:
        size = os.path.getsize(name)
        with open(name, "rb") as fh:
            start = fh.read(8)
            length = int.from_bytes(start, "little") if len(start) == 8 else 0
            raw = fh.read(length) if length <= min(size - 8, SAFETENSORS_HEADER_LIMIT) else b""
    except OSError as exc:
        raise ModelSourceError(f"{name} cannot be read ({type(exc).__name__}: {exc})") from None
    if start.startswith(_PICKLE_MAGIC):
        raise UnsafeModelError(
            f"{name} is not a safetensors file: it is a pickle checkpoint (torch.save) under a .safetensors "
            "name, and loading pickle can run arbitrary code (SPEC C5). intelrt refuses it; convert the "
            "original checkpoint with safetensors, or remove the file.")
    if size == 0:
        raise ModelSourceError(f"{name} is empty (0 bytes); {again}")
    if len(start) < 8:
        raise ModelSourceError(f"{name} is truncated: {size} bytes, less than a safetensors header; {again}")
    if length > min(size - 8, SAFETENSORS_HEADER_LIMIT):
        raise ModelSourceError(f"{name} is truncated or not a safetensors file: its header claims {length:,} bytes "
                               f"and the file holds {size:,}; {again}")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelSourceError(f"{name} is not a safetensors file: its header is not JSON ({exc}); {again}") from None
    if not isinstance(header, dict):
        raise ModelSourceError(f"{name} is not a safetensors file: its header is a JSON {type(header).__name__}")
    data = size - 8 - length
    end = 0
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise ModelSourceError(f"{name} is not a safetensors file: tensor {tensor!r} has no valid data_offsets")
        if offsets[1] > data:
            raise ModelSourceError(
                f"{name} is truncated: tensor {tensor!r} ends at byte {offsets[1]:,} of the data, and the file holds "
                f"{data:,} bytes of data; {again}")
        dtype, shape = entry.get("dtype"), entry.get("shape")
        width = _DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        sized = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
        if width and sized and math.prod(shape) * width != offsets[1] - offsets[0]:
            raise ModelSourceError(f"{name} is not a valid safetensors file: tensor {tensor!r} ({entry.get('dtype')} "
                                   f"{shape}) does not fit its {offsets[1] - offsets[0]:,} bytes; {again}")
        end = max(end, offsets[1])
    if end != data:
        raise ModelSourceError(f"{name} is not a valid safetensors file: its tensors cover {end:,} bytes of "
                               f"{data:,}; {again}")


def check_weight_files(info: ModelInfo) -> None:
    """:func:`check_safetensors` on every ``.safetensors`` weight file the model has on disk."""
    if info.local_dir is None:
        return
    for name in info.weight_files:
        if name.endswith(SAFE_WEIGHTS):
            check_safetensors(os.path.join(info.local_dir, name))


def check_safety(info: ModelInfo, *, trust_remote_code: bool, allow_pickle: bool) -> list[str]:
    """Refuse remote code and pickle weights unless opted in (SPEC C5), and weight files that are not
    what their name says; return notes."""
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
    check_weight_files(info)
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
