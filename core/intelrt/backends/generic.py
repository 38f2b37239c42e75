"""intelrt's generic rules: what every backend gets where it declares nothing of its own.

The host asks the chosen backend object first (``Backend.select_<concern>`` /
``check_<concern>``); when it answers ``None``, :data:`GENERIC` decides. Every answer says why, so a
plan never holds an unexplained value; decisions made here are credited to ``"defaults"`` in the
plan. The functions a backend may build on (``attention_fallback``, ``check_training_overrides`` …)
are exported by :mod:`intelrt.plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import PlanError
from ..hooks.backend import HOST_COLLECTIVES, UNDECLARED_SHARDING, Backend, Endorsement, Situation
from ..hooks.model import ModelInfo
from ..hooks.options import AUTO, DTYPES
from ..hooks.payloads import (
    CompileChoice,
    KernelChoice,
    Placement,
)
from ..hooks.plan import Plan
from ..hooks.types import Decision, Setting
from ..quantization.checkpoint import read_checkpoint_quantization
from ..quantization.methods import Target, decide, projection_inputs
from ..support.distributed import world_size
from ..support.hubcache import hub_offline, is_repo_cached
from ..support.versions import kernels_problem, package_version
from .decode_rules import decide_batching, decide_decode
from .parallelism import decide_parallelism, rank_placement
from .sizing import bytes_per_parameter, fits_one_device

GENERIC_PLUGIN = "defaults"
"""What a plan names as the author of a generic decision."""
KNOWN_ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4",
                   "flex_attention", "paged|sdpa", "paged|eager", "paged|flash_attention_2")
NVIDIA_ONLY_ATTENTION = ("flash_attention_3", "flash_attention_4")
"""FlashAttention-3 and -4 ship NVIDIA builds only: refused unless the backend (CUDA) endorses them."""
#: TrainingArguments keywords that choose a sharding strategy, and the strategy each belongs to.
SHARDING_KEYWORDS = {"fsdp": "fsdp", "fsdp_config": "fsdp", "deepspeed": "deepspeed"}


def attention_fallback(model: ModelInfo, preferred: str = "sdpa") -> Decision | None:
    """The attention decision when the model's class cannot run ``preferred`` (``None`` when it can):
    transformers' eager attention, with the class named, or — for remote code, whose class is known
    only once its code runs — ``None``, leaving the choice to transformers (sdpa where the class
    supports it, else eager). A backend's attention rule asks this before answering ``preferred``."""
    arch = model.architecture
    if arch is None:
        return Decision(None, "the model's class is defined by its own code (or unknown to transformers), so "
                              "transformers picks at load time: sdpa where the class supports it, else eager")
    if arch.supports(preferred):
        return None
    return Decision("eager", f"{arch.name} does not support {preferred} (it supports {', '.join(arch.attention)}); "
                             "eager is transformers' own attention for it")


def check_hub_kernel(repo: str) -> None:
    """A hub kernel id as attention: transformers must be able to use ``kernels``, and offline the
    kernel must be cached already (SPEC C4)."""
    problem = kernels_problem()
    if problem:
        raise PlanError(f"attention={repo!r} is a hub kernel, and {problem}; or use attention='sdpa'")
    if hub_offline() and not (is_repo_cached(repo, "kernel") or is_repo_cached(repo, "model")):
        raise PlanError(f"attention={repo!r}: HF_HUB_OFFLINE is set and the kernel is not in the local hub cache; "
                        "download it once with network, or use attention='sdpa'")


def compile_backends() -> list[str] | None:
    """The ``torch.compile`` backends registered in this process (entry-point ones included), or
    ``None`` without torch. Imports torch's compiler (about a second): asked only for a named backend."""
    try:
        from torch._dynamo.backends.registry import list_backends
    except ImportError:
        return None
    return list(list_backends(exclude_tags=()))


def check_training_overrides(backend: Backend, plan: Plan, overrides: Mapping[str, Any]) -> None:
    """Refuse a user's TrainingArguments keyword that cannot work on ``backend`` (before
    transformers raises its own, less specific error)."""
    if overrides.get("bf16") is True:
        lacking = [d for d in backend.devices if d.bf16 is False]
        if lacking:
            raise PlanError(f"bf16=True, but {lacking[0].name} ({backend.name} device {lacking[0].index}) has no "
                            "bfloat16 support; pass fp16=True, or leave precision to intelrt")
    wanted = overrides.get("ddp_backend")
    ours = plan.decided.collective or backend.sharding_support.collective
    if wanted is not None and wanted not in (*HOST_COLLECTIVES, ours, backend.sharding_support.collective):
        fix = f"pass ddp_backend={ours!r} or leave it to intelrt" if ours else "leave ddp_backend unset"
        library = f"{ours} on its devices" if ours else "no library of its devices"
        raise PlanError(f"ddp_backend={wanted!r} is not a collective library of {backend.name}, which runs "
                        f"{' and '.join(HOST_COLLECTIVES)} on the host and {library}; {fix}")
    _check_sharding_overrides(plan, overrides)
    if overrides.get("use_cpu") is True and not backend.computes_on_host:
        raise PlanError(f"use_cpu=True contradicts the plan, which runs on {backend.name}; pass backend='cpu' to "
                        "intelrt instead, so precision and the collective backend follow the CPU")


def _check_sharding_overrides(plan: Plan, overrides: Mapping[str, Any]) -> None:
    """A user's ``fsdp=`` / ``fsdp_config=`` / ``deepspeed=`` must agree with the plan's strategy
    (else one would be silently ignored, or both fight over the model)."""
    choice = plan.decided.parallelism
    training = choice.training if choice is not None else "none"
    for keyword, strategy in SHARDING_KEYWORDS.items():
        if overrides.get(keyword) in (None, False, "", {}):
            continue
        if training != strategy:
            raise PlanError(f"{keyword}= configures sharding={strategy!r}, and the plan trains with "
                            f"sharding={training!r}; pass sharding={strategy!r} to intelrt (it then generates the "
                            f"{keyword} settings, and yours still win), or drop {keyword}=")
        if strategy == "fsdp" and choice is not None and choice.sharded_load:
            raise PlanError(f"{keyword}= configures accelerate's FSDP, and on {plan.backend.name} the plan's FSDP2 is "
                            "transformers' own, sharding the weights as they load (accelerate builds no FSDP there); "
                            f"drop {keyword}=")


def sharding_settings(plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
    """The ``TrainingArguments`` keywords of the plan's training strategy: ``fsdp`` and
    ``fsdp_config`` (accelerate's FSDP2), ``deepspeed``, or — for weights sharded as they load,
    whose optimizer state transformers does not checkpoint — ``save_only_model``."""
    choice = plan.decided.parallelism
    if choice is None:
        return []
    why = f"the plan trains with sharding={choice.training!r} across {choice.world_size} ranks"
    settings: list[Setting] = []
    if choice.fsdp_config is not None:
        settings.append(Setting("fsdp", True, f"{why}: PyTorch FSDP2, built by accelerate"))
        settings.append(Setting("fsdp_config", dict(choice.fsdp_config),
                                f"{why}: one FSDP unit per decoder layer, sharded checkpoints, the final model "
                                "gathered on rank 0"))
    if choice.deepspeed is not None:
        settings.append(Setting("deepspeed", dict(choice.deepspeed), f"{why}: DeepSpeed ZeRO"))
    if choice.training == "fsdp" and choice.sharded_load and not overrides.get("save_only_model"):
        settings.append(Setting("save_only_model", True,
                                "the weights were sharded as they loaded, and transformers checkpoints no optimizer "
                                "state for such a model (Trainer refuses to save one): checkpoints hold the model"))
    return settings


class GenericRules:
    """The rule for each concern when the backend declares none (same method names as
    :class:`~intelrt.hooks.backend.Backend`, with the backend as first argument)."""

    def derives(self, concern: str, backend: Backend) -> bool:
        """Whether this rule's answer for ``concern`` comes from what ``backend`` declares (its
        collective library, its fast decode loop's facts): the plan then credits the backend's plugin,
        not ``defaults``."""
        if concern == "collective":
            return backend.sharding_support is not UNDECLARED_SHARDING
        return concern in ("decode", "batching") and backend.fast_decode

    # -- automatic decisions ------------------------------------------------------------------
    def select_dtype(self, backend: Backend, s: Situation) -> Decision:
        if backend.devices and all(d.bf16 for d in backend.devices):
            return Decision("bfloat16", f"every visible {backend.name} device supports bfloat16")
        if backend.devices and any(d.bf16 is False for d in backend.devices):
            return Decision("float16", f"a visible {backend.name} device lacks bfloat16; float16 keeps half the memory")
        return Decision("float32", f"bfloat16 support of {backend.name} is unknown; float32 is the safe choice")

    def select_quantization(self, backend: Backend, s: Situation) -> Decision:
        """intelrt's method × backend table (``intelrt.quantization.decide``) for the request and the
        checkpoint's own ``quantization_config``, on the facts the backend declares
        (:meth:`~intelrt.quantization.methods.Target.from_backend`); the auto and the forced case alike."""
        checkpoint = read_checkpoint_quantization(s.model.config, s.model.local_dir,
                                                  s.request.from_pretrained_kwargs.get("gguf_file"))
        return decide(s.request.quantization, checkpoint, Target.from_backend(backend),
                      dtype=str(s.decided.dtype or "float32"),
                      in_features=projection_inputs(s.model.config), env=s.env).decision()

    def select_parallelism(self, backend: Backend, s: Situation) -> Decision:
        return decide_parallelism(backend, s)

    def select_placement(self, backend: Backend, s: Situation) -> Decision:
        ranked = rank_placement(backend, s.decided, s.env)
        if ranked is not None:
            return ranked
        fits = fits_one_device(backend, s.model, bytes_per_parameter(s.decided))
        if fits is False and backend.device_count > 1:
            return Decision(Placement("auto"), f"the weights do not fit one {backend.name} device; accelerate splits "
                                               f"them across the {backend.device_count} visible devices")
        if fits is False:
            return Decision(Placement(backend.device_type), f"the weights may not fit the only {backend.name} device; "
                                                            "quantization='4bit' would shrink them",
                            notes=("expect an out-of-memory error at load time",))
        return Decision(Placement(backend.device_type), f"the model fits one {backend.name} device")

    def select_attention(self, backend: Backend, s: Situation) -> Decision:
        return attention_fallback(s.model) or Decision(
            "sdpa", "torch's scaled_dot_product_attention: available everywhere, no extra package")

    def select_kernels(self, backend: Backend, s: Situation) -> Decision:
        if s.request.kernels is True:
            if package_version("kernels") is None:
                raise PlanError("kernels=True needs the kernels package: pip install 'intelrt[kernels]'")
            problem = kernels_problem()
            if problem:
                raise PlanError(f"kernels=True cannot work: {problem}; or leave kernels to intelrt")
            return Decision(KernelChoice(True), "transformers' own hub-kernel mapping for the model's layers")
        return Decision(KernelChoice.off(), f"no hub-kernel mapping is known for {backend.name} that works offline")

    def select_compile(self, backend: Backend, s: Situation) -> Decision:
        return Decision(CompileChoice.off(),
                        f"not needed for {backend.name}: compile warm-up outweighs its gain for one-off runs")

    def select_decode(self, backend: Backend, s: Situation) -> Decision:
        return decide_decode(backend, s)

    def select_batching(self, backend: Backend, s: Situation) -> Decision:
        return decide_batching(backend, s)

    def select_buckets(self, backend: Backend, s: Situation) -> Decision | None:
        if s.request.buckets == "on":
            raise PlanError(f"buckets='on': the {backend.name} backend compiles no graph per input shape, so it pads "
                            "no shapes to buckets; leave buckets to intelrt")
        return None  # shapes are not padded: the plan leaves the decision out

    def select_collective(self, backend: Backend, s: Situation) -> Decision | None:
        """The collective library the backend declares (``Backend.sharding_support``), with its reason;
        without a usable one, none — a launched run (``WORLD_SIZE`` > 1) refused with why."""
        support = backend.sharding_support
        if support is UNDECLARED_SHARDING:
            return None  # no collective library known: the plan leaves the decision out
        if support.collective is None:
            if world_size(s.env) > 1:
                raise PlanError(f"WORLD_SIZE={s.env['WORLD_SIZE']}: {support.collective_missing}")
            return Decision(None, f"no collective backend: {support.collective_missing}", claim=support.claim,
                            notes=("single-process runs are unaffected",))
        return Decision(support.collective, support.collective_reason or
                        f"{support.collective} is the collective library {backend.name} declares",
                        claim=support.claim, notes=support.collective_notes)

    # -- forced values ------------------------------------------------------------------------
    def check_dtype(self, backend: Backend, value: str, s: Situation) -> Endorsement | None:
        if value not in DTYPES or value == AUTO:  # a plugin's answer; the user's was normalised already
            raise PlanError(f"dtype={value!r} is not one of {', '.join(d for d in DTYPES if d != AUTO)}")
        lacking = [d for d in backend.devices if d.bf16 is False] if value == "bfloat16" else []
        if lacking:
            raise PlanError(f"dtype='bfloat16', but {lacking[0].name} ({backend.name} device {lacking[0].index}) "
                            "has no bfloat16 support; use dtype='float16' or 'float32', or leave dtype to intelrt")
        return None

    def check_attention(self, backend: Backend, value: str, s: Situation) -> Endorsement | None:
        base = value.removeprefix("paged|")  # continuous batching's paged variant of the same kernel
        if base in NVIDIA_ONLY_ATTENTION:
            raise PlanError(f"attention={value!r}: FlashAttention-3 and -4 run only on NVIDIA GPUs, "
                            f"not on {backend.name}; use 'sdpa' (the default) or 'flash_attention_2'")
        if value not in KNOWN_ATTENTION and "/" not in value:
            raise PlanError(f"attention={value!r} is not an attention implementation; use one of "
                            f"{', '.join(KNOWN_ATTENTION)} or a hub kernel id 'org/repo'")
        if "/" in value:
            check_hub_kernel(value)
        return None

    def check_kernels(self, backend: Backend, value: KernelChoice, s: Situation) -> Endorsement | None:
        return None

    def check_compile(self, backend: Backend, value: CompileChoice, s: Situation) -> Endorsement | None:
        # the value, not the request's string: a plugin's choice is checked here too, under compile='auto'
        if not value.enabled:
            return None
        if value.compiler == backend.compiler:
            if s.request.compile != "on":
                return None
            return Endorsement(f"{value.compiler} is torch's default compiler" if value.compiler == "inductor"
                               else f"{value.compiler} is the compiler of {backend.name}")
        known = compile_backends()
        if known is not None and value.compiler not in known:
            shown = [name for name in known if not any(t in name for t in ("TESTING", "minifier", "debug"))]
            raise PlanError(f"compile={value.compiler!r} is not a torch.compile backend; use 'on' ({backend.compiler}), "
                            f"'none', or one of {', '.join(shown)}")
        return None

    # -- training -----------------------------------------------------------------------------
    def training_arguments(self, backend: Backend, plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
        check_training_overrides(backend, plan, overrides)
        settings: list[Setting] = []
        decided = plan.decided
        if "bf16" not in overrides and "fp16" not in overrides:
            if decided.dtype == "bfloat16":
                settings.append(Setting("bf16", True, "the plan's dtype is bfloat16"))
            elif decided.dtype == "float16" and backend.fp16_training:
                settings.append(Setting("fp16", True, "the plan's dtype is float16 (mixed precision)"))
        if decided.collective is not None and "ddp_backend" not in overrides:
            settings.append(Setting("ddp_backend", decided.collective, plan.decisions["collective"].reason))
        compiled = decided.compile
        if compiled is not None and compiled.enabled and "torch_compile" not in overrides:
            settings.append(Setting("torch_compile", True, "the plan compiles the model"))
            if compiled.compiler and "torch_compile_backend" not in overrides:
                settings.append(Setting("torch_compile_backend", compiled.compiler, "the plan's compile backend"))
        settings += [s for s in sharding_settings(plan, overrides) if s.name not in overrides]
        return settings


GENERIC = GenericRules()
"""The generic rules the host asks after the chosen backend."""
