"""May this run write into its output directory? Training refuses a directory that holds what
another run (or the user) put there — above all the directory of the model being trained —
unless told ``overwrite=True`` or ``resume=True``; and it cleans what a killed run left behind.

What a directory holds, as this module sees it:

* intelrt's own hidden files (``.intelrt-*``: the lock, a staging directory, the demo marker) and
  empty ``checkpoint-N`` directories are not content: a run cut short leaves them, and the next
  run removes the debris (naming it);
* everything else — a model, an adapter, checkpoints, any other file — is content a new run must
  not overwrite or mix with.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..errors import ConfigurationError, SaveError
from ..hooks.model import ModelInfo
from .saving import (
    MARKERS,
    OWN_PREFIX,
    STAGING_PREFIX,
    checkpoints,
    recover_interrupted_save,
    remove_directories,
)

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Contents:
    """What an output directory holds besides intelrt's own files and empty checkpoints."""

    models: tuple[str, ...]
    checkpoints: tuple[str, ...]
    other: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.models or self.checkpoints or self.other)

    def describe(self) -> str:
        parts = []
        if self.models:
            more = f" and {len(self.other)} more files" if self.other else ""
            parts.append(f"a saved model ({', '.join(self.models)}{more})")
        if self.checkpoints:
            parts.append(f"checkpoints of an earlier run ({', '.join(self.checkpoints)})")
        if self.other and not self.models:
            shown = ", ".join(self.other[:5]) + (f" and {len(self.other) - 5} more" if len(self.other) > 5 else "")
            parts.append(f"other files ({shown})")
        return " and ".join(parts)


def _is_empty_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.listdir(path)


def contents(directory: str) -> Contents:
    if not os.path.isdir(directory):
        return Contents((), (), ())
    names = sorted(n for n in os.listdir(directory) if not n.startswith(OWN_PREFIX))
    found = checkpoints(directory)
    kept = [n for n in names if n not in found or not _is_empty_dir(os.path.join(directory, n))]
    return Contents(tuple(n for n in kept if n in MARKERS), tuple(n for n in kept if n in found),
                    tuple(n for n in kept if n not in MARKERS and n not in found))


def model_dirs(model: ModelInfo) -> list[tuple[str, ModelInfo]]:
    """(real directory, model) of the model being trained and of every base it stands on."""
    found = []
    info: ModelInfo | None = model
    while info is not None:
        if info.local_dir:
            found.append((os.path.realpath(info.local_dir), info))
        info = info.base
    return found


def refuse_the_models_own_directory(directory: str, model: ModelInfo, *, adapter: bool, overwrite: bool) -> None:
    """The directory the trained model was loaded from (or a base it stands on) is its only copy on
    disk: an adapter saved there would replace its ``config.json`` and name itself as its base."""
    real = os.path.realpath(directory)
    for found, info in model_dirs(model):
        if found != real:
            continue
        if info is not model or (adapter and model.base is None):
            raise ConfigurationError(
                f"output_dir {directory} holds the model the adapters are trained on ({info.source}): saved there, "
                "the adapters would replace its config.json and name their own directory as their base model, "
                f"leaving neither loadable. Pick a new directory (e.g. {directory.rstrip('/')}-lora); overwrite=True "
                "(--overwrite) does not change this.")
        if not overwrite:
            raise ConfigurationError(
                f"output_dir {directory} is where the model being trained was loaded from ({model.source}): "
                "training there replaces that model with the fine-tuned one. Pick a new directory, or pass "
                "overwrite=True (CLI: --overwrite) to replace it.")


def refuse_content(directory: str, *, resume: object, overwrite: bool) -> None:
    """Refuse a directory holding content this run did not write, unless resuming or overwriting."""
    if overwrite or resume not in (False, None):
        return
    found = contents(directory)
    if found:
        raise ConfigurationError(
            f"output_dir {directory} already holds {found.describe()}, which this run did not write: training there "
            "would overwrite it or mix its checkpoints with this run's. Pick a new directory, pass resume=True "
            "(CLI: --resume) to continue the training whose checkpoints it holds, or overwrite=True "
            "(CLI: --overwrite) to replace what it holds.")


def clean_debris(directory: str, *, resuming: bool) -> None:
    """Remove what a run cut short left (called while this run holds the directory's lock): staging
    directories of a final save and empty ``checkpoint-N`` directories; when resuming, also the
    ``checkpoint-N`` without ``trainer_state.json`` — a save cut short, which ``Trainer`` would
    write into when it reaches step N. One of those that cannot be removed is refused."""
    recover_interrupted_save(directory, locked=True)  # a final save killed mid-swap: the previous model back first
    found = checkpoints(directory)
    debris = sorted(n for n in os.listdir(directory) if n.startswith(STAGING_PREFIX)
                    or (n in found and (_is_empty_dir(os.path.join(directory, n)) or (resuming and not found[n]))))
    removed, failed = remove_directories(directory, debris)
    if removed:
        log.warning("%s: removed %s, left by a run that was cut short (a save interrupted by a kill or Ctrl-C)",
                    directory, ", ".join(removed))
    stuck = [f for f in failed if f.startswith("checkpoint-")]
    if stuck:
        raise SaveError(f"{directory} holds {'; '.join(stuck)}: a checkpoint cut short that cannot be removed, and this "
                        "run would write its checkpoint of that step into it; nothing was trained. Delete it by hand "
                        "(or make it writable), then train again.")
    if failed:
        log.warning("%s: could not remove %s, left by a run that was cut short; delete it by hand", directory,
                    "; ".join(failed))


def remove_earlier_checkpoints(directory: str) -> None:
    """``overwrite=True``: an earlier run's ``checkpoint-N`` would mix with this run's (and a later
    ``resume=True`` would pick the highest, whichever run wrote it), so it goes first."""
    earlier = sorted(checkpoints(directory))
    removed, failed = remove_directories(directory, earlier)
    if removed:
        log.warning("%s: overwrite=True: removed the earlier run's %s", directory, ", ".join(removed))
    if failed:
        done = f" (removed {', '.join(removed)})" if removed else ""
        raise SaveError(f"overwrite=True, but the earlier run's checkpoints in {directory} cannot all be removed: "
                        f"{'; '.join(failed)}{done}; nothing was trained. Remove them by hand, or pick another "
                        "directory.")

