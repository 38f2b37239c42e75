"""Every ``intelrt_*`` hook: typed and documented (pytest's hookspec style).

A plugin takes part in three ways:

* it contributes **backends** — :class:`~intelrt.plugin.Backend` subclasses, one per kind of
  device — with :func:`intelrt_backends`; the host asks the chosen backend for each decision, then
  intelrt's generic rules;
* it **overrides one decision** of any backend with a selection hook (``intelrt_select_<concern>``,
  one per concern of :data:`~intelrt.hooks.concerns.CONCERNS`); mark it ``tryfirst=True`` to answer
  before other plugins. A selection hook answers ``None`` for "not mine": it is asked for every
  backend, so it says itself which backends and models it is for;
* it **adds** variables, training keywords or doctor findings for any backend with the collecting
  hooks (:func:`intelrt_setup_env`, :func:`intelrt_launch_env`, :func:`intelrt_training_arguments`,
  :func:`intelrt_diagnose`).

Conventions: hooks are called with keyword arguments and an implementation may accept any subset
of them. Selection hooks are *firstresult* (the first non-``None`` answer wins); the others collect
every plugin's answers. A hook raises :class:`~intelrt.plugin.PlanError` (or another
``IntelrtError``) to refuse a request with a message for the user; any other exception is reported
as a fault of the plugin. ``env`` is the environment the plan is made for: read it, never write
``os.environ``. Hooks must not import torch, transformers or a vendor stack at module import time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .backend import Backend
from .concerns import CONCERNS, Concern, Decided
from .markers import PROJECT, hookspec
from .model import ModelInfo
from .plan import Plan
from .request import Request
from .types import BackendStatus, Decision, EnvVar, Finding, Setting

__all__ = ["PROJECT", "SELECTION_HOOKS", "hookspec"]


@hookspec
def intelrt_backends() -> Sequence[type[Backend]] | None:
    """The backends this plugin contributes: :class:`~intelrt.plugin.Backend` subclasses.

    Called once when the host starts. The host calls each class's ``detect(env)`` to learn whether
    it is available here, and asks the chosen one for every decision it declares; two plugins
    contributing backends of one name is an error naming both.

    :returns: the backend classes, or ``None`` for none.
    """


@hookspec
def intelrt_setup_env(backend: Backend, request: Request, env: Mapping[str, str]
                      ) -> Sequence[EnvVar | Finding] | None:
    """Environment variables the run needs before the device driver loads, and warnings about the
    ones already in ``env`` — on top of what the chosen backend's ``run_environment`` asks for.

    The host keeps every value the user already set (SPEC C2) unless ``EnvVar.overwrite_user``
    says the user asked for this one in the same call, and reports each change.

    :param backend: the backend chosen for the run.
    :param request: what the user asked for.
    :param env: the environment the plan is made for.
    :returns: ``EnvVar`` items to set and ``Finding`` items to report, or ``None``.
    """


@hookspec
def intelrt_launch_env(backend: Backend, plan: Plan, nproc: int, env: Mapping[str, str]
                       ) -> Sequence[EnvVar | Finding] | None:
    """Extra environment for the processes ``intelrt launch`` starts, and warnings about the launch,
    on top of the plan's environment and the backend's ``launch_environment``.

    :param backend: the backend chosen for the run.
    :param plan: the launch's backend-only plan.
    :param nproc: how many processes are started.
    :param env: the environment the processes start from.
    :returns: ``EnvVar`` and ``Finding`` items, or ``None``.
    """


@hookspec
def intelrt_training_arguments(backend: Backend, plan: Plan, overrides: Mapping[str, Any]
                               ) -> Sequence[Setting] | None:
    """``TrainingArguments`` keywords this plugin contributes, each with its reason, on top of the
    generic ones and the backend's ``training_arguments``.

    :param backend: the backend chosen for the run.
    :param plan: the plan training follows.
    :param overrides: the user's own keywords: they win; raise ``PlanError`` when one cannot work.
    :returns: ``Setting`` items, or ``None``.
    """


@hookspec
def intelrt_diagnose(backends: Sequence[BackendStatus], env: Mapping[str, str], probe: bool
                     ) -> Sequence[Finding] | None:
    """Findings for ``intelrt doctor``: what is wrong or worth knowing, each with its fix — on top
    of each backend's ``diagnose``.

    :param backends: every backend detected, available or not.
    :param env: the environment to judge.
    :param probe: True for ``intelrt doctor --probe``: only then may a plugin run vendor tools
        (``hl-smi``, ``xpu-smi``); detection and planning never do.
    :returns: ``Finding`` items, or ``None``.
    """


SelectionHook = Callable[..., Decision | None]


def _selection_hook(declared: Concern) -> SelectionHook:
    def spec(backend: Backend, request: Request, model: ModelInfo, env: Mapping[str, str], decided: Decided
             ) -> Decision | None:
        """(generated from the concern registry)"""

    assert declared.hook is not None
    spec.__name__ = spec.__qualname__ = declared.hook
    spec.__doc__ = (f"{inspect.cleandoc(declared.doc)}\n\n"
                    "Asked before the chosen backend's ``select_" + declared.name + "``: answer ``None`` for a "
                    "backend, a model or a request this plugin is not for. Stops at the first non-``None`` "
                    "result.\n\n"
                    ":param backend: the backend chosen for the run.\n"
                    ":param request: what the user asked for (``request.is_forced(option)`` tells a forced option).\n"
                    ":param model: the model's config and files.\n"
                    ":param env: the environment the plan is made for.\n"
                    ":param decided: the decisions made before this one.\n"
                    f":returns: a ``Decision`` whose value goes to {declared.applies}, or ``None``.")
    return hookspec(firstresult=True)(spec)


SELECTION_HOOKS: dict[str, SelectionHook] = {c.hook: _selection_hook(c) for c in CONCERNS if c.hook}
"""``intelrt_select_<concern>`` for every concern a plugin may decide (the registry's order)."""
globals().update(SELECTION_HOOKS)
