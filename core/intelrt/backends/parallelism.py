"""Plan-time rules for the ``parallelism`` decision: how a run spreads over processes, one per
device, and what transformers receives for it.

intelrt plans the strategies; it runs none of them itself. Training: ``ddp`` is what ``Trainer``
does in every launched rank; ``fsdp`` is PyTorch's FSDP2, built by accelerate from
``TrainingArguments(fsdp=True, fsdp_config=...)`` (``_process_fsdp_args`` in transformers'
``training_args.py``) or, where accelerate cannot build it, by transformers as the weights load
(``DistributedConfig(fsdp_size=N)``); ``deepspeed`` is DeepSpeed ZeRO from
``TrainingArguments(deepspeed=...)``. Inference: ``tensor`` is transformers' own tensor parallel
plan (``DistributedConfig(tp_plan="auto")``, the model class's ``_tp_plan`` and its config's
``base_model_tp_plan``).

What differs per backend — the collective library, how FSDP2 is built, whether DeepSpeed and
tensor parallel run — is its :class:`~intelrt.hooks.backend.ShardingSupport`
(``Backend.sharding_support``), which :func:`decide_parallelism` reads. Pure: no torch, no device.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import PlanError
from ..hooks.backend import Backend, ShardingSupport, Situation
from ..hooks.concerns import Decided
from ..hooks.model import ModelInfo
from ..hooks.payloads import JSONValue, ParallelismChoice, Placement
from ..hooks.request import Request
from ..hooks.types import Decision
from ..support.distributed import is_distributed_launch, world_size
from ..support.units import format_bytes
from ..support.versions import package_version
from .sizing import FIT_HEADROOM, bytes_per_parameter, fits_one_device, smallest_device_memory

TRAINING_STATE_FACTOR = 4
"""Full fine-tuning with AdamW keeps the weights, their gradients and AdamW's two moments, each in
the weights' dtype (``Trainer`` trains the loaded dtype under autocast): 4 × the weights."""
CPU_RANKS = 2
"""Processes a CPU plan assumes outside a launch (CPU ranks are processes, not devices)."""
ZERO_STAGE_SHARDING_WEIGHTS = 3
ZERO_STAGE_SHARDING_STATE = 2
DEEPSPEED_DOCS = "https://huggingface.co/docs/transformers/deepspeed"


def planned_world_size(backend: Backend, request: Request, env: Mapping[str, str]) -> tuple[int, bool]:
    """``(processes, launched)``: in a launched rank, ``WORLD_SIZE``; else the devices a launch
    would use — the ``devices=`` named, every visible device, or :data:`CPU_RANKS` where ranks are
    processes rather than devices (the CPU)."""
    if is_distributed_launch(env):
        return world_size(env), True
    if request.devices:
        return len(request.devices), False
    if not backend.ranks_are_devices:
        return CPU_RANKS, False
    return max(backend.device_count, 1), False


def training_state_bytes(model: ModelInfo, decided: Decided) -> float | None:
    """What training keeps per replica: 4 × the weights for full fine-tuning with AdamW, the
    weights alone for QLoRA (the 4-bit base is frozen; the adapters are small); ``None`` unknown."""
    per_param = bytes_per_parameter(decided)
    if per_param is None or not model.parameter_count:
        return None
    weights = model.parameter_count * per_param
    if decided.quantization is not None:
        return weights
    return weights * TRAINING_STATE_FACTOR


def fsdp2_config() -> dict[str, JSONValue]:
    """``TrainingArguments(fsdp_config=...)`` for FSDP2: every decoder layer its own unit
    (``TRANSFORMER_BASED_WRAP`` falls back to the class's ``_no_split_modules``), parameters
    resharded after the forward, checkpoints sharded (one file per rank, resumable); the final model
    is gathered whole on rank 0 when it is saved."""
    return {"version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "SHARDED_STATE_DICT"}


def deepspeed_config(stage: int) -> dict[str, JSONValue]:
    """DeepSpeed ZeRO ``stage`` (2: optimizer state and gradients sharded; 3: the weights too), with
    transformers' ``"auto"`` values filled from ``TrainingArguments``, and ZeRO-3 gathering the
    weights when the model is saved (a normal safetensors directory)."""
    zero: dict[str, JSONValue] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {"zero_optimization": zero, "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
            "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}


def launch_command(backend: Backend, request: Request, world: int) -> str:
    """The ``intelrt launch`` line that starts ``world`` ranks of ``request`` on this machine."""
    argv = ["intelrt", "launch", "--nproc", str(world)]
    if request.devices:
        argv += ["--devices", ",".join(map(str, request.devices))]
    if request.is_forced("backend"):
        argv += ["--backend", backend.name]
    return " ".join(shlex.quote(a) for a in argv) + " your_script.py"


@dataclass(frozen=True)
class _Spread:
    """What the parallelism rule weighs: the situation, the backend's support and the world size."""

    backend: Backend
    request: Request
    model: ModelInfo
    decided: Decided
    support: ShardingSupport
    world: int
    launched: bool

    @property
    def where(self) -> str:
        one = "device" if self.backend.ranks_are_devices else f"{self.backend.name.upper()} rank"
        return f"{self.world} launched rank(s)" if self.launched else f"{self.world} process(es), one per {one}"


def _need_collective(s: _Spread, what: str) -> None:
    if s.support.collective is None:
        raise PlanError(f"{what} runs one process per device, joined by a collective library, and this "
                        f"{s.backend.name} run has none: {s.support.collective_missing}")


def _check_training(s: _Spread, strategy: str, forced: bool) -> None:
    """Refuse a training strategy this backend or this model cannot run, with the way out."""
    if strategy == "none":
        if forced and s.launched and s.world > 1:
            raise PlanError(f"sharding='none' trains in one process, but this process is one of {s.world} launched "
                            "ranks (Trainer would average their gradients, which is DDP): pass sharding='ddp', or run "
                            "the script without intelrt launch")
        return
    _need_collective(s, f"sharding={strategy!r}")
    quantization = s.decided.quantization
    if strategy == "fsdp":
        if s.support.fsdp is None:
            raise PlanError(f"sharding='fsdp' on {s.backend.name}: {s.support.fsdp_missing}")
        if quantization is not None and quantization.method == "bitsandbytes" and quantization.bits == 8:
            raise PlanError("sharding='fsdp' with bitsandbytes 8-bit weights: FSDP shards floating-point tensors only, "
                            "and bitsandbytes' 8-bit weights are int8 (PEFT lists 8-bit with FSDP as not recommended). "
                            "Train LoRA adapters on the 8-bit model with sharding='ddp', or use quantization='4bit' "
                            "with sharding='ddp'")
        if quantization is not None and quantization.method == "bitsandbytes":
            raise PlanError("sharding='fsdp' with bitsandbytes 4-bit weights: PEFT documents FSDP with QLoRA for FSDP1 "
                            "only (fsdp_use_orig_params=false and bnb_4bit_quant_storage in the weights' dtype), and "
                            "intelrt plans FSDP2, which transformers makes the default. The 4-bit base is small: train "
                            "QLoRA with sharding='ddp' (one copy per rank), or shard a bfloat16 model with "
                            "sharding='fsdp' and lora=True")
        if quantization is not None and not quantization.dequantized:
            raise PlanError(f"sharding='fsdp' with {quantization.method} {quantization.bits}-bit weights: intelrt plans "
                            "FSDP2 over floating-point weights only (its FSDP2 is tested with them; PEFT documents QLoRA "
                            "with FSDP for bitsandbytes and FSDP1 only). Train "
                            "LoRA adapters on the quantized model with sharding='ddp', or shard an unquantized model "
                            "with sharding='fsdp' and lora=True")
    if strategy == "deepspeed":
        if s.support.deepspeed_missing is not None:
            raise PlanError(f"sharding='deepspeed' on {s.backend.name}: {s.support.deepspeed_missing}")
        if package_version("deepspeed") is None:
            raise PlanError(f"sharding='deepspeed' needs DeepSpeed, which is not installed: "
                            f"{s.support.deepspeed_install} (transformers' DeepSpeed integration: {DEEPSPEED_DOCS}); "
                            "or pass sharding='fsdp' (PyTorch FSDP2, no extra package)")


def _zero_stage(s: _Spread) -> tuple[int, str]:
    """ZeRO-3 when the weights and their gradients alone do not fit one device; else ZeRO-2."""
    per_param = bytes_per_parameter(s.decided)
    memory = smallest_device_memory(s.backend)
    if per_param and memory and s.model.parameter_count:
        weights_and_grads = 2 * s.model.parameter_count * per_param
        if weights_and_grads * FIT_HEADROOM > memory:
            return ZERO_STAGE_SHARDING_WEIGHTS, (f"ZeRO-3: the weights and gradients alone ({format_bytes(weights_and_grads)}) "
                                                 f"do not fit one device ({format_bytes(memory)}), so the weights are "
                                                 "sharded too")
    return ZERO_STAGE_SHARDING_STATE, "ZeRO-2: optimizer state and gradients sharded, the weights replicated"


def _auto_training(s: _Spread) -> tuple[str, str]:
    """The training strategy and why, from the training state, device memory and world size."""
    if s.support.collective is None:  # the collective decision refuses a launch without one, in its words
        return "none", f"no collective library joins the ranks: {s.support.collective_missing}"
    state = training_state_bytes(s.model, s.decided)
    memory = smallest_device_memory(s.backend)
    fits = None if state is None or memory is None else state * FIT_HEADROOM <= memory
    size = (f"training state about {format_bytes(state)} (x{FIT_HEADROOM} headroom) vs "
            f"{format_bytes(memory)} per device" if state is not None and memory is not None else "")
    if s.launched and s.world > 1:
        if fits is False:
            return _sharded(s), f"{size}: it does not fit one device, so it is sharded across the {s.where}"
        why = size + ": it fits one device" if fits else "the training state fits one device or its size is unknown"
        return "ddp", f"{why}; each of the {s.where} trains a replica on its share of every batch (DDP)"
    if fits is False and s.world > 1 and s.support.collective is not None:
        # outside a launch the plan stays one process (the load must still work here); it says how to shard
        try:
            then = f"auto then picks sharding={_sharded(s)!r}"
        except PlanError as exc:
            then = str(exc)
        return "none", (f"{size}: it does not fit one device; to shard it across {s.where}, start the script with "
                        f"{launch_command(s.backend, s.request, s.world)} ({then})")
    if fits is False:
        return "none", f"{size}: it may not fit the one device, and there is no other to shard it across"
    return "none", "one process trains" + (f" ({size}: it fits one device)" if fits else "")


def _sharded(s: _Spread) -> str:
    if s.support.prefer_deepspeed and s.support.deepspeed_missing is None and package_version("deepspeed"):
        return "deepspeed"
    if s.support.fsdp is not None:
        return "fsdp"
    if s.support.deepspeed_missing is None and package_version("deepspeed"):
        return "deepspeed"
    raise PlanError(f"the training state does not fit one {s.backend.name} device and nothing here shards it: "
                    f"{s.support.fsdp_missing}; install DeepSpeed ({s.support.deepspeed_install}), or train LoRA "
                    "adapters on a 4-bit model (quantization='4bit', lora=True)")


def _tensor_blocker(s: _Spread) -> str | None:
    """Why transformers' tensor parallel plan cannot shard this model over ``s.world`` ranks."""
    if s.support.tensor_missing is not None:
        return s.support.tensor_missing
    if s.support.collective is None:
        return s.support.collective_missing
    if not s.request.has_model:
        return None
    arch = s.model.architecture
    if arch is None:
        return ("the model's class is its own code (or unknown to transformers), so intelrt cannot tell whether it "
                "has a tensor parallel plan")
    if not arch.tensor_parallel:
        return (f"{arch.name} has no tensor parallel plan in transformers (no _tp_plan on the class, no "
                "base_model_tp_plan in its config)")
    text = s.model.config.get("text_config") or s.model.config
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = text.get(key)
        if isinstance(heads, int) and heads % s.world:
            return f"{key}={heads} is not divisible by {s.world} ranks: each rank must hold whole heads"
    return None


def _inference(s: _Spread) -> tuple[str, str]:
    """The inference strategy and why. It decides how the weights load, so ``auto`` picks tensor
    parallel only when the user asked for no training strategy."""
    forced = s.request.parallel
    if forced == "tensor":
        blocker = _tensor_blocker(s)
        if blocker is not None:
            raise PlanError(f"parallel='tensor' on {s.backend.name}: {blocker}. Load with parallel='none' (one "
                            "process holds the whole model), or quantization='4bit' to shrink it")
        if s.world < 2:
            raise PlanError(f"parallel='tensor' splits the weights across processes, and this run has {s.world}: start "
                            "it with intelrt launch --nproc N (N >= 2)")
        if s.request.sharding not in ("auto", "none"):
            raise PlanError(f"parallel='tensor' loads the weights split for inference, and sharding="
                            f"{s.request.sharding!r} trains a model each rank loads whole or as FSDP shards: pass one "
                            "of them (to train, parallel='none')")
        return "tensor", f"parallel='tensor': transformers' tensor parallel plan across {s.where}"
    if forced == "none":
        return "none", "parallel='none': each process holds the whole model"
    fits = fits_one_device(s.backend, s.model, bytes_per_parameter(s.decided)) if s.request.has_model else None
    if not (s.launched and s.world > 1 and fits is False):
        return "none", "each process holds the whole model" + (" (it fits one device)" if fits else "")
    if s.request.sharding != "auto":
        return "none", f"the weights load as sharding={s.request.sharding!r} needs them"
    blocker = _tensor_blocker(s)
    if blocker is not None:
        return "none", f"the weights do not fit one device, but tensor parallel cannot split them: {blocker}"
    return "tensor", (f"the weights do not fit one device: transformers' tensor parallel plan splits every layer "
                      f"across the {s.where} (to train instead, load with parallel='none')")


def _fsdp_way(s: _Spread) -> tuple[str, str]:
    """How FSDP2 is built here: accelerate shards a model every rank loaded whole, so when the
    weights alone do not fit one device transformers shards them as they load instead."""
    way = s.support.fsdp
    assert way is not None  # refused before
    fits = fits_one_device(s.backend, s.model, bytes_per_parameter(s.decided)) if s.request.has_model else None
    if way == "accelerate" and fits is False:
        return "transformers", ("the weights alone do not fit one device, and accelerate's FSDP2 shards a model each "
                                "rank has loaded whole, so transformers shards them as they load: from_pretrained("
                                "distributed_config=DistributedConfig(fsdp_size=N)); transformers checkpoints no "
                                "optimizer state for such a model")
    return way, s.support.fsdp_source


def decide_parallelism(backend: Backend, situation: Situation, support: ShardingSupport | None = None) -> Decision:
    r"""The parallelism decision on ``backend`` with what it runs (``support``, default its
    ``sharding_support``; a plugin's override may pass its own): the user's
    ``sharding`` / ``parallel`` when forced (refused with the way out when this backend or this
    model cannot run it), else chosen from the training state, device memory and world size.

    The inference strategy decides how the weights load: tensor parallel leaves no training
    strategy (``Loaded.train`` refuses a tensor-parallel model), and FSDP2 built as the weights
    load serves generation too."""
    request, model, decided = situation.request, situation.model, situation.decided
    support = support or backend.sharding_support
    world, launched = planned_world_size(backend, request, situation.env)
    s = _Spread(backend, request, model, decided, support, world, launched)
    inference, inference_why = _inference(s)
    if inference == "tensor":
        training, why = "none", "the weights load tensor-parallel, for inference; to train, load with parallel='none'"
    elif request.sharding != "auto":
        training, why = request.sharding, f"sharding={request.sharding!r}"
        _check_training(s, training, forced=True)
    else:
        training, why = _auto_training(s)
        _check_training(s, training, forced=False)
    notes = list(support.notes)
    fsdp_config: dict[str, JSONValue] | None = None
    deepspeed: dict[str, JSONValue] | None = None
    distributed: dict[str, JSONValue] | None = None
    if training == "fsdp":
        way, source = _fsdp_way(s)
        why += f"; {source}"
        if way == "accelerate":
            fsdp_config = fsdp2_config()
        else:
            distributed = {"fsdp_size": world}
    elif training == "deepspeed":
        stage, stage_why = _zero_stage(s)
        deepspeed = deepspeed_config(stage)
        why += f"; {stage_why}"
    if inference == "tensor":
        distributed = {"tp_plan": "auto", "tp_size": world}
    state, memory = training_state_bytes(model, decided), smallest_device_memory(backend)
    if training in ("none", "ddp") and request.sharding == "auto" and state and memory:
        notes.append("the estimate is for full fine-tuning with AdamW (weights, gradients and two moments); "
                     "LoRA adapters need little more than the weights")
    processes = training != "none" or inference != "none"
    launch = launch_command(backend, request, world) if processes and not launched else None
    choice = ParallelismChoice(training, inference, world if processes else 1, fsdp_config=fsdp_config,
                               deepspeed=deepspeed, distributed_config=distributed, launch=launch)
    if launch:
        notes.append(f"start the ranks with: {launch}")
    if processes and support.collective:
        notes.append(f"the ranks join a {support.collective} process group")
    reason = f"training: {why}; inference: {inference_why}"
    return Decision(choice, reason, claim=support.claim, notes=tuple(notes))


def rank_placement(backend: Backend, decided: Decided, env: Mapping[str, str]) -> Decision | None:
    """The placement of a launched rank, or ``None`` when this process is not one (a backend's
    placement rule asks this first). Weights sharded as they load have no ``device_map``
    (transformers places each rank's shard; it refuses one with tensor parallel); otherwise the
    rank loads onto its own device, ``{device}:LOCAL_RANK`` — every rank sees the same devices and
    picks its own, as accelerate and ``Trainer`` do — or the bare device type where a process
    drives only one (``Backend.indexed_devices`` False, Gaudi)."""
    choice = decided.parallelism
    if choice is not None and choice.sharded_load:
        return Decision(Placement(None), "the weights are sharded across the ranks as they load "
                                         "(from_pretrained(distributed_config=...)): transformers puts each rank's "
                                         "shard on its own device, so no device_map applies")
    local = env.get("LOCAL_RANK", "")
    if not backend.ranks_are_devices or not is_distributed_launch(env) or not (local.isascii() and local.isdigit()):
        return None
    device = f"{backend.device_type}:{int(local)}" if backend.indexed_devices else backend.device_type
    return Decision(Placement(device), f"this process is rank {env.get('RANK', local)} of a launched job: it loads "
                                       f"onto its own device ({device}, by LOCAL_RANK {local}), the one accelerate "
                                       "and Trainer then use; every rank sees the same devices")
