"""A loaded model with its tokenizer and plan: what ``intelrt.load`` returns."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..decoding.tuning import DecodeTuning
from ..errors import ConfigurationError
from ..hooks.payloads import DecodeChoice, ParallelismChoice
from ..hooks.plan import Plan
from ..host.manager import PluginHost, get_host

if TYPE_CHECKING:
    from ..decoding.engine import FastDecoder
    from ..decoding.generation import GenerationReport, Generator
    from ..training.fine_tuning import TrainResult

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 32
PIPELINE_TASKS = {"text-generation": "text-generation", "feature-extraction": "feature-extraction",
                  "text-classification": "sequence-classification", "sentiment-analysis": "sequence-classification"}
"""transformers' pipeline task → the task ``load`` plans for it."""


@dataclass
class Loaded:
    """The model, its tokenizer (or processor) and the plan that produced them."""

    model: Any
    tokenizer: Any
    plan: Plan
    last_generation: GenerationReport | None = field(default=None, compare=False)
    """What the last ``generate`` call did: the ``path`` (``fast``, ``continuous`` or ``generate``)
    and its ``reason``, ``batches``, ``graphs``, ``compiled``, ``step``, ``captured`` and ``notes``."""
    decode_tuning: DecodeTuning = field(default_factory=DecodeTuning, repr=False, compare=False)
    """The fast decode loop's own settings (sizes, buckets); set before the first ``generate``."""
    host: PluginHost | None = field(default=None, repr=False, compare=False)
    """The plugin host that made the plan (asked for the device-graph capturer); default: the process's."""
    _generator: Generator | None = field(default=None, repr=False, compare=False)

    @property
    def device(self) -> Any:
        return self.model.device

    def _require_tokenizer(self, what: str) -> Any:
        if self.tokenizer is None:
            raise ConfigurationError(
                f"{what} needs a tokenizer, and {self.plan.model.source} has none (no tokenizer.json / "
                "tokenizer_config.json). Save one next to the model, or call loaded.model directly with token ids.")
        return self.tokenizer

    def _require_task(self, *tasks: str) -> None:
        if self.plan.task not in tasks:
            raise ConfigurationError(f"this model was loaded for {self.plan.task!r}; that call needs "
                                     f"{' or '.join(tasks)} (pass task= to intelrt.load)")

    @staticmethod
    def _prompts(prompt: str | Sequence[str]) -> tuple[list[str], bool]:
        if isinstance(prompt, str):
            return [prompt], True
        if isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
            prompts = list(prompt)
            if not prompts:
                raise ConfigurationError("generate() got an empty list of prompts; pass at least one string")
            bad = [type(p).__name__ for p in prompts if not isinstance(p, str)]
            if bad:
                raise ConfigurationError(f"every prompt must be a str; got {', '.join(sorted(set(bad)))}")
            return prompts, False
        raise ConfigurationError(f"prompt must be a str or a list of str, got {type(prompt).__name__}")

    def generate(self, prompt: str | Sequence[str], **generation_kwargs: Any) -> Any:
        """Generate a continuation of ``prompt`` (or of each prompt in a list); returns the new text.

        Keyword arguments are transformers generation settings (``max_new_tokens`` defaults to 32
        unless ``max_length`` is given; greedy unless ``do_sample=True``). Each setting is either
        honoured by the path the plan picked or sends the call to transformers' ``generate``:
        intelrt's fast decode loop (static KV cache, compiled and graph-captured step),
        transformers' continuous batching for lists, or plain ``model.generate``.
        ``last_generation`` names the path taken and why. With ``num_return_sequences=n > 1``
        each prompt gives a list of ``n`` texts.
        """
        self._require_task("text-generation")
        tokenizer = self._require_tokenizer("generate()")
        prompts, single = self._prompts(prompt)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        generation_kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
        if generation_kwargs.get("stop_strings") is not None:
            generation_kwargs.setdefault("tokenizer", tokenizer)  # transformers' generate matches them in text
        ids = [list(tokenizer(p)["input_ids"]) for p in prompts]
        rows = self._generate_ids(ids, not single, generation_kwargs)
        texts = list(tokenizer.batch_decode(rows, skip_special_tokens=True))
        return _per_prompt(texts, len(prompts), single)

    def generate_ids(self, prompts: Sequence[int] | Sequence[Sequence[int]], **generation_kwargs: Any
                     ) -> list[int] | list[list[int]]:
        """Like :meth:`generate` on token ids: one prompt (a list of ids) or a list of them; returns
        the new ids of each, up to and including the first end-of-sequence token."""
        self._require_task("text-generation")
        if isinstance(prompts, Sequence) and prompts and all(isinstance(t, int) for t in prompts):
            return _per_prompt(self._generate_ids([list(prompts)], False, generation_kwargs), 1, True)  # type: ignore[arg-type]
        if not isinstance(prompts, Sequence) or not prompts or not all(
                isinstance(p, Sequence) and p and all(isinstance(t, int) for t in p) for p in prompts):
            raise ConfigurationError("generate_ids() takes a non-empty list of token ids, or a non-empty list of "
                                     "such lists")
        rows = self._generate_ids([list(p) for p in prompts], True, generation_kwargs)  # type: ignore[arg-type]
        return _per_prompt(rows, len(prompts), False)

    def _generate_ids(self, ids: list[list[int]], as_list: bool, generation_kwargs: dict[str, Any]
                      ) -> list[list[int]]:
        if any(not p for p in ids):
            raise ConfigurationError("the prompt is empty after tokenization; pass some text")
        kwargs = {"do_sample": False, **generation_kwargs}
        if "max_length" not in kwargs:
            kwargs.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        max_new = kwargs.get("max_new_tokens")
        if max_new is not None and (not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1):
            raise ConfigurationError(f"max_new_tokens must be a positive int, got {max_new!r}")
        check_prompts(self.model, ids)
        if self._generator is None:
            self._generator = self._new_generator()
        outputs, self.last_generation = self._generator.run(ids, as_list, kwargs)
        return outputs

    def fast_decoder(self) -> FastDecoder | None:
        """The fast decode engine this model's ``generate`` uses, with its compiled and captured
        steps (``None`` when the plan decodes with transformers' ``generate``); ``intelrt serve``
        builds its in-flight batch on it."""
        self._require_task("text-generation")
        if self._generator is None:
            self._generator = self._new_generator()
        return self._generator.decoder() if self._generator.plan.decode.fast else None

    def _new_generator(self) -> Generator:
        from ..decoding.generation import Generator
        from ..decoding.routing import GenerationPlan

        decode = self.plan.decisions.get("decode")
        batching = self.plan.decisions.get("batching")
        parallelism = self.plan.decided.parallelism
        generation = GenerationPlan(
            decode=self.plan.decided.decode or DecodeChoice.plain_generate(),
            decode_reason=decode.reason if decode is not None else "the plan has no decode decision",
            batching=self.plan.decided.batching,
            batching_reason=batching.reason if batching is not None else "the plan has no batching decision",
            trains_sharded=isinstance(parallelism, ParallelismChoice) and parallelism.training == "fsdp"
            and parallelism.sharded_load)
        return Generator(self.model, generation, self._graph_capturer, self.decode_tuning)

    def _graph_capturer(self) -> Callable[..., Any] | None:
        """The backend's capturer for the plan's device-graph kind (asked once, at the first fast call)."""
        decode = self.plan.decided.decode
        if decode is None or not decode.graphs:
            return None
        return (self.host or get_host()).graph_capturer(self.plan.backend, decode.graphs)

    def stream(self, prompt: str, **generation_kwargs: Any) -> Iterator[str]:
        """Generate a continuation of ``prompt`` and yield its text as it comes, piece by piece
        (the same text :meth:`generate` returns, in order). The fast decode loop hands over tokens
        every few steps; other paths stream through transformers' ``TextIteratorStreamer``."""
        self._require_task("text-generation")
        tokenizer = self._require_tokenizer("stream()")
        if not isinstance(prompt, str):
            raise ConfigurationError(f"stream() takes one prompt (a str), got {type(prompt).__name__}")
        if generation_kwargs.get("num_return_sequences", 1) not in (None, 1):
            raise ConfigurationError("stream() yields one continuation; drop num_return_sequences or use generate()")
        from transformers import TextIteratorStreamer

        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                self.generate(prompt, streamer=streamer, **generation_kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consuming thread
                failure.append(exc)
                streamer.end()

        worker = threading.Thread(target=produce, name="intelrt-stream", daemon=True)
        worker.start()
        yield from streamer
        worker.join()
        if failure:
            raise failure[0]

    def embed(self, texts: str | Sequence[str]) -> Any:
        """Mean-pooled last hidden states, one row per text (feature-extraction models)."""
        self._require_task("feature-extraction")
        tokenizer = self._require_tokenizer("embed()")
        items, _ = self._prompts(texts)
        import torch

        inputs = tokenizer(items, return_tensors="pt", padding=True, truncation=True).to(self.model.device)
        with torch.inference_mode():
            hidden = self.model(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)

    def classify(self, texts: str | Sequence[str]) -> list[str]:
        """Predicted label for each text (sequence-classification models)."""
        self._require_task("sequence-classification")
        tokenizer = self._require_tokenizer("classify()")
        items, _ = self._prompts(texts)
        import torch

        inputs = tokenizer(items, return_tensors="pt", padding=True, truncation=True).to(self.model.device)
        with torch.inference_mode():
            logits = self.model(**inputs).logits
        labels = self.model.config.id2label
        return [labels.get(int(i), str(int(i))) for i in logits.argmax(-1)]

    def pipeline(self, task: str | None = None, **pipeline_kwargs: Any) -> Any:
        """transformers' own ``Pipeline`` for ``task`` (default: the plan's task) on this model,
        tokenizer and device — the device the plan chose (SPEC X6, H6), with no ``device=`` to pass.
        Keyword arguments go to ``transformers.pipeline`` (``device``, ``model``, ``tokenizer`` are the plan's)."""
        wanted = task or next(name for name, planned in PIPELINE_TASKS.items() if planned == self.plan.task)
        if PIPELINE_TASKS.get(wanted) != self.plan.task:
            fitting = [name for name, planned in PIPELINE_TASKS.items() if planned == self.plan.task]
            raise ConfigurationError(f"pipeline task {wanted!r} needs a model loaded for "
                                     f"{PIPELINE_TASKS.get(wanted, 'a task intelrt does not load')!r}, and this one "
                                     f"was loaded for {self.plan.task!r}: use task {' or '.join(map(repr, fitting))}, "
                                     f"or intelrt.pipeline({wanted!r}, model) to load it for that task")
        taken = sorted({"model", "tokenizer", "device", "device_map"} & set(pipeline_kwargs))
        if taken:
            raise ConfigurationError(f"pipeline(): {', '.join(taken)} come from the plan; pass options to "
                                     "intelrt.load (backend=, devices=) instead")
        self._require_tokenizer("pipeline()")
        import transformers

        build: Any = transformers.pipeline  # typed per literal task name; ours is a runtime string
        # A model placed by accelerate (device_map) is where the plan put it; the pipeline reads its
        # device from the model, and refuses a second device= for it.
        device = None if getattr(self.model, "hf_device_map", None) else self.model.device
        return build(wanted, model=self.model, tokenizer=self.tokenizer, device=device, **pipeline_kwargs)

    def train(self, data: Any, *, lora: Any = None, epochs: float = 1.0, output_dir: Any,
              resume: Any = False, overwrite: bool = False, sharding: str = "auto",
              **training_overrides: Any) -> TrainResult:
        """Fine-tune this model on ``data`` with transformers' ``Trainer`` and save the result.

        ``data``: a text file, a ``.jsonl`` file, a list of strings or a ``datasets.Dataset``
        (``text`` or ``input_ids`` column). ``lora=True`` (or a ``peft.LoraConfig``) trains LoRA
        adapters; a quantized model (``quantization="4bit"``, ``"int8"`` …) trains them as QLoRA where
        PEFT supports its base (docs/quantization.md, "LoRA"), else ``lora=True`` is refused.
        ``output_dir`` must be new or empty: one holding anything else (the model's own directory
        above all) is refused unless ``resume=True`` continues from the last ``checkpoint-N`` in it
        or ``overwrite=True`` replaces what it holds. ``block_size=`` (tokens per example, default
        128) and ``callbacks=`` (``TrainerCallback`` objects) shape the run. ``sharding=`` spreads it
        over the ranks of ``intelrt launch``: ``"auto"`` (the plan's choice, from the training state,
        device memory and world size), ``"none"``, ``"ddp"``, ``"fsdp"`` (FSDP2) or ``"deepspeed"``
        (ZeRO); a sharded run saves a normal safetensors model, gathered on rank 0. Other keywords go to
        ``TrainingArguments`` (see :func:`intelrt.training_arguments`). Saves the adapters (or the
        model) and tokenizer into ``output_dir`` — ``intelrt.load(output_dir)`` loads them back —
        and returns a :class:`~intelrt.training.fine_tuning.TrainResult`.
        """
        from ..training.fine_tuning import train

        return train(self, data, lora=lora, epochs=epochs, output_dir=output_dir, resume=resume,
                     overwrite=overwrite, sharding=sharding, **training_overrides)

    def save_quantized(self, directory: str | os.PathLike[str]) -> Path:
        """Write this quantized model to ``directory`` as a checkpoint plain ``from_pretrained``
        loads (its ``quantization_config`` in config.json), with the tokenizer; returns the directory.

        For a model loaded with ``quantization=`` (bitsandbytes, torchao, AutoRound) or from a
        quantized checkpoint whose method saves (docs/quantization.md, "saves"). FP8 on Gaudi in
        INC's measure stage writes INC's statistics and ``directory/inc_fp8_quantize.json`` (for
        ``QUANT_CONFIG``) instead. ``intelrt.quantize`` / ``intelrt quantize`` load and save in one
        step, with calibration text for AutoRound."""
        from ..errors import PlanError

        choice = self.plan.decided.quantization
        if choice is None:
            raise PlanError("the model was loaded without quantization: load it with quantization= (e.g. 'int8'), or "
                            "run intelrt quantize MODEL --method METHOD --output DIR")
        if choice.method == "inc":
            from ..quantization.inc import save_measurement

            return save_measurement(self.model, choice.details, directory)
        from ..quantization.saving import save_quantized

        return save_quantized(self.model, choice, directory, tokenizer=self.tokenizer)


def _per_prompt(rows: list[Any], prompts: int, single: bool) -> Any:
    """Rows in the caller's shape: one per prompt, or a list of ``n`` per prompt when the call
    asked for several sequences each (``num_return_sequences``)."""
    each = len(rows) // prompts if prompts else 1
    grouped = [rows[i * each:(i + 1) * each] for i in range(prompts)] if each > 1 else rows
    return grouped[0] if single else grouped


def check_prompts(model: Any, ids: Sequence[Sequence[int]]) -> None:
    """Refuse token ids outside the model's vocabulary and prompts longer than its positions, before
    any device work (inside the model they end in an ``IndexError`` far from the cause)."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    vocab = getattr(embeddings, "num_embeddings", None) or getattr(model.config.get_text_config(), "vocab_size", None)
    if vocab:
        for row, prompt in enumerate(ids):
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise ConfigurationError(
                    f"token id {bad} (prompt {row}) is outside the model's vocabulary of {vocab} ids (0..{vocab - 1}); "
                    "tokenize with this model's own tokenizer")
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    longest = max(len(p) for p in ids)
    if isinstance(limit, int) and 0 < limit < longest:  # XLNet says -1: relative positions, no limit
        raise ConfigurationError(f"the prompt has {longest} tokens and the model reads at most {limit} positions "
                                 "(max_position_embeddings); shorten the prompt")
