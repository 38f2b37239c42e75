"""Writing training output so that nothing half-written ever looks complete.

A directory "looks complete" to ``intelrt.load`` when it holds ``config.json`` (a model) or
``adapter_config.json`` (adapters), and a ``checkpoint-N`` directory looks complete to
``Trainer``'s ``get_last_checkpoint`` just by existing. A full disk, a quota or a read-only mount
can stop a write half way — after ``config.json``, before the weights. So:

* the output directory is checked for writing *before* training starts (a run is not lost at
  its last step);
* the final model is saved into a staging directory next to its target (``.intelrt-saving-*``),
  every file fsynced, then swapped in by renames: the previous model's files move into a
  ``.intelrt-previous-*`` directory (markers first, so the output directory stops looking
  complete), then the new ones move in (markers last), then the previous ones go. A journal in
  the previous-files directory, written before the first rename, says what moves where; a run
  killed at any point — SIGKILL included — leaves either the previous model or the new one
  complete, never a mix: :func:`recover_interrupted_save` (run by the next training, and by
  ``intelrt.load``) puts the previous model back unless every new file had landed. A failed save
  removes the staging directory and leaves the output directory as it was. A sharded run saves
  the same way: every rank joins the save into one staging directory, rank 0 writes the gathered
  model there and swaps it in once all are done;
* a ``checkpoint-N`` this run left without ``trainer_state.json`` (``Trainer`` writes it last)
  is removed — also when Ctrl-C stops the save — and ``resume=True`` never picks such a
  checkpoint. A message says what was removed and what could not be (a read-only directory).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from ..errors import SaveError
from ..planning.model_source import INTERRUPTED_SAVE
from ..support.distributed import any_rank
from ..support.redaction import redact, redact_text

log = logging.getLogger(__name__)

#: Files whose presence makes a directory look like a loadable model or adapter.
MARKERS = ("config.json", "adapter_config.json")
#: ``Trainer`` writes it last into a checkpoint: a checkpoint without it is incomplete.
CHECKPOINT_COMPLETE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STAGING_PREFIX = ".intelrt-saving-"
PREVIOUS_PREFIX = INTERRUPTED_SAVE
"""Where a save moves the previous model's files until the new ones are in place."""
JOURNAL = "journal.json"
"""In a ``.intelrt-previous-*`` directory: the staging directory, the previous files, the new ones."""
OWN_PREFIX = ".intelrt-"
"""intelrt's own files in an output directory (lock, staging, journal, probe, demo marker): never moved."""
#: File times come from a coarse kernel clock that can lag ``time.time()`` by a tick.
_CLOCK_SLACK_S = 0.05


def _why(exc: BaseException) -> str:
    return redact_text(f"{type(exc).__name__}: {exc}")


def check_writable(directory: str) -> None:
    """Create ``directory`` if needed and write (then remove) a probe file; :class:`SaveError` if that fails."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".intelrt-probe-"):
            pass
    except OSError as exc:
        raise SaveError(f"output_dir {directory} cannot be written ({_why(exc)}); nothing was trained. Pick a "
                        "directory you can write, or fix its permissions / free space first.") from None


def checkpoints(directory: str) -> dict[str, bool]:
    """``checkpoint-N`` directories in ``directory`` → whether each is complete."""
    if not os.path.isdir(directory):
        return {}
    return {name: os.path.isfile(os.path.join(directory, name, CHECKPOINT_COMPLETE))
            for name in os.listdir(directory)
            if _CHECKPOINT.match(name) and os.path.isdir(os.path.join(directory, name))}


def checkpoint_step(name: str) -> int:
    """N of ``checkpoint-N`` (``-1`` for any other name)."""
    match = _CHECKPOINT.match(name)
    return int(match.group(1)) if match else -1


def last_complete_checkpoint(directory: str, below: int | None = None) -> tuple[str | None, list[str]]:
    """The highest complete ``checkpoint-N`` (with ``N < below`` when given, or ``None``) and the
    incomplete ones above it."""
    found = {name: done for name, done in checkpoints(directory).items() if below is None or checkpoint_step(name) < below}
    skipped: list[str] = []
    for name in sorted(found, key=checkpoint_step, reverse=True):
        if found[name]:
            return os.path.join(directory, name), skipped
        skipped.append(name)
    return None, skipped


def _newest(path: str) -> float:
    """The last change in ``path``: its files, or the directory itself (a save stopped right after
    creating it leaves it empty)."""
    files = (entry.stat().st_mtime for entry in os.scandir(path) if entry.is_file())
    return max(files, default=os.stat(path).st_mtime)


def remove_directories(directory: str, names: list[str]) -> tuple[list[str], list[str]]:
    """Remove each ``directory/name``: the names removed, and ``"name (why)"`` for each that could
    not be (a read-only directory) — so a message never calls removed what is still there."""
    removed, failed = [], []
    for name in names:
        try:
            shutil.rmtree(os.path.join(directory, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append(f"{name} ({_why(exc)})")
            continue
        removed.append(name)
    return removed, failed


def discard_incomplete(directory: str, since: float) -> tuple[list[str], list[str]]:
    """Remove the checkpoints written to since ``since`` (a ``time.time()``) whose save was cut short
    — no ``trainer_state.json`` written since then. Returns the names removed and, for those that
    could not be removed, ``"name (why)"``.

    ``Trainer`` rewrites an existing ``checkpoint-N`` in place when a new run reaches step N, so a
    checkpoint of an earlier run can be cut short too; its old ``trainer_state.json`` then vouches
    for half-rewritten weights, and it is removed as well.
    """
    since -= _CLOCK_SLACK_S
    cut_short = []
    for name in sorted(checkpoints(directory)):
        path = os.path.join(directory, name)
        state = os.path.join(path, CHECKPOINT_COMPLETE)
        touched = _newest(path) >= since
        finished = os.path.isfile(state) and os.path.getmtime(state) >= since
        if touched and not finished:
            cut_short.append(name)
    return remove_directories(directory, cut_short)


def _fsync(path: str) -> None:
    """Flush ``path`` (a file or a directory) to the disk: a rename must not land before the data does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(directory: str) -> list[str]:
    """The regular files of ``directory`` that belong to a model (not intelrt's own), markers last."""
    names = [n for n in os.listdir(directory) if not n.startswith(OWN_PREFIX)
             and os.path.isfile(os.path.join(directory, n)) and not os.path.islink(os.path.join(directory, n))]
    return sorted(names, key=lambda n: (n in MARKERS, n))


def _swap_into_place(staging: str, directory: str) -> None:
    """Replace the model files of ``directory`` with those of ``staging`` so that a kill at any
    moment leaves one complete model (see the module's docstring)."""
    new = _files(staging)
    if not new:
        return
    for name in new:
        _fsync(os.path.join(staging, name))
    _fsync(staging)
    old = list(reversed(_files(directory)))  # markers first: the directory stops looking complete
    previous = tempfile.mkdtemp(prefix=PREVIOUS_PREFIX, dir=directory)
    journal = os.path.join(previous, JOURNAL)
    with open(journal, "w", encoding="utf-8") as fh:
        json.dump({"staging": os.path.basename(staging), "old": old, "new": new}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync(directory)
    for name in old:
        os.replace(os.path.join(directory, name), os.path.join(previous, name))
    for name in new:  # markers last
        os.replace(os.path.join(staging, name), os.path.join(directory, name))
    _fsync(directory)
    shutil.rmtree(previous)


def recover_interrupted_save(directory: str, *, locked: bool = False) -> list[str]:
    """Finish what a save killed while swapping files left in ``directory``: the previous model
    back in place (its files from the ``.intelrt-previous-*`` directory), unless every new file had
    landed (then the leftovers go). Nothing is touched while another training holds the directory
    (``locked``: this process holds it). Returns what was done, one line each (also logged)."""
    if not os.path.isdir(directory):
        return []
    pending = sorted(n for n in os.listdir(directory) if n.startswith(PREVIOUS_PREFIX)
                     and os.path.isdir(os.path.join(directory, n)))
    if not pending:
        return []
    from .locking import held_by_another

    if not locked and held_by_another(directory):
        return []
    done: list[str] = []
    for name in pending:
        previous = os.path.join(directory, name)
        try:
            with open(os.path.join(previous, JOURNAL), encoding="utf-8") as fh:
                journal = json.load(fh)
            staging = os.path.join(directory, str(journal["staging"]))
            old, new = [str(n) for n in journal["old"]], [str(n) for n in journal["new"]]
        except (OSError, ValueError, KeyError, TypeError):  # killed before the journal was written: nothing moved
            shutil.rmtree(previous, ignore_errors=True)
            continue
        landed = [n for n in new if not os.path.lexists(os.path.join(staging, n))]
        if len(landed) == len(new) and all(os.path.isfile(os.path.join(directory, n)) for n in new):
            done.append(f"{directory}: a save killed after its new model was in place finished (removed {name})")
        else:
            for n in landed:  # the new files that moved in: out, before the previous ones come back
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, n))
            back = sorted((n for n in old if os.path.lexists(os.path.join(previous, n))), key=lambda n: (n in MARKERS, n))
            for n in back:
                os.replace(os.path.join(previous, n), os.path.join(directory, n))
            _fsync(directory)
            done.append(f"{directory}: a save was killed while it replaced the model; the previous model is back in "
                        f"place ({len(back)} files) and the unfinished new one removed")
        shutil.rmtree(previous, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    for line in done:
        log.warning("%s", line)
    return done


def _staging(trainer: Any, directory: str, ranks: int) -> str:
    """A new staging directory next to ``directory``, made by rank 0; every rank gets its name
    (the ranks of a sharded model save together, into one place)."""
    made = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory) if trainer.is_world_process_zero() else None
    if ranks == 1:
        assert made is not None
        return made
    from accelerate.utils import broadcast_object_list

    names = broadcast_object_list([made], from_process=0)
    return str(names[0])


def save_model_atomically(trainer: Any, directory: str) -> None:
    """``trainer.save_model(directory)`` through a staging directory: all of it lands, or none of it.

    In a launched job every rank calls ``save_model`` on the same staging path (sharded states are
    gathered there, and rank 0 writes them); rank 0 moves the files into place once every rank is
    done. The ranks agree whether the save worked (:func:`any_rank`), so none reports a model
    another failed to write, and none waits forever for a rank that raised.
    """
    ranks = int(getattr(trainer.args, "world_size", 1) or 1)
    staging = _staging(trainer, directory, ranks)
    saved: BaseException | None = None
    moved: OSError | None = None
    try:
        try:
            trainer.save_model(staging)
        except Exception as exc:  # noqa: BLE001 - safetensors and torch report a full disk as their own errors
            saved = exc
        save_failed = any_rank(saved is not None)  # also waits: every shard written before rank 0 moves
        if not save_failed and trainer.is_world_process_zero():
            try:
                _swap_into_place(staging, directory)
            except OSError as exc:
                moved = exc
                recover_interrupted_save(directory, locked=True)  # the previous model back, as after a kill
        move_failed = any_rank(moved is not None)  # also waits: moved before any rank removes the staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if save_failed:
        where = "" if saved is not None else " on another rank"
        raise SaveError(
            f"saving the trained model to {directory} failed{where} ({_why(saved) if saved else 'see its log'}): disk "
            f"full, quota or read-only? Nothing in {directory} was replaced and the partial files were removed; free "
            "space and train again (with save_steps=N checkpoints, resume=True continues from the last complete "
            "one).") from saved
    if move_failed:
        raise SaveError(f"moving the saved model into {directory} failed ({_why(moved) if moved else 'on rank 0'}); "
                        "the previous model there was put back and the new one removed: free space or fix the "
                        "permissions, then train again (resume=True continues from the last checkpoint)") from moved


def write_atomically(directory: str | os.PathLike[str], write: Callable[[str], object], what: str) -> None:
    """``write(staging)`` into a staging directory inside ``directory``, then swapped in as the
    final training save is (:func:`_swap_into_place`): all of it lands, or none of it. ``what`` names
    the result in the error (``the quantized model``). A failed write leaves ``directory`` as it was;
    an error of intelrt's own (the model cannot be saved so) passes unchanged."""
    from ..errors import IntelrtError

    directory = os.fspath(directory)
    try:
        os.makedirs(directory, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory)
    except OSError as exc:
        raise SaveError(f"{directory} cannot be written ({_why(exc)}); nothing was saved. Pick a directory you can "
                        "write, or fix its permissions / free space first.") from None
    try:
        try:
            write(staging)
        except IntelrtError:
            raise
        except Exception as exc:  # noqa: BLE001 - safetensors and torch report a full disk as their own errors
            raise SaveError(f"writing {what} to {directory} failed ({_why(exc)}): disk full, quota or read-only? "
                            f"Nothing in {directory} was replaced and the partial files were removed.") from exc
        try:
            _swap_into_place(staging, directory)
        except OSError as exc:
            recover_interrupted_save(directory, locked=True)  # the previous files back, as after a kill
            raise SaveError(f"moving {what} into {directory} failed ({_why(exc)}); what was there before was put "
                            "back and the new files removed: free space or fix the permissions, then save "
                            "again") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_json_atomically(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file in the same directory, secrets
    masked (:mod:`intelrt.support.redaction`)."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".intelrt-", suffix=".json", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            json.dump(redact(data), fh, indent=2)
        os.replace(temporary, path)
    except OSError as exc:
        raise SaveError(f"writing {path} failed ({_why(exc)})") from None
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
