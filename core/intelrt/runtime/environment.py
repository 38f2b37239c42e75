"""A plan's environment applied: to this process (``setup_env``, before ``import torch`` touches a
device) or to the process that runs the plan here (``load()``), never the driver-read-once
variables a started process alone can use."""

from __future__ import annotations

from collections.abc import MutableMapping

from ..hooks.plan import Plan
from ..support.environ import write


def setup_env(plan: Plan, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Write the plan's environment into ``environ`` (default ``os.environ``); returns the names set.

    Call it before ``import torch`` touches a device: visibility masks only take effect before the
    driver loads (SPEC C2). Values the user already set are kept. Processes started afterwards from
    this environment get the plan's device selection.
    """
    return write(plan.env_to_set(), environ)


def apply_in_process(plan: Plan) -> list[str]:
    """Write the plan's environment into ``os.environ`` for running the plan in *this* process
    (``load()``, ``training_arguments()``): everything but the variables only a started process
    can use (a device mask this process's driver has already read)."""
    return write(plan.env_for_this_process())
