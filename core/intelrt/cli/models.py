"""The machine and the model a command works on: ``--simulate``, the embedded tiny model by
default, the plan checked against the command's counts before anything loads, loading with progress."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .output import say, step

if TYPE_CHECKING:
    from ..hooks.plan import Plan

@contextlib.contextmanager
def simulated(spec: str | None) -> Iterator[None]:
    """A simulated machine for the block (``--simulate KIND:COUNT[:GENERATION]``), or none (an empty
    spec is refused, not read as none: the plan would be this machine's)."""
    if spec is None:
        yield
        return
    from ..testing.simulation import parse_spec, simulate

    with simulate(**parse_spec(spec)):
        yield


def default_model() -> str:
    """The embedded tiny model's directory, built first (with progress) when missing."""
    from ..tiny import default_model_dir, default_model_path, is_built

    if is_built(default_model_dir()):
        return str(default_model_dir())
    with step(f"building the embedded tiny model into {default_model_dir()} (first use only)"):
        return str(default_model_path())


def context_length(plan: Plan) -> tuple[str, int] | None:
    """(config key, positions): what the model was built for, or ``None`` when its config does not say."""
    from ..backends.sizing import model_positions

    return model_positions(plan.model.config)


def check_tokens(plan: Plan, tokens: int, flag: str, *, room: int = 0) -> None:
    """Refuse a token count (``--max-new-tokens``, ``--block-size``) the model has no positions for,
    before it loads (a static KV cache of a billion positions would be allocated first); ``room``:
    positions something else needs (the prompt's, at least one)."""
    found = context_length(plan)
    if found is not None and tokens > found[1] - room:
        key, context = found
        extra = f", less {room} for the prompt" if room else ""
        raise ConfigurationError(f"{flag} {tokens}: {plan.model.source} was built for {context} positions "
                                 f"({key} in config.json){extra}; pass {flag} {context - room} or less")


def require_generation(plan: Plan, command: str) -> None:
    """``run`` generates text and ``train`` fine-tunes a causal LM: refuse another task before loading."""
    if plan.task != "text-generation":
        raise ConfigurationError(f"intelrt {command} needs a text-generation model, and the plan's task is "
                                 f"{plan.task!r} ({plan.decisions['task'].reason}); use a causal LM, or leave --task "
                                 "to intelrt (intelrt.pipeline and Loaded.embed / classify serve the other tasks)")


def announce_download(model: str) -> None:
    """A hub id that is not cached yet is fetched before anything else (and an unreachable hub is
    retried for about 25 s): say so before it starts."""
    from pathlib import Path

    from ..support.hubcache import hub_offline, is_repo_cached

    if not Path(model).expanduser().exists() and not hub_offline() and not is_repo_cached(model):
        say(f"{model} is not in the local hub cache: downloading it from the Hugging Face Hub (an unreachable hub "
            "is retried for about 25 s; -v shows each try)")


def planned(model: str, **options: Any) -> Plan:
    """``plan_for_load`` with progress: detection and reading the model import torch and
    transformers, seconds before anything can be said."""
    from ..runtime.loading import plan_for_load

    with step(f"planning {model} (detecting backends, reading its config)"):
        return plan_for_load(model, **options)


def load_planned(plan: Plan) -> Any:
    """``apply_plan`` with progress: loading may download, and takes seconds even for small models."""
    from ..runtime.loading import apply_plan

    with step(f"loading {plan.model.source} on {plan.backend.name}"):
        return apply_plan(plan)
