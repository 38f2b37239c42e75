"""The command line's error contract: every way a command can end, as one :class:`Failure`.

Exit status 0 success, 1 a run that failed (network, memory, a crash in a library, a launched job
that failed), 2 input that cannot be used as given (arguments, the model's files, the environment),
130 interrupted (Ctrl-C), 143 stopped by SIGTERM. intelrt's own errors already say what was wrong and how to fix it;
exceptions of the libraries underneath (the hub, safetensors, transformers, torch.compile, the
operating system) are translated here, at the command line's edge, into the same shape — so a user
reads one paragraph instead of a traceback, and a program reading ``--json`` gets
``{"error": {"type", "message", "fix"}}``.
"""

from __future__ import annotations

import errno
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import (
    BackendUnavailableError,
    ConfigurationError,
    GenerationError,
    IntelrtError,
    ModelSourceError,
    PlanError,
    PluginError,
    SaveError,
    TrainingDivergedError,
    UnsafeModelError,
)
from .interrupt import EXIT_TERMINATED, Terminated

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
MAX_QUOTED = 400
"""Characters of a library's own message quoted in ours (its first paragraph; tracebacks with -v)."""
VERBOSE_HINT = "run again with -v for the traceback"


class UsageError(ConfigurationError):
    """The command line itself is wrong (unknown flag, bad value): argparse's complaint."""

    def __init__(self, message: str, *, command: str) -> None:
        super().__init__(message)
        self.command = command


class RunFailed(IntelrtError):
    """Something the command started ran and failed (a launched job): exit status 1."""

    def __init__(self, message: str, *, fix: str, kind: str) -> None:
        super().__init__(message)
        self.fix = fix
        self.kind = kind


@dataclass(frozen=True)
class Failure:
    """How a command ended when it did not succeed."""

    type: str
    message: str
    fix: str
    exit_code: int
    fix_in_message: bool = False
    """intelrt's own messages already say how to fix: the text output does not repeat ``fix``."""

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "fix": self.fix}}

    def text(self) -> str:
        """The one paragraph printed on stderr."""
        fix = "" if self.fix_in_message else f"\n  fix: {self.fix}"
        return f"intelrt: error: {self.message}{fix}"


#: Where to look next, for intelrt's own errors (their message names the specific fix).
_INTELRT_FIXES: tuple[tuple[type[IntelrtError], int, str], ...] = (
    (UsageError, EXIT_USAGE, "see `intelrt {command} --help` for the options and their values"),
    (BackendUnavailableError, EXIT_USAGE, "`intelrt doctor` shows every backend and why it is unavailable; pick an "
                                          "available one with --backend, or leave it to intelrt"),
    (UnsafeModelError, EXIT_USAGE, "read the model's code or weights first, then opt in with --trust-remote-code "
                                   "or --allow-pickle"),
    (ModelSourceError, EXIT_USAGE, "pass a directory saved with save_pretrained(), or a hub id (`intelrt run ID` "
                                   "downloads it once)"),
    (PlanError, EXIT_USAGE, "change the option the message names, or leave it to intelrt (`intelrt plan` shows "
                            "what intelrt decides)"),
    (ConfigurationError, EXIT_USAGE, "change the argument or variable the message names (`intelrt {command} "
                                     "--help` lists the options)"),
    (PluginError, EXIT_FAILED, "fix or uninstall {distribution}, or block the plugin: "
                               "INTELRT_DISABLE_PLUGINS={plugin}"),
    (SaveError, EXIT_FAILED, "free disk space, or choose a writable directory"),
    (GenerationError, EXIT_FAILED, "try the alternative the message names"),
    (TrainingDivergedError, EXIT_FAILED, "lower --learning-rate, or train in bfloat16 or float32 rather than "
                                         "float16; the checkpoints written before it diverged are kept"),
    (IntelrtError, EXIT_USAGE, "change what the message names"),
)


def _chain(exc: BaseException, *, suppressed: bool = False) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (libraries wrap the hub's errors in OSError);
    ``suppressed``: also through ``raise … from None`` (intelrt's own errors hide a library's that way)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        hidden = current.__suppress_context__ and not suppressed
        current = current.__cause__ or (None if hidden else current.__context__)


def _foreign_cause(exc: BaseException) -> Failure | None:
    """The first library failure ``exc`` was raised from, as :data:`_KINDS` reads it: the kind of
    failure (the network, memory, a full disk), not transformers' catch-all, whose fix ("check the
    model's files") would name the wrong culprit under intelrt's own message."""
    for cause in list(_chain(exc, suppressed=True))[1:]:
        for rule in _KINDS:
            failure = rule(cause)
            if failure is not None:
                return failure
    return None


def _is(exc: BaseException, module: str, *names: str) -> bool:
    """``exc`` is an instance of a class called one of ``names`` from ``module`` (no import needed:
    an exception of a library that was never imported cannot occur)."""
    return any(cls.__name__ in names and cls.__module__.startswith(module) for cls in type(exc).__mro__)


def _raised_in(exc: BaseException, *fragments: str) -> bool:
    """Some frame of ``exc``'s traceback runs code from a path containing one of ``fragments``."""
    return any(any(f in frame.filename for f in fragments) for frame in traceback.extract_tb(exc.__traceback__))


def _said(exc: BaseException) -> str:
    """The first paragraph of a library's message, shortened."""
    text = str(exc).strip().split("\n\n")[0].replace("\n", " ")
    text = text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED].rstrip() + " …"
    return text or type(exc).__name__


def _hub(exc: BaseException) -> Failure | None:
    if not _is(exc, "huggingface_hub", "HfHubHTTPError", "LocalEntryNotFoundError", "OfflineModeIsEnabled",
               "HFValidationError", "EntryNotFoundError"):
        return None
    said = _said(exc)
    if _is(exc, "huggingface_hub", "GatedRepoError"):
        return Failure("GatedModel", f"the model is gated on the Hugging Face Hub: {said}",
                       "accept its terms on huggingface.co, then log in (`hf auth login`) or set HF_TOKEN", EXIT_USAGE)
    if _is(exc, "huggingface_hub", "RepositoryNotFoundError"):
        return Failure("ModelNotFound", f"the Hugging Face Hub has no such model (or it is private): {said}",
                       "check the id (org/name); for a private model log in with `hf auth login`; or pass a "
                       "local directory", EXIT_USAGE)
    if _is(exc, "huggingface_hub", "RevisionNotFoundError"):
        return Failure("RevisionNotFound", f"no such revision on the Hugging Face Hub: {said}",
                       "check the revision (a branch, tag or commit of the model)", EXIT_USAGE)
    if _is(exc, "huggingface_hub", "HFValidationError"):
        return Failure("InvalidModelId", f"neither a local directory nor a valid hub id: {said}",
                       "check the path (a directory saved with save_pretrained(); relative paths start from the "
                       "current directory) or the hub id (org/name)", EXIT_USAGE)
    if _is(exc, "huggingface_hub", "OfflineModeIsEnabled"):
        return Failure("HubOffline", f"HF_HUB_OFFLINE is set and the model is not in the local cache: {said}",
                       "unset HF_HUB_OFFLINE to download it, or pass a local directory", EXIT_USAGE)
    if _is(exc, "huggingface_hub", "LocalEntryNotFoundError"):
        return Failure("HubUnreachable", f"the model is not in the local hub cache and the Hugging Face Hub could "
                       f"not be reached: {said}",
                       "check the network (and HF_ENDPOINT, proxies), or download the model once where there is "
                       "network (`hf download ID`), or pass a local directory", EXIT_FAILED)
    if _is(exc, "huggingface_hub", "EntryNotFoundError"):
        return Failure("ModelFileMissing", f"a file the model needs is not in its repository: {said}",
                       "check that the id names a transformers model (config.json and weights)", EXIT_USAGE)
    return Failure("HubError", f"the Hugging Face Hub refused the request: {said}",
                   "check the id, your token (`hf auth whoami`) and the network, then try again", EXIT_FAILED)


def _network(exc: BaseException) -> Failure | None:
    if not (_is(exc, "httpx", "TransportError") or _is(exc, "requests", "ConnectionError", "Timeout")):
        return None
    return Failure("NetworkError", f"the network request failed: {_said(exc)}",
                   "check the network (and HF_ENDPOINT, proxies), or pass a local directory", EXIT_FAILED)


#: How a full disk (ENOSPC, EDQUOT) or a file-size limit (EFBIG) reads in the messages of libraries
#: that write through their own I/O (safetensors' Rust writer: ``IoError(Os { code: 28, kind: StorageFull …``).
_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|File too large|StorageFull|FileTooLarge|"
                        r"os error (28|27|122)\b|code: (28|27|122)\b")


def _safetensors(exc: BaseException) -> Failure | None:
    if not _is(exc, "safetensors", "SafetensorError") and not _is(exc, "huggingface_hub", "SafetensorsParsingError"):
        return None
    if _DISK_FULL.search(str(exc)):  # writing weights onto a full disk is not a damaged file
        return Failure("DiskFull", f"writing a weights file failed: {_said(exc)}",
                       "free disk space (or raise the quota / file-size limit), or write somewhere else", EXIT_FAILED)
    return Failure("CorruptWeights", f"a weights file of the model cannot be read: {_said(exc)}",
                   "the file is damaged or incomplete: download it again (`hf download ID --force-download`) "
                   "or save the model again", EXIT_USAGE)


def _compiling(exc: BaseException) -> bool:
    """A frame of ``exc``'s traceback runs the compiler — not only dynamo's ``disable`` wrapper
    (``torch/_dynamo/eval_frame.py``), which eager code such as ``Optimizer.load_state_dict`` runs through."""
    return any(("/torch/_inductor/" in f.filename or "torchinductor_" in f.filename
                or ("/torch/_dynamo/" in f.filename and not f.filename.endswith("/torch/_dynamo/eval_frame.py")))
               for f in traceback.extract_tb(exc.__traceback__))


def _compile(exc: BaseException) -> Failure | None:
    if _is(exc, "torch._dynamo", "InvalidBackend"):
        return Failure("InvalidCompileBackend", f"torch.compile has no such backend: {_said(exc)}",
                       "pass --compile on (inductor), none, or a name torch._dynamo.list_backends() lists", EXIT_USAGE)
    if _is(exc, "torch._dynamo", "TorchDynamoException") or _is(exc, "torch._inductor", "InductorError") or \
            _compiling(exc):
        return Failure("CompileFailed", f"torch.compile failed on this model: {_said(exc)}",
                       "run with --compile none; the plan should have refused this combination, so please "
                       f"report it with `intelrt doctor --json` ({VERBOSE_HINT})", EXIT_FAILED)
    return None


_VISIBILITY = re.compile(r"\b[A-Z][A-Z0-9_]*(?:VISIBLE|AFFINITY)[A-Z0-9_]*\b")
"""A device-visibility variable (``ZE_AFFINITY_MASK``, ``HABANA_VISIBLE_MODULES``,
``CUDA_VISIBLE_DEVICES`` …): a driver reads it once, when it starts, and one it cannot read stops it there."""
_DRIVER_START = ("/torch/xpu/__init__.py", "/torch/cuda/__init__.py", "/habana_frameworks/")


def _driver(exc: BaseException) -> Failure | None:
    """A device driver that failed to start, wherever torch first asked it for its devices — often
    deep inside an import (transformers' quantizers import torchao, whose Triton check counts the
    devices under ``torch/_dynamo``): a compile failure it is not. Names the visibility variable set."""
    import os

    said = _said(exc)
    named = sorted(set(_VISIBILITY.findall(said)))
    started = any(any(part in f.filename.replace(os.sep, "/") for part in _DRIVER_START)
                  for f in traceback.extract_tb(exc.__traceback__))
    if not isinstance(exc, RuntimeError) or not (named or started):
        return None
    shown = [f"{v}={os.environ[v]!r}" for v in (named or sorted(os.environ)) if v in os.environ and _VISIBILITY.fullmatch(v)]
    fix = (f"{' and '.join(shown)}: the driver reads it when it starts; correct it (`intelrt doctor` names every "
           "entry it cannot read) or unset it" if shown else
           f"check the device driver's installation (`intelrt doctor`); {VERBOSE_HINT}")
    return Failure("DriverFailed", f"the device driver failed to start: {said}", fix,
                   EXIT_USAGE if shown else EXIT_FAILED)


def _memory(exc: BaseException) -> Failure | None:
    if not (isinstance(exc, MemoryError) or _is(exc, "torch", "OutOfMemoryError")):
        return None
    return Failure("OutOfMemory", f"out of memory: {_said(exc)}",
                   "shrink the run: --quantization 4bit, --dtype bfloat16, a smaller model or batch, or more "
                   "--devices", EXIT_FAILED)


def _transformers(exc: BaseException) -> Failure | None:
    if not isinstance(exc, (ValueError, KeyError, OSError)) or not _raised_in(exc, "/transformers/"):
        return None
    said = _said(exc)
    if _raised_in(exc, "/transformers/models/auto/") and ("model type" in said or "Unrecognized" in said
                                                          or isinstance(exc, KeyError)):
        return Failure("UnknownModelType", f"the installed transformers cannot load this kind of model: {said}",
                       "check model_type in config.json; upgrade transformers (pip install -U transformers); or "
                       "pass --trust-remote-code if the model ships its own code and you trust it", EXIT_USAGE)
    return Failure("ModelLoadFailed", f"transformers could not load the model: {said}",
                   "check the model's files (config.json, weights, tokenizer) or save it again with "
                   "save_pretrained()", EXIT_USAGE)


_KINDS: tuple[Callable[[BaseException], Failure | None], ...] = (_hub, _network, _safetensors, _driver, _compile,
                                                                 _memory)
_SPECIFIC: tuple[Callable[[BaseException], Failure | None], ...] = (*_KINDS, _transformers)


def _operating_system(exc: BaseException) -> Failure | None:
    if isinstance(exc, UnicodeDecodeError):
        return Failure("NotText", f"a file is not UTF-8 text: {_said(exc)}",
                       "pass a UTF-8 text file (one example per line)", EXIT_USAGE)
    if not isinstance(exc, OSError):
        return None
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    reason = exc.strerror or _said(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Failure("DiskFull", f"{where}{reason}", "free disk space, or write somewhere else", EXIT_FAILED)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
                        FileExistsError)):
        return Failure(type(exc).__name__, f"{where}{reason}", "check the path and its permissions", EXIT_USAGE)
    return Failure("OSError", f"{where}{reason}", f"check the path, the device and the network ({VERBOSE_HINT})",
                   EXIT_FAILED)


def describe(exc: BaseException, command: str) -> Failure:
    """``exc`` as the command line reports it."""
    if isinstance(exc, KeyboardInterrupt):
        return Failure("Interrupted", "interrupted (Ctrl-C)", "run the command again to start over",
                       EXIT_INTERRUPTED)
    if isinstance(exc, Terminated):
        return Failure("Terminated", "stopped (SIGTERM)", "run the command again to start over", EXIT_TERMINATED)
    command = getattr(exc, "command", command)  # a UsageError knows its subcommand before main does
    if isinstance(exc, RunFailed):
        return Failure(exc.kind, str(exc), exc.fix, EXIT_FAILED)
    if isinstance(exc, IntelrtError):
        notes = "".join(f" ({n})" for n in getattr(exc, "__notes__", []))
        cause = _foreign_cause(exc)
        if cause is not None:  # intelrt's words, the library's kind of failure (the network is a run failing)
            return Failure(cause.type, f"{exc}{notes}", cause.fix, cause.exit_code)
        for kind, code, fix in _INTELRT_FIXES:
            if isinstance(exc, kind):
                fix = fix.format(command=command, plugin=getattr(exc, "plugin", ""),
                                 distribution=getattr(exc, "distribution", None) or "its distribution"
                                 ).replace("intelrt  --help", "intelrt --help")  # no command given
                return Failure(type(exc).__name__, f"{exc}{notes}", fix, code,
                               fix_in_message=kind is not UsageError)
    for rule in _SPECIFIC:
        for link in _chain(exc):
            failure = rule(link)
            if failure is not None:
                return failure
    failure = _operating_system(exc)
    if failure is not None:
        return failure
    return Failure(type(exc).__name__, f"unexpected {type(exc).__name__}: {_said(exc)}",
                   f"{VERBOSE_HINT}, and report it with `intelrt doctor --json`: intelrt should have said what "
                   "went wrong", EXIT_FAILED)


def print_traceback(exc: BaseException) -> None:
    """``-v``: the traceback, secrets masked as everywhere (a library's message may quote a URL with
    its password, or a token)."""
    from ..support.redaction import redact_text

    sys.stderr.write(redact_text("".join(traceback.format_exception(exc))))
