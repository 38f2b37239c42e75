"""Writing a quantized model where it can lose nothing (``Loaded.save_quantized``,
``intelrt.quantize``): never into the directory the model was read from, never over files unless
told to, and through a staging directory swapped in at the end — the final training save's
machinery (:func:`intelrt.training.saving.write_atomically`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, PlanError
from ..hooks.model import ModelInfo
from ..training.output_dir import model_dirs
from ..training.saving import OWN_PREFIX, write_atomically


def output_directory(output: str | os.PathLike[str]) -> Path:
    """``output`` as a directory path (a file, an empty string or another type refused)."""
    if not isinstance(output, (str, os.PathLike)) or not os.fspath(output):
        raise ConfigurationError(f"output must be a directory path, got {output!r}")
    target = Path(output)
    if target.exists() and not target.is_dir():
        raise ConfigurationError(f"output={os.fspath(output)!r} is a file; pass a new or empty directory")
    return target


def refuse_content(target: Path, overwrite: bool) -> None:
    """A directory holding files (not intelrt's own) is written over only with ``overwrite``."""
    if target.is_dir() and any(not p.name.startswith(OWN_PREFIX) for p in target.iterdir()) and not overwrite:
        raise ConfigurationError(f"output={os.fspath(target)!r} is not empty; pass a new or empty directory (or "
                                 "overwrite=True / --overwrite to write over what it holds)")


def refuse_the_source(target: Path, model: ModelInfo) -> None:
    """The directory the model was read from (or a base it stands on) is its only copy on disk: the
    quantized checkpoint saved there would replace the float weights — ``overwrite=True`` included."""
    if os.path.realpath(target) in {found for found, _ in model_dirs(model)}:
        raise ConfigurationError(
            f"output={os.fspath(target)!r} is the directory {model.source} was loaded from: the quantized "
            "checkpoint would replace its weights there, the only copy. Pass a new directory (e.g. "
            f"{os.fspath(target).rstrip('/')}-quantized); overwrite=True does not change this")


def save_quantized_model(loaded: Any, directory: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """``Loaded.save_quantized``: refuse the model's own directory and one holding files (unless
    ``overwrite``), then write through a staging directory swapped in at the end
    (:func:`intelrt.training.saving.write_atomically`): a failed save leaves the directory as it was."""
    from ..quantization.saving import save_quantized

    choice = loaded.plan.decided.quantization
    if choice is None:
        raise PlanError("the model was loaded without quantization: load it with quantization= (e.g. 'int8'), or "
                        "run intelrt quantize MODEL --method METHOD --output DIR")
    target = output_directory(directory)
    refuse_the_source(target, loaded.plan.model)
    refuse_content(target, overwrite)
    if choice.method == "inc":
        from ..quantization.inc import save_measurement

        written: list[Path] = []
        write_atomically(target, lambda staging: written.append(save_measurement(loaded.model, choice.details,
                                                                                 staging)), "INC's configuration")
        return target / written[0].name
    write_atomically(target, lambda staging: save_quantized(loaded.model, choice, staging, tokenizer=loaded.tokenizer),
                     "the quantized model")
    return target
