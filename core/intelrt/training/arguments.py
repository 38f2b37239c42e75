"""``transformers.TrainingArguments`` built from a plan (SPEC X10, H8, H9, X11, H10).

The backend's ``intelrt_training_arguments`` hooks contribute keywords (precision,
``ddp_backend``, ``torch_compile_backend`` …), each with its reason; the user's own keywords
win; a keyword that cannot work on the backend is refused with an intelrt error before
transformers would raise its own.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import ConfigurationError, PluginError
from ..hooks.options import AUTO
from ..hooks.payloads import ParallelismChoice
from ..hooks.plan import Plan
from ..hooks.request import option
from ..host.manager import PluginHost, get_host
from ..planning.planner import make_plan, plan_backend
from ..support.distributed import is_distributed_launch
from ..support.environ import write as write_environment
from ..support.redaction import MASK, SecretText, is_secret_name, register_secret

log = logging.getLogger(__name__)

#: Keywords of which at most one may be True; the first plugin (or the user) to set one owns precision.
PRECISION = ("bf16", "fp16")
USER = "user"
INTELRT_DEFAULT = "intelrt"
"""The source of a setting ``train()`` chose for you (its defaults), not a plugin's and not yours."""


@dataclass(frozen=True)
class TrainingSetting:
    """One ``TrainingArguments`` keyword and where it came from (a plugin, or ``"user"``)."""

    name: str
    value: Any
    reason: str
    source: str
    claim: str | None = None

    @property
    def shown_value(self) -> Any:
        """The value as reports show it: a secret (``hub_token`` …) masked."""
        return MASK if is_secret_name(self.name) and isinstance(self.value, str) else self.value

    def to_dict(self) -> dict[str, Any]:
        try:
            json.dumps(self.shown_value)
            value = self.shown_value
        except (TypeError, ValueError):
            value = repr(self.shown_value)
        return {"name": self.name, "value": value, "reason": self.reason, "source": self.source,
                "claim": self.claim}

    def __str__(self) -> str:
        claim = f" [{self.claim}]" if self.claim else ""
        return f"{self.name}={self.shown_value!r} ({self.source}: {self.reason}{claim})"


def argument_names() -> frozenset[str]:
    """Every keyword ``TrainingArguments`` accepts (imports transformers)."""
    from transformers import TrainingArguments

    return frozenset(f.name for f in dataclasses.fields(TrainingArguments) if f.init)


def _check_names(names: Mapping[str, Any], valid: frozenset[str]) -> None:
    unknown = sorted(set(names) - valid)
    if not unknown:
        return
    hints = []
    for name in unknown:
        # the two nearest; a training keyword first (per_device_batch_size is nearest to the eval one)
        close = difflib.get_close_matches(name, sorted(valid), n=2)
        close.sort(key=lambda candidate: "train" not in candidate)
        hints.append(f"{name!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
    raise ConfigurationError(f"not a TrainingArguments keyword: {', '.join(hints)}. See "
                             "help(transformers.TrainingArguments) for the keywords it takes.")


def resolve_plan(plan: object = None, backend: str = AUTO, sharding: str = AUTO) -> Plan:
    """The plan training follows: ``plan`` (a Plan or a Loaded), else a backend-only plan; with
    ``sharding`` other than auto, planned again for that strategy (:func:`with_sharding`)."""
    if plan is None:
        planned = plan_backend(backend=backend, sharding=sharding)
        if parallelism_of(planned).sharded_load:
            raise ConfigurationError(
                f"sharding={sharding!r} on {planned.backend.name} shards the weights as they load "
                "(from_pretrained(distributed_config=...)), which a model you built yourself was not: load it with "
                f"intelrt.load(model, sharding={sharding!r}) in every rank and pass plan= that loaded model")
        return planned
    found = getattr(plan, "plan", plan)
    if not isinstance(found, Plan):
        raise ConfigurationError(f"plan= takes an intelrt Plan (intelrt.plan(...)) or a loaded model "
                                 f"(intelrt.load(...)), not {type(plan).__name__}")
    if backend != AUTO and backend != found.backend.name:
        raise ConfigurationError(f"backend={backend!r} contradicts plan=, which runs on {found.backend.name!r}; "
                                 "pass one of them")
    return with_sharding(found, sharding)


def with_sharding(plan: Plan, sharding: str) -> Plan:
    """``plan`` with its training strategy forced to ``sharding`` (``auto``: ``plan`` unchanged):
    the same request and model, planned again, so the strategy is checked as if it had been asked
    for at load time."""
    wanted = option("sharding").normalize(sharding)
    same = wanted == AUTO or wanted == plan.request.sharding
    replanned = plan if same else make_plan(dataclasses.replace(plan.request, sharding=wanted), model=plan.model)
    _check_layout(plan, replanned)
    return replanned


def _check_layout(loaded: Plan, wanted: Plan) -> None:
    """Refuse a training strategy the weights, loaded as ``loaded`` says, are not laid out for
    (else Trainer would quietly run another: DDP on a model FSDP should have sharded)."""
    want, have = parallelism_of(wanted), parallelism_of(loaded)
    if have.inference == "tensor":
        raise ConfigurationError(
            "this model was loaded tensor-parallel (parallel='tensor'), for inference: its weights are split across "
            "the ranks, and intelrt trains whole or FSDP-sharded models. Load it with parallel='none' to train "
            "(sharding='fsdp' shards a model too big for one device; quantization='4bit' with lora=True shrinks it)")
    if want.distributed_config != have.distributed_config:
        raise ConfigurationError(
            f"sharding={want.training!r} on {wanted.backend.name} "
            + (f"shards the weights as they load (distributed_config={dict(want.distributed_config)})"
               if want.distributed_config else "trains a model every rank loaded whole")
            + ", and this model was loaded "
            + (f"with {dict(have.distributed_config)}" if have.distributed_config else "whole")
            + f": load it with intelrt.load(..., sharding={want.training!r}) in every rank (CLI: intelrt train "
              f"--sharding {want.training}), then train")


def parallelism_of(plan: Plan) -> ParallelismChoice:
    """The plan's parallelism decision (one process for a plan made without one)."""
    value = plan.decided.parallelism
    return value if isinstance(value, ParallelismChoice) else ParallelismChoice.single()


def training_settings(plan: Plan, overrides: Mapping[str, Any], host: PluginHost | None = None,
                      env: Mapping[str, str] | None = None,
                      defaults: Mapping[str, str] | None = None) -> list[TrainingSetting]:
    """The keywords for ``TrainingArguments``: the backend hooks' settings, then the user's.

    A user's keyword always wins; among plugins the first to answer wins (a backend plugin
    before the generic ``trylast`` defaults), and precision (``bf16``/``fp16``) is one choice.
    ``ddp_backend`` applies only in a launched rank (``env`` has ``LOCAL_RANK``): accelerate
    fails on it in a single process, so there it is left out (and refused when you pass it).
    """
    host = host or get_host()
    valid = argument_names()
    _check_names(overrides, valid)
    if overrides.get("bf16") and overrides.get("fp16"):
        raise ConfigurationError("bf16=True and fp16=True: mixed precision is one or the other; pass only one")
    # a plugin refuses what cannot work on its backend
    results = host.training_arguments(plan.backend, plan, MappingProxyType(dict(overrides)))
    distributed = is_distributed_launch(env)
    sharding = parallelism_of(plan)
    if sharding.training != "none" and not distributed:
        raise ConfigurationError(
            f"the plan trains with sharding={sharding.training!r} across {sharding.world_size} processes, and this "
            "process is not one of them (no LOCAL_RANK / WORLD_SIZE in its environment). Start it with "
            f"{sharding.launch or 'intelrt launch --nproc N your_script.py'}, or pass sharding='none' to train in this "
            "one process.")
    if overrides.get("ddp_backend") and not distributed:
        raise ConfigurationError(
            f"ddp_backend={overrides['ddp_backend']!r} applies to a distributed launch, and this process is not "
            "one (no LOCAL_RANK / WORLD_SIZE in its environment; accelerate would fail with 'Default process "
            "group has not been initialized'). Start the script with `intelrt launch` (or torchrun), or drop "
            "ddp_backend: intelrt sets it in launched ranks.")
    chosen: dict[str, TrainingSetting] = {}
    user_precision = any(k in overrides for k in PRECISION)
    for plugin, setting in results:
        if setting.name not in valid:
            raise PluginError(f"{host.describe(plugin)} returned TrainingArguments keyword {setting.name!r}, "
                              "which this transformers version does not have; report it to the plugin's authors",
                              plugin=plugin, distribution=host.distribution_of(plugin))
        if setting.name in overrides or setting.name in chosen:
            continue  # the user's value, or an earlier plugin's, wins
        if setting.name == "ddp_backend" and not distributed:
            log.debug("ddp_backend=%r left out: not a launched rank", setting.value)
            continue
        if setting.name in PRECISION and (user_precision or any(p in chosen for p in PRECISION)):
            continue
        chosen[setting.name] = TrainingSetting(setting.name, setting.value, setting.reason, plugin, setting.claim)
    defaults = defaults or {}  # keys of overrides that the caller (train()) chose, not the user: name, why
    users = [TrainingSetting(k, v, "set by you", USER) if k not in defaults else
             TrainingSetting(k, v, defaults[k], INTELRT_DEFAULT) for k, v in overrides.items()]
    return list(chosen.values()) + users


#: Counts ``TrainingArguments`` takes without checking them: 0 ends in a ``ZeroDivisionError`` (Trainer's
#: steps per epoch) or torch's sampler refusing ``batch_size=0``, after the model and data are ready.
_AT_LEAST_ONE = ("gradient_accumulation_steps", "per_device_train_batch_size", "per_device_eval_batch_size")


def check_value_types(arguments: type, settings: list[TrainingSetting]) -> None:
    """Your settings of the ``int``, ``float`` and ``bool`` fields of ``arguments`` (a
    ``TrainingArguments`` class) hold such values: ``TrainingArguments.__post_init__`` converts
    none, so ``learning_rate="fast"`` reached ``torch.optim.AdamW`` (a ``TypeError`` about ``<=``)
    and ``seed="x"`` numpy's seeding; and the counts of :data:`_AT_LEAST_ONE` are >= 1."""
    kinds = {f.name: f.type for f in dataclasses.fields(arguments)}
    for s in settings:
        kind, value = kinds.get(s.name), s.value
        if kind not in (int, float, bool):
            continue
        if kind is bool:
            fits = isinstance(value, bool)
        elif kind is int:
            fits = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        else:
            fits = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not fits:
            wanted = f"TrainingArguments takes {'an' if kind is int else 'a'} {kind.__name__} there"
            if s.source not in (USER, INTELRT_DEFAULT):  # a plugin's value: named, not passed on or dropped
                raise PluginError(f"plugin {s.source!r} set TrainingArguments {s.name}={value!r:.80}: {wanted}; report "
                                  f"it to the plugin's authors, or skip it with INTELRT_DISABLE_PLUGINS={s.source}",
                                  plugin=s.source, distribution=None)
            raise ConfigurationError(f"{s.name}={value!r:.80}: {wanted} (help(transformers.TrainingArguments))")
        if s.name in _AT_LEAST_ONE and value < 1:
            raise ConfigurationError(f"{s.name}={value!r} must be >= 1")


def build_training_arguments(output_dir: str | os.PathLike[str], plan: Plan,
                             settings: list[TrainingSetting], seq2seq: bool = False) -> Any:
    """``TrainingArguments(output_dir, **settings)`` (``Seq2SeqTrainingArguments`` for
    ``Seq2SeqTrainer``: ``seq2seq=True``); a refusal by transformers names intelrt's part."""
    from transformers import Seq2SeqTrainingArguments, TrainingArguments

    kwargs = {s.name: s.value for s in settings}
    for name in ("hub_token",):  # pickled into training_args.bin by Trainer: stored masked (SecretText)
        if isinstance(kwargs.get(name), str):
            register_secret(kwargs[name])
            kwargs[name] = SecretText(kwargs[name])
    for s in settings:
        if s.source != USER:
            log.info("TrainingArguments %s", s)
    arguments = Seq2SeqTrainingArguments if seq2seq else TrainingArguments
    check_value_types(arguments, settings)
    try:
        return arguments(output_dir=os.fspath(output_dir), **kwargs)
    except ValueError as exc:
        added = "; ".join(str(s) for s in settings if s.source != USER) or "nothing"
        raise ConfigurationError(f"transformers refused these training arguments: {exc} "
                                 f"(backend {plan.backend.name}; intelrt added: {added})") from exc


def training_arguments(output_dir: str | os.PathLike[str], *, plan: object = None, backend: str = AUTO,
                       sharding: str = AUTO, **overrides: Any) -> Any:
    """``transformers.TrainingArguments`` for this machine, built from a plan.

    :param output_dir: where ``Trainer`` writes checkpoints.
    :param plan: an :class:`intelrt.Plan` or a loaded model (``intelrt.load``); without one,
        intelrt plans the backend alone (no model needed — for frameworks that build their own).
    :param backend: for the backend-only plan: ``"auto"`` or a backend name.
    :param sharding: the training strategy across launched ranks: ``"auto"`` (the plan's), ``"none"``,
        ``"ddp"``, ``"fsdp"`` (FSDP2: ``fsdp`` and ``fsdp_config`` are set for you) or
        ``"deepspeed"`` (ZeRO: ``deepspeed`` is set). Outside a launched rank only ``"none"`` trains.
    :param overrides: any ``TrainingArguments`` keyword; yours win over the backend's. One that
        cannot work on the backend (``bf16=True`` on a device without bf16, ``ddp_backend="nccl"``
        on Gaudi) raises :class:`~intelrt.errors.PlanError` before transformers would.

    The plan's environment is applied first, as ``load()`` does (values you set are kept).
    """
    if not isinstance(output_dir, (str, os.PathLike)) or not os.fspath(output_dir):
        raise ConfigurationError(f"output_dir must be a directory path, got {output_dir!r}")
    resolved = resolve_plan(plan, backend, sharding)
    settings = training_settings(resolved, overrides)
    write_environment(resolved.env_for_this_process())  # as load() does: the run's devices, before torch sees them
    return build_training_arguments(output_dir, resolved, settings)
