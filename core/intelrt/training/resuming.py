"""Which checkpoint a run resumes from, and whether its files can be read.

``Trainer`` reads a checkpoint's files one by one as it resumes; a garbled ``trainer_state.json``,
a truncated ``optimizer.pt`` or truncated weights end in a ``JSONDecodeError``, a zip error or a
safetensors error from deep inside it. Each file is checked here first — JSON parsed, zip
archives (``torch.save``) opened, safetensors headers read — and a bad one is named with the way
out: resume from an earlier checkpoint, or start over.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from pathlib import Path

from ..errors import ConfigurationError, IntelrtError, ModelSourceError
from ..hooks.model import SAFE_WEIGHTS
from ..planning.model_source import check_safetensors
from .saving import CHECKPOINT_COMPLETE, checkpoint_step, last_complete_checkpoint

log = logging.getLogger(__name__)

#: Files ``torch.save`` writes into a checkpoint (zip archives since torch 1.6).
TORCH_FILES = (".pt", ".pth", ".bin")


def resume_checkpoint(resume: object, output_dir: str, *, adapter: bool | None = None) -> str | None:
    """The checkpoint ``resume`` asks for (``True``: the last complete one in ``output_dir``; a
    path: that one), checked — its files readable and, when ``adapter`` says what this run trains
    (LoRA adapters or the whole model), holding the weights of that; ``None`` to start from the beginning."""
    if resume is False or resume is None:
        return None
    if resume is True:
        last, skipped = last_complete_checkpoint(output_dir)
        if skipped:
            log.warning("%s: skipping incomplete %s (no %s: its save was cut short); resuming from %s", output_dir,
                        ", ".join(skipped), CHECKPOINT_COMPLETE, os.path.basename(last) if last else "the start")
        if last is None:
            found = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
            raise ConfigurationError(f"resume=True, but {output_dir} holds no checkpoint-N directory with "
                                     f"{CHECKPOINT_COMPLETE} (it has: {', '.join(found) or 'nothing'}); save checkpoints "
                                     "with save_steps=N, or leave resume unset to start over")
        check_checkpoint(last, adapter=adapter)
        return str(last)
    if isinstance(resume, (str, os.PathLike)):
        path = Path(resume)
        if not (path / CHECKPOINT_COMPLETE).is_file():
            raise ConfigurationError(f"resume={os.fspath(resume)!r} is not a Trainer checkpoint (no {CHECKPOINT_COMPLETE})")
        check_checkpoint(str(path), adapter=adapter)
        return str(path)
    raise ConfigurationError(f"resume= takes True, False or a checkpoint directory, not {resume!r}")


def _problem(path: Path) -> str | None:
    """What is wrong with one file of a checkpoint, or ``None``."""
    if path.name == CHECKPOINT_COMPLETE:
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"is not readable JSON ({exc})"
        if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
            return "is not a Trainer state (no global_step)"
        return None
    if path.name.endswith(SAFE_WEIGHTS):
        try:
            check_safetensors(path)
        except IntelrtError as exc:
            return str(exc).removeprefix(str(path)).lstrip(" :")
        return None
    if path.suffix == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"is not readable JSON ({exc})"
        return None
    if path.name.endswith(TORCH_FILES):
        try:
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
        except (OSError, zipfile.BadZipFile) as exc:
            return f"is truncated or damaged (not a complete torch.save archive: {exc})"
    return None


ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
"""What ``Trainer._load_from_checkpoint`` loads a checkpoint's weights from (transformers' trainer.py):
the whole model's files first — into a PEFT model too, with ``strict=False``, so that an adapter
next to them is never restored."""


SHARDED_STATES = ("pytorch_model_fsdp", "global_step", "latest")
"""Names in a checkpoint of a sharded run (accelerate's FSDP ``FSDP_MODEL_NAME``, DeepSpeed's tag dirs)."""


def _earlier(checkpoint: str) -> str:
    directory = os.path.dirname(os.path.abspath(checkpoint))
    last, _ = last_complete_checkpoint(directory, below=checkpoint_step(os.path.basename(checkpoint)))
    return (f"resume from the checkpoint before it (resume={last!r}; CLI: --resume {last})" if last
            else "no earlier checkpoint is left")


def _weights_problem(checkpoint: str, adapter: bool) -> str | None:
    """Why ``Trainer`` would not restore this run's weights from ``checkpoint`` (and the way out), or ``None``."""
    names = set(os.listdir(checkpoint))
    if any(n.startswith(SHARDED_STATES) for n in names):
        return None  # FSDP / DeepSpeed write each rank's shard, and restore through their own loaders
    whole, lora = sorted(names & set(MODEL_WEIGHTS)), sorted(names & set(ADAPTER_WEIGHTS))
    if adapter and whole and lora:
        return (f"it holds a whole model ({', '.join(whole)}) next to the LoRA adapter ({', '.join(lora)}); Trainer "
                "would restore the whole model's weights (none fit the LoRA model) and never the adapter, so the run "
                f"would go on from fresh adapters while reporting a resume. Remove {', '.join(whole)} from it (a LoRA "
                f"run writes none), or {_earlier(checkpoint)}")
    if adapter and whole:
        return ("it holds a whole model's weights and no adapter: a run that trained the whole model wrote it. Resume "
                "it without lora= (CLI: without --lora), or start over (overwrite=True; CLI: --overwrite)")
    if adapter and not lora:
        return "it holds no adapter (adapter_model.safetensors) for this LoRA run to resume; " + _earlier(checkpoint)
    if not adapter and not whole:
        return ((f"it holds only LoRA adapters ({', '.join(lora)}): a LoRA run wrote it. Resume it with lora=True "
                 "(CLI: --lora), or start over (overwrite=True; CLI: --overwrite)") if lora else
                f"it holds no model weights (model.safetensors); {_earlier(checkpoint)}")
    return None


def check_checkpoint(checkpoint: str, *, adapter: bool | None = None) -> None:
    """:class:`ModelSourceError` naming the first unreadable file of ``checkpoint`` and the way out;
    :class:`ConfigurationError` when it does not hold the weights of what this run trains."""
    for path in sorted(Path(checkpoint).iterdir()):
        problem = _problem(path) if path.is_file() else None
        if problem is None:
            continue
        raise ModelSourceError(
            f"cannot resume from {checkpoint}: {path.name} {problem}. Its save was damaged (disk full, a copy cut "
            f"short?). Ways out: {_earlier(checkpoint)}, or start over (overwrite=True; CLI: --overwrite).")
    problem = _weights_problem(checkpoint, adapter) if adapter is not None else None
    if problem is not None:
        raise ConfigurationError(f"cannot resume from {checkpoint}: {problem}.")
