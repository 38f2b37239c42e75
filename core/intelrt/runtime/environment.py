"""A plan's environment applied to this process (``setup_env``, ``load()``): never the
driver-read-once variables a started process alone can use (``Plan.child_environment()`` has them)."""

from __future__ import annotations

from collections.abc import MutableMapping

from ..hooks.plan import Plan
from ..support.environ import write


def setup_env(plan: Plan, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Write the plan's environment for *this* process into ``environ`` (default ``os.environ``);
    returns the names set. Values the user already set are kept (SPEC C2).

    Variables only a started process can use (``in_process=False``: a device mask this process's
    driver read at detection, and never reads again) are left out — written here they would only
    mislead a later plan in this process. Processes you start yourself get the whole environment
    from ``plan.child_environment()``; ``intelrt launch`` passes it to its ranks.
    """
    return write(plan.env_for_this_process(), environ)


def apply_in_process(plan: Plan) -> list[str]:
    """Write the plan's environment into ``os.environ`` for running the plan in *this* process
    (``load()``, ``training_arguments()``): what :func:`setup_env` writes."""
    return setup_env(plan)
