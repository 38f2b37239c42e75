"""Generic decisions for any backend (``trylast``): a backend plugin overrides what it knows
better. Every answer says why, so a plan never holds an unexplained value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..decoding.policy import (
    continuous_blocker,
    decode_attention_kernel,
    decode_blockers,
    decode_graphs,
    fast_decode_planned,
    plain_generate,
    sharded_blocker,
)
from ..errors import PlanError
from ..hooks.markers import hookimpl
from ..hooks.payloads import (
    BatchingChoice,
    CompileChoice,
    DecisionValue,
    KernelChoice,
    ParallelismChoice,
    QuantizationChoice,
)
from ..hooks.types import BackendStatus, Decision, Setting
from ..support.hubcache import hub_offline, is_repo_cached
from ..support.versions import kernels_problem, package_version
from .parallelism import ShardingSupport, decide_parallelism, rank_placement
from .sizing import bytes_per_parameter, fits_one_device

if TYPE_CHECKING:
    from ..planning.model_source import ModelInfo
    from ..planning.plan import Plan
    from ..planning.request import Request

KNOWN_ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4",
                   "flex_attention", "paged|sdpa", "paged|eager", "paged|flash_attention_2")
NVIDIA_ONLY_ATTENTION = ("flash_attention_3", "flash_attention_4")
DEFAULT_MAX_PADDED_BATCH = 64
"""Prompts per padded batch when a backend does not size it; longer lists go in several batches."""


@hookimpl(trylast=True)
def intelrt_select_dtype(backend: BackendStatus, request: Request) -> Decision:
    if request.is_forced("dtype"):
        lacking = [d for d in backend.devices if d.bf16 is False] if request.dtype == "bfloat16" else []
        if lacking:
            raise PlanError(f"dtype='bfloat16', but {lacking[0].name} ({backend.name} device {lacking[0].index}) "
                            "has no bfloat16 support; use dtype='float16' or 'float32', or leave dtype to intelrt")
        return Decision(request.dtype, "requested by the user")
    if backend.device_type == "cpu":
        return Decision("float32", "CPU: float32 is exact and fast on every CPU; pass dtype='bfloat16' to halve memory")
    if backend.devices and all(d.bf16 for d in backend.devices):
        return Decision("bfloat16", f"every visible {backend.name} device supports bfloat16")
    if backend.devices and any(d.bf16 is False for d in backend.devices):
        return Decision("float16", f"a visible {backend.name} device lacks bfloat16; float16 keeps half the memory")
    return Decision("float32", f"bfloat16 support of {backend.name} is unknown; float32 is the safe choice")


@hookimpl(trylast=True)
def intelrt_select_parallelism(backend: BackendStatus, request: Request, model: ModelInfo, env: Mapping[str, str],
                               decisions: Mapping[str, DecisionValue]) -> Decision:
    """A backend whose plugin declares no collective library: one process, nothing sharded."""
    unknown = ShardingSupport(None, collective_missing=f"no plugin declares the collective library of {backend.name} "
                                                       "(its plugin answers intelrt_select_parallelism)",
                              fsdp=None, fsdp_missing="no plugin says how FSDP2 runs there",
                              deepspeed_missing="no plugin says whether DeepSpeed runs there",
                              tensor_missing="no plugin says whether tensor parallel runs there")
    return decide_parallelism(backend, request, model, env, decisions, unknown)


@hookimpl(trylast=True)
def intelrt_select_placement(backend: BackendStatus, model: ModelInfo, env: Mapping[str, str],
                             decisions: Mapping[str, DecisionValue]) -> Decision:
    ranked = rank_placement(backend, decisions, env)
    if ranked is not None:
        return ranked
    fits = fits_one_device(backend, model, bytes_per_parameter(decisions))
    if fits is False and backend.device_count > 1:
        return Decision("auto", f"the weights do not fit one {backend.name} device; accelerate splits them "
                                f"across the {backend.device_count} visible devices")
    if fits is False:
        return Decision(backend.device_type, f"the weights may not fit the only {backend.name} device; "
                                             "quantization='4bit' would shrink them",
                        notes=("expect an out-of-memory error at load time",))
    return Decision(backend.device_type, f"the model fits one {backend.name} device")


def attention_fallback(model: ModelInfo, preferred: str = "sdpa") -> Decision | None:
    """The attention decision when the model's class cannot run ``preferred`` (``None`` when it can):
    transformers' eager attention, with the class named, or — for remote code, whose class is known
    only once its code runs — ``None``, leaving the choice to transformers (sdpa where the class
    supports it, else eager). A backend's attention hook asks this before answering ``preferred``."""
    arch = model.architecture
    if arch is None:
        return Decision(None, "the model's class is defined by its own code (or unknown to transformers), so "
                              "transformers picks at load time: sdpa where the class supports it, else eager")
    if arch.supports(preferred):
        return None
    return Decision("eager", f"{arch.name} does not support {preferred} (it supports {', '.join(arch.attention)}); "
                             "eager is transformers' own attention for it")


@hookimpl(trylast=True)
def intelrt_select_attention(backend: BackendStatus, request: Request, model: ModelInfo) -> Decision:
    if request.is_forced("attention"):
        wanted = request.attention
        base = wanted.removeprefix("paged|")  # continuous batching's paged variant of the same kernel
        if base in NVIDIA_ONLY_ATTENTION and backend.device_type != "cuda":
            raise PlanError(f"attention={wanted!r}: FlashAttention-3 and -4 run only on NVIDIA GPUs, "
                            f"not on {backend.name}; use 'sdpa' (the default) or 'flash_attention_2'")
        if base == "flash_attention_2" and backend.device_type == "cpu":
            raise PlanError(f"attention={wanted!r} needs a GPU; on the CPU use 'sdpa' (the default) or 'eager'")
        if wanted not in KNOWN_ATTENTION and "/" not in wanted:
            raise PlanError(f"attention={wanted!r} is not an attention implementation; use one of "
                            f"{', '.join(KNOWN_ATTENTION)} or a hub kernel id 'org/repo'")
        if "/" in wanted:
            _check_hub_kernel(wanted)
        return Decision(wanted, "requested by the user")
    return attention_fallback(model) or Decision(
        "sdpa", "torch's scaled_dot_product_attention: available everywhere, no extra package")


def _check_hub_kernel(repo: str) -> None:
    """A hub kernel id as attention: transformers must be able to use ``kernels``, and offline the
    kernel must be cached already (SPEC C4)."""
    problem = kernels_problem()
    if problem:
        raise PlanError(f"attention={repo!r} is a hub kernel, and {problem}; or use attention='sdpa'")
    if hub_offline() and not (is_repo_cached(repo, "kernel") or is_repo_cached(repo, "model")):
        raise PlanError(f"attention={repo!r}: HF_HUB_OFFLINE is set and the kernel is not in the local hub cache; "
                        "download it once with network, or use attention='sdpa'")


@hookimpl(trylast=True)
def intelrt_select_kernels(backend: BackendStatus, request: Request) -> Decision:
    if request.kernels is True:
        if package_version("kernels") is None:
            raise PlanError("kernels=True needs the kernels package: pip install 'intelrt[kernels]'")
        problem = kernels_problem()
        if problem:
            raise PlanError(f"kernels=True cannot work: {problem}; or leave kernels to intelrt")
        return Decision(KernelChoice(True), "requested by the user")
    reason = "turned off by the user" if request.kernels is False else (
        f"no hub-kernel mapping is known for {backend.name} that works offline")
    return Decision(KernelChoice.off(), reason)


@hookimpl(trylast=True)
def intelrt_select_quantization(backend: BackendStatus, request: Request,
                                decisions: Mapping[str, DecisionValue]) -> Decision:
    if request.quantization is None:
        return Decision(None, "not requested")
    version = package_version("bitsandbytes")
    if version is None:
        raise PlanError(f"quantization={request.quantization!r} uses bitsandbytes, which is not installed: "
                        "pip install 'intelrt[bitsandbytes]'")
    return Decision(bitsandbytes_choice(request.quantization, decisions),
                    f"bitsandbytes {version} {request.quantization} on {backend.name}")


def bitsandbytes_choice(quantization: str, decisions: Mapping[str, DecisionValue]) -> QuantizationChoice:
    """bitsandbytes at ``quantization`` (``4bit``: NF4 with double quantization, matmuls in the
    plan's dtype; ``8bit``: LLM.int8)."""
    if quantization != "4bit":
        return QuantizationChoice("bitsandbytes", 8)
    dtype = decisions.get("dtype")
    compute = dtype if dtype in ("bfloat16", "float16") else "float32"
    return QuantizationChoice("bitsandbytes", 4, quant_type="nf4", compute_dtype=str(compute), double_quant=True)


def compile_backends() -> list[str] | None:
    """The ``torch.compile`` backends registered in this process (entry-point ones included), or
    ``None`` without torch. Imports torch's compiler (about a second): asked only for a named backend."""
    try:
        from torch._dynamo.backends.registry import list_backends
    except ImportError:
        return None
    return list(list_backends(exclude_tags=()))


@hookimpl(trylast=True)
def intelrt_select_compile(backend: BackendStatus, request: Request) -> Decision:
    choice = request.compile
    if choice == "none":
        return Decision(CompileChoice.off(), "turned off by the user")
    if choice == "on":
        return Decision(CompileChoice(True, "inductor"), "requested by the user; inductor is torch's default compiler")
    if choice != "auto":
        known = compile_backends()
        if known is not None and choice not in known:
            shown = [name for name in known if not any(t in name for t in ("TESTING", "minifier", "debug"))]
            raise PlanError(f"compile={choice!r} is not a torch.compile backend; use 'on' (inductor), 'none', or "
                            f"one of {', '.join(shown)}")
        return Decision(CompileChoice(True, choice), "requested by the user")
    return Decision(CompileChoice.off(),
                    f"not needed for {backend.name}: compile warm-up outweighs its gain for one-off runs")


@hookimpl(trylast=True)
def intelrt_select_decode(backend: BackendStatus, request: Request, model: ModelInfo,
                          decisions: Mapping[str, DecisionValue]) -> Decision:
    blocker = decode_blockers(model, decisions)
    if blocker is not None:
        for option in ("graphs", "attention_kernel"):
            if getattr(request, option) == "on":
                raise PlanError(f"{option}='on' needs intelrt's fast decode loop, but {blocker}")
        return plain_generate(blocker)
    decode_graphs(request, backend, None, f"{backend.name} names no device graphs for decoding")
    decode_attention_kernel(request, False, f"{backend.name} declares no fast decode path", "compact")
    return plain_generate(f"{backend.name} declares no fast decode path (no plugin answered for it), "
                          "so transformers' generate decodes")


CONTINUOUS_ATTENTION = ("sdpa", "eager", "paged|eager")
"""What transformers' continuous batching runs besides flash implementations
(``ContinuousBatchingManager.switch_to_cb_friendly_attn``: eager becomes ``paged|eager``)."""


def continuous_batching_blocker(decisions: Mapping[str, DecisionValue]) -> str | None:
    """Why transformers' continuous batching cannot run the plan's attention (``None`` when it can)."""
    attention = str(decisions.get("attention") or "sdpa")
    if attention in CONTINUOUS_ATTENTION or "flash" in attention:
        return None
    return f"attention {attention!r}: it runs 'sdpa', 'eager', 'paged|eager' or a flash implementation"


def padded_generate_instead(request: Request, model: ModelInfo, decisions: Mapping[str, DecisionValue],
                            max_batch: int = DEFAULT_MAX_PADDED_BATCH) -> Decision | None:
    """The batching decision when transformers' continuous batching cannot run the model while the
    fast loop is off, or cannot run the plan's attention at all (``None`` when it can): padded
    batches, through the fast loop when it is planned, else through transformers' ``generate``.
    ``batching='continuous'`` forced for such a model is refused. A backend's batching hook asks this
    before answering continuous batching."""
    fast = fast_decode_planned(decisions)
    blocker = continuous_batching_blocker(decisions) or (None if fast else sharded_blocker(decisions) or continuous_blocker(model))
    if blocker is None:
        return None
    if request.batching == "continuous":
        raise PlanError(f"batching='continuous': transformers' continuous batching cannot run this model ({blocker}); "
                        "use batching='padded' or leave batching to intelrt")
    through = "the fast decode loop" if fast else "transformers' generate"
    return Decision(BatchingChoice.padded("fast" if fast else "generate", max_batch),
                    f"padded batches of up to {max_batch} prompts through {through}: continuous batching cannot run "
                    f"this model ({blocker})" + ("" if fast else " and the fast decode loop is off"))


@hookimpl(trylast=True)
def intelrt_select_batching(backend: BackendStatus, request: Request, model: ModelInfo,
                            decisions: Mapping[str, DecisionValue]) -> Decision:
    graphs = {"on": True, "off": False}.get(request.graphs)
    fast = fast_decode_planned(decisions)
    engine = "fast" if fast else "generate"
    fallback = padded_generate_instead(request, model, decisions) if request.batching != "padded" else None
    if fallback is not None:
        return fallback
    if request.batching == "padded":
        return Decision(BatchingChoice.padded(engine, DEFAULT_MAX_PADDED_BATCH),
                        f"requested by the user; padded batches of up to {DEFAULT_MAX_PADDED_BATCH} prompts "
                        f"through {'the fast decode loop' if fast else 'transformers generate'}")
    reason = "requested by the user" if request.batching == "continuous" else (
        "transformers' continuous batching schedules many prompts better than one padded batch")
    notes: tuple[str, ...] = () if graphs is not None else ("graphs and async batching left to transformers' auto",)
    if fast and request.batching == "auto":
        notes += ("batching='padded' sends a list through the fast decode loop instead",)
    return Decision(BatchingChoice.continuous(use_graphs=graphs), reason, claim="X7", notes=notes)


@hookimpl(trylast=True)
def intelrt_select_collective(backend: BackendStatus) -> Decision | None:
    if backend.device_type == "cpu":
        return Decision("gloo", "gloo is torch.distributed's CPU backend")
    return None


#: Collective backends that work only on one kind of device.
DEVICE_COLLECTIVES = {"nccl": "cuda", "xccl": "xpu", "hccl": "hpu"}


def check_training_overrides(backend: BackendStatus, plan: Plan, overrides: Mapping[str, Any]) -> None:
    """Refuse a user's TrainingArguments keyword that cannot work on ``backend`` (before
    transformers raises its own, less specific error)."""
    if overrides.get("bf16") is True:
        lacking = [d for d in backend.devices if d.bf16 is False]
        if lacking:
            raise PlanError(f"bf16=True, but {lacking[0].name} ({backend.name} device {lacking[0].index}) has no "
                            "bfloat16 support; pass fp16=True, or leave precision to intelrt")
    wanted = overrides.get("ddp_backend")
    device = DEVICE_COLLECTIVES.get(str(wanted))
    if device is not None and device != backend.device_type:
        ours = plan.value("collective")
        fix = f"pass ddp_backend={ours!r} or leave it to intelrt" if ours else "leave ddp_backend unset"
        raise PlanError(f"ddp_backend={wanted!r} runs only on {device} devices, and this run is on "
                        f"{backend.name}; {fix}")
    _check_sharding_overrides(plan, overrides)
    if overrides.get("use_cpu") is True and backend.device_type != "cpu":
        raise PlanError(f"use_cpu=True contradicts the plan, which runs on {backend.name}; pass backend='cpu' to "
                        "intelrt instead, so precision and the collective backend follow the CPU")


#: TrainingArguments keywords that choose a sharding strategy, and the strategy each belongs to.
SHARDING_KEYWORDS = {"fsdp": "fsdp", "fsdp_config": "fsdp", "deepspeed": "deepspeed"}


def _check_sharding_overrides(plan: Plan, overrides: Mapping[str, Any]) -> None:
    """A user's ``fsdp=`` / ``fsdp_config=`` / ``deepspeed=`` must agree with the plan's strategy
    (else one would be silently ignored, or both fight over the model)."""
    choice = plan.value("parallelism")
    training = choice.training if isinstance(choice, ParallelismChoice) else "none"
    for keyword, strategy in SHARDING_KEYWORDS.items():
        if overrides.get(keyword) in (None, False, "", {}):
            continue
        if training != strategy:
            raise PlanError(f"{keyword}= configures sharding={strategy!r}, and the plan trains with "
                            f"sharding={training!r}; pass sharding={strategy!r} to intelrt (it then generates the "
                            f"{keyword} settings, and yours still win), or drop {keyword}=")
        if strategy == "fsdp" and isinstance(choice, ParallelismChoice) and choice.sharded_load:
            raise PlanError(f"{keyword}= configures accelerate's FSDP, and on {plan.backend.name} the plan's FSDP2 is "
                            "transformers' own, sharding the weights as they load (accelerate builds no FSDP there); "
                            f"drop {keyword}=")


def sharding_settings(plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
    """The ``TrainingArguments`` keywords of the plan's training strategy: ``fsdp`` and
    ``fsdp_config`` (accelerate's FSDP2), ``deepspeed``, or — for weights sharded as they load,
    whose optimizer state transformers does not checkpoint — ``save_only_model``."""
    choice = plan.value("parallelism")
    if not isinstance(choice, ParallelismChoice):
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


@hookimpl(trylast=True)
def intelrt_training_arguments(backend: BackendStatus, plan: Plan, overrides: Mapping[str, Any]) -> list[Setting]:
    check_training_overrides(backend, plan, overrides)
    settings: list[Setting] = []
    dtype = plan.value("dtype")
    if "bf16" not in overrides and "fp16" not in overrides:
        if dtype == "bfloat16":
            settings.append(Setting("bf16", True, "the plan's dtype is bfloat16"))
        elif dtype == "float16" and backend.device_type != "cpu":
            settings.append(Setting("fp16", True, "the plan's dtype is float16 (mixed precision)"))
    if backend.device_type == "cpu" and "use_cpu" not in overrides:
        settings.append(Setting("use_cpu", True, "the plan runs on the CPU"))
    collective = plan.value("collective")
    if isinstance(collective, str) and "ddp_backend" not in overrides:
        settings.append(Setting("ddp_backend", collective, plan.decisions["collective"].reason))
    compiled = plan.compile_choice
    if compiled is not None and compiled.enabled and "torch_compile" not in overrides:
        settings.append(Setting("torch_compile", True, "the plan compiles the model"))
        if compiled.backend and "torch_compile_backend" not in overrides:
            settings.append(Setting("torch_compile_backend", compiled.backend, "the plan's compile backend"))
    settings += [s for s in sharding_settings(plan, overrides) if s.name not in overrides]
    return settings
