"""Every error intelrt raises on purpose; each message says what was wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Callable

_mask: Callable[[str], str] | None = None
"""What every error's text goes through: ``intelrt.support.redaction.redact_text``, which registers
itself when imported (``import intelrt`` imports it). This module is below every other layer, so it
is handed the function rather than importing it."""


def mask_messages_with(mask: Callable[[str], str]) -> None:
    """Have every :class:`IntelrtError`'s text go through ``mask`` (secrets replaced)."""
    global _mask
    _mask = mask


class IntelrtError(Exception):
    """Base class: catching it catches every deliberate intelrt error. Its text has secrets masked
    (a message may quote a URL with a token in its query, or a library's words that do)."""

    def __str__(self) -> str:
        text = super().__str__()
        return _mask(text) if _mask is not None else text


class ConfigurationError(IntelrtError, ValueError):
    """A request, argument or environment variable that intelrt cannot act on."""


class BackendUnavailableError(IntelrtError, RuntimeError):
    """A backend was asked for (or needed) and is not available (SPEC C1)."""


class PlanError(IntelrtError, ValueError):
    """A decision cannot be made as requested on the chosen backend."""


class PluginError(IntelrtError, RuntimeError):
    """A plugin failed to import, raised in a hook, or returned a wrong type (SPEC C6)."""

    def __init__(self, message: str, *, plugin: str, distribution: str | None) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.distribution = distribution


class ModelSourceError(IntelrtError, FileNotFoundError):
    """The model cannot be found or read without downloading."""


class UnsafeModelError(IntelrtError, PermissionError):
    """The model needs pickle weights or remote code and the caller did not opt in (SPEC C5)."""


class GenerationError(IntelrtError, RuntimeError):
    """Generation ran and failed (e.g. continuous batching lost requests); says what to try instead."""


class SaveError(IntelrtError, OSError):
    """Writing a result failed (disk full, read-only or missing directory). What was being written
    is removed, so nothing is left looking complete; what was there before is kept."""


class TrainingDivergedError(IntelrtError, RuntimeError):
    """Training stopped because the loss, the gradient norm or the weights stopped being finite
    numbers. Nothing was saved as the final model; the checkpoints written before are kept."""
