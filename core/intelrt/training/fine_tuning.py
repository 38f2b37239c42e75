"""``Loaded.train``: fine-tune a loaded causal LM, seq2seq model or token classifier with
transformers' ``Trainer`` (``Seq2SeqTrainer`` for seq2seq) — whole, or LoRA adapters through PEFT
(QLoRA when the model was loaded in 4-bit, SPEC X9/H7) — or LoRA adapters on the language model of
a vision-language model, and save what was trained so ``intelrt.load(output_dir)`` loads it back
(what each head reads and how it is batched: :mod:`intelrt.training.heads`).

Nothing here is a training loop of its own: ``Trainer`` trains, checkpoints and resumes; intelrt
prepares its arguments from the plan (:mod:`intelrt.training.arguments`), the data and the adapters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.sizing import model_positions
from ..errors import ConfigurationError, IntelrtError, SaveError
from ..hooks.options import AUTO
from ..hooks.payloads import ParallelismChoice
from ..quantization.lora import require_lora
from ..support.redaction import redact_text
from .arguments import (
    USER,
    TrainingSetting,
    build_training_arguments,
    parallelism_of,
    training_settings,
    with_sharding,
)
from .data import DEFAULT_BLOCK_SIZE, ModelLimits, causal_lm_blocks
from .divergence import Divergence, diverged_error, divergence_guard, non_finite_weight
from .heads import (
    CAUSAL,
    LORA_TASK_TYPES,
    SEQ2SEQ,
    TOKENS,
    VISION_LANGUAGE,
    VisionLanguageCollator,
    language_model_linears,
    seq2seq_examples,
    token_examples,
    training_kind,
    vision_language_rows,
)
from .locking import hold_output_dir, is_main_process, refuse_if_held
from .output_dir import (
    clean_debris,
    refuse_content,
    refuse_the_models_own_directory,
    remove_earlier_checkpoints,
)
from .resuming import resume_checkpoint
from .saving import (
    check_writable,
    discard_incomplete,
    last_complete_checkpoint,
    save_model_atomically,
    write_json_atomically,
)

log = logging.getLogger(__name__)

#: ``lora=True``: a small adapter on every linear layer (PEFT's ``all-linear`` skips the output head).
DEFAULT_LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all-linear"}
#: Defaults intelrt picks for ``Trainer`` (each can be overridden by keyword).
DEFAULT_TRAINING = {"logging_steps": 1, "report_to": "none", "per_device_train_batch_size": 8}
LORA_LEARNING_RATE = 2e-4  # PEFT's usual LoRA rate; transformers' 5e-5 barely moves adapters


@dataclass(frozen=True)
class TrainResult:
    """What a ``train()`` call did: losses, steps, time and where it saved."""

    output_dir: str
    adapter: bool
    """True when LoRA adapters were trained (and saved), False for the whole model."""
    quantized: bool
    steps: int
    epochs: float
    seconds: float
    losses: tuple[tuple[int, float], ...]
    """(step, loss) as ``Trainer`` logged them (every ``logging_steps``)."""
    mean_loss: float
    trainable_parameters: int
    total_parameters: int
    examples: int
    resumed_from: str | None = None
    settings: tuple[TrainingSetting, ...] = field(default=())
    truncated_rows: int = 0
    """Rows of token ids cut to the model's length (``max_position_embeddings``)."""
    sharding: str = "none"
    """How training spread over the ranks: ``none``, ``ddp``, ``fsdp`` or ``deepspeed``."""
    world_size: int = 1

    @property
    def first_loss(self) -> float:
        return self.losses[0][1] if self.losses else float("nan")

    @property
    def final_loss(self) -> float:
        return self.losses[-1][1] if self.losses else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"output_dir": self.output_dir, "adapter": self.adapter, "quantized": self.quantized,
                "steps": self.steps, "epochs": self.epochs, "seconds": round(self.seconds, 3),
                "first_loss": self.first_loss, "final_loss": self.final_loss, "mean_loss": self.mean_loss,
                "losses": [list(x) for x in self.losses], "trainable_parameters": self.trainable_parameters,
                "total_parameters": self.total_parameters, "examples": self.examples,
                "truncated_rows": self.truncated_rows, "resumed_from": self.resumed_from,
                "sharding": self.sharding, "world_size": self.world_size,
                "settings": [s.to_dict() for s in self.settings]}

    def __str__(self) -> str:
        what = ("QLoRA adapters" if self.quantized else "LoRA adapters") if self.adapter else "the whole model"
        share = 100.0 * self.trainable_parameters / max(self.total_parameters, 1)
        lines = [f"trained {what}: {self.trainable_parameters:,} of {self.total_parameters:,} parameters ({share:.2f}%)",
                 f"  loss      {self.first_loss:.4f} -> {self.final_loss:.4f} (mean {self.mean_loss:.4f})",
                 f"  steps     {self.steps} ({self.epochs:g} epochs over {self.examples} blocks"
                 + (f"; {self.truncated_rows} rows truncated to the model's length)" if self.truncated_rows else ")"),
                 f"  time      {self.seconds:.1f} s"]
        if self.world_size > 1:
            lines.append(f"  ranks     {self.world_size} ({self.sharding})")
        if self.resumed_from:
            lines.append(f"  resumed   from {self.resumed_from}")
        lines.append(f"  saved to  {self.output_dir}" + (" (adapter; intelrt.load() it directly)" if self.adapter else ""))
        ours = [s for s in self.settings if s.source != USER]
        if ours:
            lines.append("  settings  " + "; ".join(f"{s.name}={s.shown_value!r} ({s.reason})" for s in ours))
        return "\n".join(lines)


PEFT_MISSING = ("lora= trains LoRA adapters with PEFT, which is not installed: pip install 'intelrt[peft]' "
                "(peft>=0.15), or leave lora unset to train the whole model")


def _peft() -> Any:
    """The ``peft`` module, or ``None`` when it is not installed (full training does not need it)."""
    try:
        import peft
    except ImportError:
        return None
    return peft


def _lora_config(lora: object, kind: str = CAUSAL, model: Any = None) -> Any:
    """``lora=True``: :data:`DEFAULT_LORA` with PEFT's task type for ``kind`` (on a vision-language
    model, on its language model's linear layers only); a ``peft.LoraConfig`` as given."""
    from peft import LoraConfig

    if lora is True:
        settings: dict[str, Any] = dict(DEFAULT_LORA)
        if kind == VISION_LANGUAGE:
            settings["target_modules"] = language_model_linears(model)
        if kind == TOKENS:  # PEFT trains the classifier whole (TOKEN_CLS: modules_to_save), not through LoRA
            settings["exclude_modules"] = ["classifier", "score"]
        return LoraConfig(task_type=LORA_TASK_TYPES[kind], **settings)
    if isinstance(lora, LoraConfig):
        return lora
    raise ConfigurationError(f"lora= takes True or a peft.LoraConfig, not {type(lora).__name__}")


def _quiet_progress() -> Any:
    """Trainer's progress bar, showing the loss on the bar instead of printing every log line."""
    from transformers.trainer_callback import ProgressCallback

    class LossOnBar(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and self.training_bar is not None and logs and "loss" in logs:
                self.training_bar.set_postfix(loss=f"{float(logs['loss']):.4f}", refresh=False)

    return LossOnBar


def _prepare_model(loaded: Any, lora: object, quantized: bool, seed: int, gradient_checkpointing: bool,
                   kind: str = CAUSAL) -> tuple[Any, bool]:
    from transformers import set_seed

    peft = _peft()
    model = loaded.model
    is_peft = peft is not None and isinstance(model, peft.PeftModel)
    adapter_of = loaded.plan.model.base
    if adapter_of is not None and not is_peft:
        raise ConfigurationError(
            f"this model was loaded from the adapter directory {loaded.plan.model.source} (an adapter of "
            f"{adapter_of.source}); train from the base model instead: intelrt.load({adapter_of.source!r}) and "
            "lora=True (resume=True continues from the last checkpoint in that output_dir)")
    if is_peft:
        if not (lora is None or lora is True):
            raise ConfigurationError("this model already carries LoRA adapters (trained before); pass lora=True "
                                     "to keep training them, or reload the base model for a new LoraConfig")
        return model, True
    choice = loaded.plan.decided.quantization
    if not lora:
        if kind == VISION_LANGUAGE:
            raise ConfigurationError(
                "Loaded.train trains a vision-language model's language model with LoRA adapters (lora=True); "
                "to train the whole model, use transformers.Trainer on loaded.model with "
                "intelrt.training_arguments(output_dir, plan=loaded)")
        if quantized:
            how = f"with quantization={choice.requested!r}" if choice.requested else f"from a {choice.method} checkpoint"
            raise ConfigurationError(
                f"the model was loaded {how} (quantized): its weights cannot be trained directly. Pass lora=True to "
                "train LoRA adapters on top of it (QLoRA, SPEC X9).")
        return model, False
    if peft is None:
        raise ConfigurationError(PEFT_MISSING)
    config = _lora_config(lora, kind, model)
    if quantized:
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    set_seed(seed)  # adapter initialisation is random: the same seed gives the same run
    peft_model = peft.get_peft_model(model, config)
    source = loaded.plan.model
    base = os.path.abspath(source.local_dir) if os.path.isdir(source.source) and source.local_dir else source.source
    for adapter_config in peft_model.peft_config.values():
        adapter_config.base_model_name_or_path = base  # reloadable from any working directory
    return peft_model, True


def _is_peft(model: Any) -> bool:
    peft = _peft()
    return peft is not None and isinstance(model, peft.PeftModel)


def _model_limits(loaded: Any) -> ModelLimits:
    """The token ids and row length the model can take, read from its embedding and config."""
    model, config = loaded.model, getattr(loaded.model, "config", None)
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    vocab = getattr(embeddings, "num_embeddings", None) or getattr(config, "vocab_size", None)
    positions = model_positions(config) if config is not None else None
    return ModelLimits(vocab_size=vocab if isinstance(vocab, int) else None,
                       max_length=positions[1] if positions is not None else None, strict=loaded.plan.request.strict)


def _claim_output_dir(loaded: Any, out: str, *, adapter: bool, resume: object, overwrite: bool) -> None:
    """Refuse an output directory this run must not write into, before anything is trained."""
    refuse_the_models_own_directory(out, loaded.plan.model, adapter=adapter, overwrite=overwrite)
    if os.path.isdir(out):
        if is_main_process():
            refuse_if_held(out)  # in a launched job rank 0 holds it for every rank
        refuse_content(out, resume=resume, overwrite=overwrite)


def _cut_short(out: str, since: float, exc: BaseException) -> None:
    """A run stopped by ``exc``: remove the checkpoints it left half-written, and say so honestly.
    An ``OSError`` (a write that failed: disk full, quota, read-only) becomes a :class:`SaveError`."""
    removed, failed = discard_incomplete(out, since)
    said = []
    if removed:
        said.append(f"Removed the incomplete {', '.join(removed)}")
    if failed:
        said.append(f"could not remove the incomplete {', '.join(failed)}: it stays (resume=True skips it); "
                    "delete it by hand")
    outcome = "; ".join(said)
    if not isinstance(exc, Exception):  # Ctrl-C: the interrupt itself is the message
        if outcome:
            log.warning("%s: training interrupted during a checkpoint. %s.", out, outcome)
        return
    if outcome or (isinstance(exc, OSError) and not isinstance(exc, IntelrtError)):
        writing = f"writing {', '.join(removed + failed)} " if removed or failed else "writing "
        raise SaveError(f"training stopped while {writing}to {out} ({type(exc).__name__}: {redact_text(str(exc))}): "
                        "disk full, quota "
                        f"or read-only? {outcome or 'No checkpoint was left incomplete'}; free space, then "
                        "train(..., resume=True) continues from the last complete one.") from exc


def _sharding_plan(loaded: Any, sharding: str, resume: object) -> Any:
    """The plan this training follows: the loaded model's, with ``sharding`` forced when given
    (refused when the loaded weights are laid out for another strategy: :func:`with_sharding`)."""
    plan = with_sharding(loaded.plan, sharding)
    wanted = parallelism_of(plan)
    if wanted.sharded_load and wanted.training == "fsdp" and resume not in (False, None):
        raise ConfigurationError(
            f"resume= on {plan.backend.name} with sharding='fsdp': these weights were sharded as they loaded, and "
            "transformers checkpoints no optimizer state for such a model (Trainer refuses to), so there is no "
            "complete checkpoint to continue from. Start over (overwrite=True), or resume sharded runs on an "
            "accelerator, where accelerate's FSDP2 checkpoints every rank's shard")
    return plan


def train(loaded: Any, data: object, *, lora: object = None, epochs: float = 1.0,
          output_dir: str | os.PathLike[str], resume: object = False, overwrite: bool = False,
          block_size: int = DEFAULT_BLOCK_SIZE, callbacks: Sequence[Any] = (), sharding: str = AUTO,
          **training_overrides: Any) -> TrainResult:
    """Fine-tune ``loaded`` on ``data``; see :meth:`intelrt.Loaded.train`."""
    kind = training_kind(loaded.task, loaded.model)
    tokenizer = loaded._require_tokenizer("train()") if kind != VISION_LANGUAGE else None
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or epochs <= 0:
        raise ConfigurationError(f"epochs must be a number > 0, got {epochs!r}")
    if "num_train_epochs" in training_overrides:
        raise ConfigurationError("pass epochs= (not num_train_epochs=) to train()")
    if "overwrite_output_dir" in training_overrides:
        raise ConfigurationError("pass overwrite=True (not overwrite_output_dir=) to train()")
    if not isinstance(output_dir, (str, os.PathLike)) or not os.fspath(output_dir):
        raise ConfigurationError(f"output_dir must be a directory path, got {output_dir!r}")
    if not isinstance(overwrite, bool):
        raise ConfigurationError(f"overwrite must be True or False, got {overwrite!r}")
    if overwrite and resume not in (False, None):
        raise ConfigurationError("overwrite=True removes the earlier checkpoints that resume= would continue from; "
                                 "pass one of them")
    out = os.fspath(output_dir)
    _check_callbacks(callbacks)
    _check_reporting(training_overrides)
    plan = _sharding_plan(loaded, sharding, resume)
    quantized = loaded.plan.decided.quantization is not None and not loaded.plan.decided.quantization.dequantized
    if quantized and lora and not _is_peft(loaded.model):
        require_lora(loaded.plan.decided.quantization)  # PEFT and transformers' Trainer must both take this base
    _claim_output_dir(loaded, out, adapter=bool(lora) or _is_peft(loaded.model), resume=resume, overwrite=overwrite)
    if kind == VISION_LANGUAGE and not lora and not _is_peft(loaded.model):
        _prepare_model(loaded, lora, quantized, 0, False, kind)  # refuses, before anything is read
    with _progress("preparing the data and building TrainingArguments"):
        dataset = _dataset(kind, loaded, tokenizer, data, block_size)
        overrides = {**DEFAULT_TRAINING, "num_train_epochs": float(epochs), **training_overrides}
        if lora or quantized:
            overrides.setdefault("learning_rate", LORA_LEARNING_RATE)
        if kind == VISION_LANGUAGE:
            overrides.setdefault("remove_unused_columns", False)  # the collator reads the raw rows
        # what train() chose is reported as its default, not as "set by you"
        why = {"num_train_epochs": "epochs= of train() (default 1)" if epochs == 1 else "epochs= of train()",
               "learning_rate": "train()'s default for LoRA and quantized bases (PEFT's usual rate)",
               "remove_unused_columns": "train()'s default for vision-language data (the collator reads the raw rows)"}
        defaults = {k: why.get(k, "train()'s default") for k in overrides
                    if k not in training_overrides and not (k == "num_train_epochs" and epochs != 1)}
        settings = training_settings(plan, overrides, defaults=defaults)
        args = build_training_arguments(out, plan, settings, seq2seq=kind == SEQ2SEQ)
    check_writable(out)  # before training: a full or read-only disk must not cost the whole run
    with hold_output_dir(out):
        return _train_holding(loaded, dataset, out, lora=lora, quantized=quantized, resume=resume,
                              overwrite=overwrite, args=args, settings=settings, callbacks=callbacks,
                              sharding=parallelism_of(plan), kind=kind)


def _check_callbacks(callbacks: object) -> None:
    """``callbacks=``: ``TrainerCallback`` objects or classes (``Trainer``'s ``CallbackHandler`` takes
    both), or objects with every event method; anything else fails deep inside ``Trainer`` with an
    ``AttributeError`` on its first event."""
    from transformers import TrainerCallback

    if not isinstance(callbacks, (list, tuple)):
        raise ConfigurationError(f"callbacks= takes a list of transformers TrainerCallback objects, not "
                                 f"{type(callbacks).__name__}")
    events = [name for name in vars(TrainerCallback) if name.startswith("on_")]
    for callback in callbacks:
        if isinstance(callback, TrainerCallback) or (isinstance(callback, type) and issubclass(callback, TrainerCallback)):
            continue
        missing = [e for e in events if not callable(getattr(callback, e, None))]
        if missing:
            raise ConfigurationError(
                f"callbacks= holds {type(callback).__name__} {callback!r:.60}, which is not a transformers "
                f"TrainerCallback (it has no {missing[0]}); subclass transformers.TrainerCallback and override the "
                "events you need")


def _check_reporting(overrides: dict[str, Any]) -> None:
    """``report_to=`` names integrations transformers has and that are installed; ``push_to_hub=True``
    needs the hub (``Trainer`` creates the repository when it starts)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    from ..support.hubcache import hub_offline

    wanted = overrides.get("report_to")
    names = [wanted] if isinstance(wanted, str) else list(wanted) if isinstance(wanted, (list, tuple)) else []
    if wanted is not None and (not names or not all(isinstance(n, str) for n in names)):
        raise ConfigurationError(f"report_to= takes an integration name or a list of them, got {wanted!r}")
    installed = get_available_reporting_integrations()
    for name in names:
        if name in ("none", "all"):
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise ConfigurationError(f"report_to={name!r} is not an integration transformers has; use 'none' or "
                                     f"one of {', '.join(sorted(INTEGRATION_TO_CALLBACK))}")
        if name not in installed:
            package = {"comet_ml": "comet-ml", "azure_ml": "azureml-core"}.get(name, name)
            raise ConfigurationError(f"report_to={name!r} needs the {package} package, which is not installed: pip "
                                     f"install {package}, or pass report_to='none'")
    if overrides.get("push_to_hub") and hub_offline():
        raise ConfigurationError("push_to_hub=True, but HF_HUB_OFFLINE is set: Trainer creates the repository on "
                                 "the Hugging Face Hub when it starts. Unset HF_HUB_OFFLINE, or leave push_to_hub out "
                                 "and upload the saved model later (hf upload REPO OUTPUT_DIR)")


def _dataset(kind: str, loaded: Any, tokenizer: Any, data: object, block_size: int) -> Any:
    """The training examples of ``data`` for a model that trains as ``kind``."""
    limits = _model_limits(loaded)
    if kind == SEQ2SEQ:
        return seq2seq_examples(data, tokenizer, limits)
    if kind == TOKENS:
        return token_examples(data, tokenizer, dict(loaded.model.config.label2id), limits)
    if kind == VISION_LANGUAGE:
        return vision_language_rows(data)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return causal_lm_blocks(data, tokenizer, block_size, limits)


def _trainer(kind: str, loaded: Any, model: Any, args: Any, dataset: Any, callbacks: list[Any]) -> Any:
    """transformers' trainer for ``kind``, with the collator transformers' examples use for it."""
    from transformers import (
        DataCollatorForLanguageModeling,
        DataCollatorForSeq2Seq,
        DataCollatorForTokenClassification,
        Seq2SeqTrainer,
        Trainer,
    )

    if kind == VISION_LANGUAGE:
        processor = loaded.processor
        return Trainer(model=model, args=args, train_dataset=dataset, processing_class=processor,
                       data_collator=VisionLanguageCollator(processor), callbacks=callbacks)
    tokenizer = loaded.tokenizer
    if kind == SEQ2SEQ:
        return Seq2SeqTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                              data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), callbacks=callbacks)
    collator = DataCollatorForTokenClassification(tokenizer) if kind == TOKENS else \
        DataCollatorForLanguageModeling(tokenizer, mlm=False)
    return Trainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, data_collator=collator,
                   callbacks=callbacks)


def _progress(what: str) -> contextlib.AbstractContextManager[None]:
    """A set-up step as progress (``intelrt.support.progress``) in the main process; in a launched
    job's other ranks, nothing (one report per job)."""
    from ..support.progress import step

    return step(what) if is_main_process() else contextlib.nullcontext()


def _train_holding(loaded: Any, dataset: Any, out: str, *, lora: object, quantized: bool, resume: object,
                   overwrite: bool, args: Any, settings: list[TrainingSetting], callbacks: Sequence[Any],
                   sharding: ParallelismChoice, kind: str = CAUSAL) -> TrainResult:
    """The run itself, while this process holds ``out``."""
    main = is_main_process()
    if main:
        clean_debris(out, resuming=resume not in (False, None))
        if overwrite:
            remove_earlier_checkpoints(out)
    checkpoint = resume_checkpoint(resume, out, adapter=bool(lora) or quantized or _is_peft(loaded.model))
    with _progress("setting up the Trainer" + (" and the LoRA adapters" if lora or quantized else "")):
        model, adapter = _prepare_model(loaded, lora, quantized, args.seed, bool(args.gradient_checkpointing), kind)

        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        guard = divergence_guard()
        try:
            trainer = _trainer(kind, loaded, model, args, dataset, [*callbacks, guard])
        except Exception as exc:
            if not type(exc).__module__.startswith(("huggingface_hub", "httpx", "requests")):
                raise
            # push_to_hub: Trainer creates the repository first; the hub's refusal keeps its kind (CLI exit status)
            raise ConfigurationError(f"push_to_hub=True, but the repository {args.hub_model_id or out!r} could not be "
                                     f"created on the Hugging Face Hub: {redact_text(str(exc))[:400]}. Check the "
                                     "network and your token (hf auth whoami), or leave push_to_hub out") from exc
    trainer.pop_callback(PrinterCallback)  # one summary at the end instead of a dict per log step
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(_quiet_progress())
    loaded.model = model  # generate() now uses what is being trained
    started = time.perf_counter()
    model.train()  # kernels switch to their training mode (SPEC X8)
    since = time.time()
    try:
        output = trainer.train(resume_from_checkpoint=checkpoint)
    except BaseException as exc:  # re-raised; a checkpoint cut short (Ctrl-C too) must not look resumable
        if trainer.is_world_process_zero():
            _cut_short(out, since, exc)
        if checkpoint is not None and isinstance(exc, (ValueError, RuntimeError, KeyError)) and \
                _raised_loading_state(exc):
            raise ConfigurationError(
                f"cannot resume from {checkpoint}: its saved state does not fit the parameters this run trains "
                f"({' '.join(str(exc).split())[:300]}). It was saved by a run with another model, lora= or "
                "LoraConfig: resume with that run's settings, or start over (overwrite=True; CLI: --overwrite)") from exc
        raise
    finally:
        model.eval()  # …and back to inference
    seconds = time.perf_counter() - started
    step = int(trainer.state.global_step)
    divergence = guard.divergence
    if divergence is None and (weight := non_finite_weight(model)) is not None:
        divergence = Divergence(step, "weights", weight)  # the last update broke the weights: nothing to save
    if divergence is not None:
        raise diverged_error(divergence, learning_rate=float(args.learning_rate), max_steps=int(trainer.state.max_steps),
                             last_checkpoint=last_complete_checkpoint(out)[0], lora=adapter)
    if getattr(trainer, "is_fsdp_enabled", False):
        # checkpoints were sharded (one file per rank, resumable); the model is gathered whole on rank 0
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    save_model_atomically(trainer, out)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    losses = tuple((int(e["step"]), float(e["loss"])) for e in trainer.state.log_history if "loss" in e)
    result = TrainResult(output_dir=out, adapter=adapter, quantized=quantized, steps=int(output.global_step),
                         epochs=float(trainer.state.epoch or 0.0), seconds=seconds, losses=losses,
                         mean_loss=float(output.training_loss), trainable_parameters=trainable,
                         total_parameters=total, examples=len(dataset), resumed_from=checkpoint,
                         settings=tuple(settings), truncated_rows=int(getattr(dataset, "truncated", 0)),
                         sharding=sharding.training if int(args.world_size) > 1 else "none",
                         world_size=int(args.world_size))
    if trainer.is_world_process_zero():  # in a launched job every rank trains; one writes
        _write_summary(out, result)
    log.info("%s", result)
    return result


def _raised_loading_state(exc: BaseException) -> bool:
    """``exc`` came from loading a checkpoint's saved state into this run (``Optimizer.load_state_dict``:
    parameter groups that do not match; ``Module.load_state_dict``: adapter weights of another shape)."""
    import traceback

    return any(frame.name == "load_state_dict" and ("/torch/optim/" in frame.filename
                                                    or frame.filename.endswith("/torch/nn/modules/module.py"))
               for frame in traceback.extract_tb(exc.__traceback__))


def _write_summary(output_dir: str, result: TrainResult) -> None:
    """``intelrt_train.json`` next to the saved model: what the run did, for later reading."""
    write_json_atomically(os.path.join(output_dir, "intelrt_train.json"), result.to_dict())
