"""Compiled decode steps kept across processes, in intelrt's cache directory.

A compiled step costs a minute or more the first time (inductor's code generation, kernel
compilation and coordinate-descent tuning); torch keeps what it produced in caches of its own
(the FX graph cache and the autotuning cache under ``TORCHINDUCTOR_CACHE_DIR``, usually in
``/tmp``). After a graph's first compile — in the decoding process, or in a compile worker
(``compile_worker.py``), which writes into the decoding process's entry directory —
``torch.compiler.save_cache_artifacts()`` serialises them and they are written here; the next
process that decodes the same model hot-loads them (``torch.compiler.load_cache_artifacts``)
before it compiles, so inductor finds every graph and tuned kernel it would otherwise build, even
on a machine whose ``/tmp`` is empty. Both calls exist in torch 2.7 and later (the H200's 2.11 and
2.13 here: ``torch/compiler/__init__.py``).

Entries are keyed by the model (class and config), the step (compact or the model's forward,
its settings), the device, the versions of torch, transformers, Triton and intelrt, and the
graph (a batch shape, or a row class of a step with symbolic shapes: ``compiled_step.StepGraph``):
a change of any of them is another entry, so a
stale artifact is never loaded (torch checks its own versions again). A file is written whole
(temporary file, then rename): a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from .._version import __version__
from ..support.versions import package_version
from ..tiny import cache_root

log = logging.getLogger(__name__)

SUBDIRECTORY = "compiled"
"""Where, in intelrt's cache directory (``INTELRT_CACHE``), compiled steps are kept."""
LOCATION = "INTELRT_COMPILE_CACHE"
"""A folder of its own for compiled steps (default: ``SUBDIRECTORY`` of intelrt's cache directory)."""
VERSIONED = ("torch", "transformers", "triton")
#: Config fields that name or describe the model but do not change what is compiled.
UNCOMPILED_FIELDS = frozenset({"_name_or_path", "transformers_version", "architectures", "id2label", "label2id",
                               "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype"})


def compile_cache_root() -> Path:
    """Where compiled steps are kept: ``INTELRT_COMPILE_CACHE``, else ``compiled`` in intelrt's cache."""
    return Path(os.environ.get(LOCATION) or cache_root() / SUBDIRECTORY)


class CompileCache:
    """The compiled-step entries of one model and step: the files of ``directory``, whose
    ``identity.json`` says what they were compiled for (:meth:`of` names both)."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        self.directory, self.identity = directory, identity

    @classmethod
    def of(cls, model: Any, step: dict[str, Any], device: str, root: Path | None = None) -> CompileCache:
        """The entries of ``model``'s ``step`` built for ``device`` (``Backend.compiled_for``:
        ``cuda:NVIDIA H200:sm90``, ``cpu``) in ``root`` (default: intelrt's cache)."""
        config = {k: v for k, v in model.config.to_dict().items() if k not in UNCOMPILED_FIELDS}
        identity = {
            "class": f"{type(model).__module__}.{type(model).__name__}", "config": config,
            "dtype": str(model.dtype), "step": step, "device": device,
            "versions": {**{name: package_version(name) for name in VERSIONED}, "intelrt": __version__}}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return cls((root or compile_cache_root()) / digest, identity)

    def path(self, shape: tuple[Any, ...]) -> Path:
        return self.directory / ("-".join(str(part) for part in shape) + ".bin")

    def holds(self, shape: tuple[Any, ...]) -> bool:
        """An entry exists for ``shape`` (its compile will be found, not done)."""
        return self.path(shape).is_file()

    def load(self, shape: tuple[Any, ...]) -> bool:
        """Hot-load the entry of ``shape`` into torch's caches; False when there is none or it is
        unreadable (the compile then runs as usual)."""
        import torch

        path = self.path(shape)
        try:
            data = path.read_bytes()
        except OSError:
            return False
        try:
            info = torch.compiler.load_cache_artifacts(data)
        except Exception as exc:  # noqa: BLE001 - a damaged or foreign entry only costs the compile
            log.warning("intelrt compile cache: %s could not be loaded (%s); compiling", path, exc)
            return False
        if info is None:
            return False
        log.info("intelrt compile cache: loaded %s (%s)", path,
                 ", ".join(f"{len(keys)} {kind}" for kind, keys in info.artifacts.items()) or "nothing")
        return True

    def save(self, shape: tuple[Any, ...]) -> Path | None:
        """Write what torch compiled so far in this process as the entry of ``shape``."""
        import torch

        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return None
        data, _info = saved
        path = self.path(shape)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / "identity.json").write_text(json.dumps(self.identity, indent=1, sort_keys=True,
                                                                  default=str))
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except OSError as exc:
            log.warning("intelrt compile cache: could not write %s (%s); the next process compiles again", path, exc)
            return None
        return path
