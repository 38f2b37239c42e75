"""A loaded model with its tokenizer, processors and plan: what ``intelrt.load`` returns.

Which path a ``generate`` call takes, and why, is ``decoding/routing.py``'s one rule: ``Loaded``
gathers the call's facts (its inputs tokenized or processed, its settings) and runs the path named.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..decoding.tuning import DecodeTuning
from ..errors import ConfigurationError
from ..hooks.payloads import DecodeChoice, ParallelismChoice
from ..hooks.plan import Plan
from ..host.manager import PluginHost, get_host
from ..planning import tasks
from . import plain_generate
from .checked_pipeline import checked
from .model_limits import (
    check_counts,
    check_length,
    check_prompts,
    check_sampling,
    check_text,
    check_token_ids,
    generate_refused,
)
from .processors import Processors, explain_missing, pipeline_components, require_vision

if TYPE_CHECKING:
    from ..decoding.engine import FastDecoder
    from ..decoding.generation import GenerationReport, Generator
    from ..decoding.routing import CallFacts, CallRoute
    from ..training.fine_tuning import TrainResult

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 32
"""New tokens per call unless the call, its ``generation_config`` or the model's sets a length."""
NOT_SETTINGS = frozenset({"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash"})
"""Entries of ``GenerationConfig.to_dict()`` that are bookkeeping, not generation settings."""


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
    """The fast decode loop's own settings (sizes, buckets; ``intelrt.load``'s engine options set
    three of them); replacing it makes the next call build the engine anew with it."""
    host: PluginHost | None = field(default=None, repr=False, compare=False)
    """The plugin host that made the plan (asked for the device-graph capturer); default: the process's."""
    _generator: Generator | None = field(default=None, repr=False, compare=False)
    processors: Processors | None = field(default=None, repr=False, compare=False)
    """The checkpoint's processors (image processor, feature extractor, ``AutoProcessor`` …), loaded
    from its directory when first used."""

    @property
    def device(self) -> Any:
        return self.model.device

    @property
    def task(self) -> str:
        """The plan's task under its canonical name (``sequence-classification`` is ``text-classification``)."""
        try:
            return tasks.canonical(self.plan.task)
        except ConfigurationError:
            return self.plan.task

    @property
    def processor(self) -> Any:
        """What prepares this model's inputs: its multimodal processor (``AutoProcessor``), else its
        image processor or feature extractor, else its tokenizer."""
        if self.processors is None:
            return self.tokenizer
        return self.processors.main(self.tokenizer)

    def _require_tokenizer(self, what: str) -> Any:
        if self.tokenizer is None:
            raise ConfigurationError(
                f"{what} needs a tokenizer, and {self.plan.model.source} has none (no tokenizer.json / "
                "tokenizer_config.json). Save one next to the model, or call loaded.model directly with token ids.")
        return self.tokenizer

    def _require_task(self, *wanted: str) -> None:
        if self.task not in {tasks.canonical(t) for t in wanted}:
            raise ConfigurationError(f"this model was loaded for {self.plan.task!r}; that call needs "
                                     f"{' or '.join(wanted)} (pass task= to intelrt.load)")

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

    def generate(self, prompt: Any = None, *, images: Any = None, audio: Any = None, sampling_rate: int | None = None,
                 videos: Any = None, **generation_kwargs: Any) -> Any:
        """Generate a continuation of ``prompt`` (or of each prompt in a list); returns the new text.

        ``prompt``: a str, a list of str, chat messages (``[{"role": "user", "content": …}]``, image
        parts included) or a list of conversations. ``images=``, ``audio=`` (with ``sampling_rate=``)
        and ``videos=`` go to the model's processor with the text; the model's inputs may also be
        passed as tensors (``input_features=``, ``pixel_values=`` …).

        Keyword arguments are what ``model.generate`` takes: generation settings, a
        ``generation_config`` (the call's keywords override it, as in ``generate``), logits
        processors, ``attention_mask``. The model's generation config applies as ``generate`` applies
        it (its ``do_sample``, ``top_k``, ``temperature`` …); ``max_new_tokens`` is 32 unless the call,
        its ``generation_config`` or the model's sets a length. A decoder-only language model decodes
        on the path the plan picked — intelrt's fast loop (static KV cache, compiled and
        graph-captured step), transformers' continuous batching for lists, or plain ``model.generate``
        — each setting either honoured by it or sending the call to ``generate``; a vision-language
        model loaded for image-text-to-text is prefilled by ``model.generate`` and decoded by the
        fast loop where the plan says so; encoder-decoder and speech models, and calls with
        ``return_dict_in_generate=True``, run on ``model.generate``. ``last_generation`` names the
        path taken and why. With
        ``num_return_sequences=n > 1`` each prompt gives a list of ``n`` texts;
        ``return_dict_in_generate=True`` returns transformers' own output (``GenerateDecoderOnlyOutput``
        …, its ``sequences`` holding the prompt too).
        """
        with generate_refused():
            return self._generate(prompt, images=images, audio=audio, sampling_rate=sampling_rate, videos=videos,
                                  **generation_kwargs)

    def _generate(self, prompt: Any = None, *, images: Any = None, audio: Any = None, sampling_rate: int | None = None,
                  videos: Any = None, **generation_kwargs: Any) -> Any:
        """See :meth:`generate`."""
        from ..decoding.routing import route_call

        settings = self._settings(generation_kwargs)
        tensors = {name: settings.pop(name) for name in plain_generate.model_input_names(settings)}
        mask = tensors.pop("attention_mask", None)  # a mask alone is not an input of another kind
        route = route_call(self._call_facts(
            settings, media=images is not None or audio is not None or videos is not None or bool(tensors),
            no_prompt=prompt is None, chat_media=lambda: _has_media(prompt)))
        if route.path == "language-model":
            if mask is not None:
                settings["attention_mask"] = mask
            tokenizer = self._require_tokenizer("generate()")
            prompts, single = self._text_prompts(prompt, tokenizer)
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            settings.setdefault("pad_token_id", tokenizer.pad_token_id)
            if settings.get("stop_strings") is not None:
                settings.setdefault("tokenizer", tokenizer)  # transformers' generate matches them in text
            rows = self._generate_ids(route, prompts, not single, settings)
            if isinstance(rows, _RawOutput):
                return rows.output
            texts = list(tokenizer.batch_decode(rows, skip_special_tokens=True))
            return _per_prompt(texts, len(prompts), single)
        self._require_generative()
        if mask is not None:
            tensors["attention_mask"] = mask
        processor = self.processor
        prepared = plain_generate.prepare(self.model, processor, self.tokenizer, prompt, images=images, audio=audio,
                                          sampling_rate=sampling_rate, videos=videos, tensors=tensors)
        output, rows = self._prepared(prepared, settings, route)
        if rows is None:
            return output
        decoder = processor if hasattr(processor, "batch_decode") else self._require_tokenizer("generate()")
        texts = list(decoder.batch_decode(rows, skip_special_tokens=True))
        return _per_prompt(texts, prepared.rows, prepared.single)

    def generate_ids(self, prompts: Any, **generation_kwargs: Any) -> Any:
        """Like :meth:`generate` on token ids: one prompt (a list of ids) or a list of them (a tensor
        of ids too); returns the new ids of each, up to and including the first end-of-sequence token
        (for an encoder-decoder model: the decoder's ids after its start token)."""
        with generate_refused():
            return self._generate_ids_of(prompts, **generation_kwargs)

    def _generate_ids_of(self, prompts: Any, **generation_kwargs: Any) -> Any:
        from ..decoding.routing import route_call

        if hasattr(prompts, "tolist") and not isinstance(prompts, list):
            prompts = prompts.tolist()
        settings = self._settings(generation_kwargs)
        if isinstance(prompts, Sequence) and prompts and all(isinstance(t, int) for t in prompts):
            ids, as_list, single = [list(prompts)], False, True
        elif isinstance(prompts, Sequence) and prompts and all(
                isinstance(p, Sequence) and p and all(isinstance(t, int) for t in p) for p in prompts):
            ids, as_list, single = [list(p) for p in prompts], True, False
        else:
            raise ConfigurationError("generate_ids() takes a non-empty list of token ids, or a non-empty list of "
                                     "such lists")
        facts = self._call_facts(settings, token_ids=True)
        route = route_call(facts)
        if route.path == "language-model":
            rows = self._generate_ids(route, ids, as_list, settings)
            return rows.output if isinstance(rows, _RawOutput) else _per_prompt(rows, len(ids), single)
        self._require_generative()
        tensors = {name: settings.pop(name) for name in plain_generate.model_input_names(settings)}
        pad = self._pad_id(settings)
        width = max(len(p) for p in ids)
        import torch

        mask = settings.pop("attention_mask", None)
        # an encoder reads the mask; a decoder-only model continues each row's last token: padded on the left
        left = not self._encoder_decoder
        input_ids = torch.tensor([[pad] * (width - len(p)) * left + p + [pad] * (width - len(p)) * (not left)
                                  for p in ids])
        if mask is None:
            mask = torch.tensor([[0] * (width - len(p)) * left + [1] * len(p) + [0] * (width - len(p)) * (not left)
                                 for p in ids])
        prepared = plain_generate.prepare(self.model, None, None, None, tensors={
            "input_ids": input_ids, "attention_mask": torch.as_tensor(mask), **tensors})
        # the model's inputs given as tensors, known now, name the reason (the path is the same)
        output, rows = self._prepared(prepared, settings, route_call(replace(facts, media=bool(tensors))))
        return output if rows is None else _per_prompt(rows, len(ids), single)

    @property
    def _encoder_decoder(self) -> bool:
        return bool(getattr(self.model.config, "is_encoder_decoder", False))

    def _call_facts(self, settings: dict[str, Any], *, token_ids: bool = False, media: bool = False,
                    no_prompt: bool = False, chat_media: Callable[[], bool] | None = None) -> CallFacts:
        """What of this model, its plan and the call decides the call's path (``decoding/routing.py``)."""
        from ..decoding.routing import CallFacts

        decode = self.plan.decisions.get("decode")
        architecture = self.plan.model.architecture
        return CallFacts(self.task, self.plan.task, self._encoder_decoder,
                         architecture is not None and architecture.language_model is not None,
                         self.plan.decided.decode, decode.reason if decode is not None else None,
                         self._wants_output(settings), token_ids=token_ids, media=media, no_prompt=no_prompt,
                         chat_media=chat_media)

    def _wants_output(self, settings: dict[str, Any]) -> bool:
        """The call asks for transformers' output structure (``return_dict_in_generate``)."""
        own = getattr(getattr(self.model, "generation_config", None), "return_dict_in_generate", None)
        return bool(settings.get("return_dict_in_generate", own))

    def _settings(self, generation_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's generation settings as ``generate`` reads them: a ``generation_config``'s
        explicit values under the call's keywords (``GenerationMixin._prepare_generation_config``:
        keywords > the passed config > the model's), and intelrt's default length."""
        from transformers import GenerationConfig

        settings = dict(generation_kwargs)
        given = settings.pop("generation_config", None)
        if given is not None:
            if not isinstance(given, GenerationConfig):
                raise ConfigurationError(f"generation_config= takes a transformers GenerationConfig, got "
                                         f"{type(given).__name__}")
            settings = {**{k: v for k, v in given.to_dict().items() if v is not None and k not in NOT_SETTINGS},
                        **settings}
        if settings.get("max_length") is None and settings.get("max_new_tokens") is None:
            own = getattr(getattr(self.model, "generation_config", None), "max_new_tokens", None)
            settings["max_new_tokens"] = own or DEFAULT_MAX_NEW_TOKENS
            settings.pop("max_length", None)
        check_counts(settings)
        check_token_ids(self.model, settings)
        check_sampling(self.model, settings)
        return settings

    def _text_prompts(self, prompt: Any, tokenizer: Any) -> tuple[list[list[int]], bool]:
        """Token ids of each prompt: text tokenized, chat messages through the tokenizer's chat template."""
        chats = plain_generate.conversations(prompt)
        check_text(prompt)
        if chats is not None:
            items, single = chats
            return [list(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                                       return_dict=True)["input_ids"]) for c in items], single
        prompts, single = self._prompts(prompt)
        return [list(tokenizer(p)["input_ids"]) for p in prompts], single

    def _require_generative(self) -> None:
        if self.task == "text-to-audio":
            raise ConfigurationError("this model generates audio, not text: use loaded.pipeline('text-to-audio')")
        can = getattr(self.model, "can_generate", None)
        if not (callable(can) and can()):
            raise ConfigurationError(
                f"{type(self.model).__name__} (loaded for {self.plan.task!r}) does not generate (transformers' "
                "can_generate() is False); use loaded.pipeline() for its task, or load a generative checkpoint "
                "(task='text-generation', 'text2text-generation', 'image-text-to-text', "
                "'automatic-speech-recognition')")

    def _prepared(self, prepared: plain_generate.Prepared, settings: dict[str, Any], route: CallRoute
                  ) -> tuple[Any, list[list[int]] | None]:
        """A call of a model that is not a plain language model, on its prepared inputs, on ``route``'s
        path: a vision-language model's through the fast loop where the call's settings allow, else
        transformers' ``generate``; (output, new ids per row) as :meth:`_plain` returns them."""
        if route.path == "vision-language":
            rows, reason = self._vision_language(prepared, settings)
            if rows is not None:
                return None, rows
            return self._plain(prepared, settings, reason)
        return self._plain(prepared, settings, route.reason)

    def _vision_language(self, prepared: plain_generate.Prepared, settings: dict[str, Any]
                         ) -> tuple[list[list[int]] | None, str]:
        """New ids per row of a vision-language call: transformers' ``generate`` prefills, the fast
        loop decodes its language model (``decoding/vision_language.py``); ``(None, why)`` when
        this call runs on ``generate`` instead."""
        from ..decoding import vision_language
        from ..decoding.generation import GenerationReport
        from ..decoding.routing import route_vision_language

        ids = prepared.inputs.get("input_ids")
        if ids is None:
            return None, route_vision_language(None).reason
        mask = prepared.inputs.get("attention_mask")
        prompts = [row.tolist() for row in ids] if mask is None else \
            [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        settings = dict(settings)
        settings.setdefault("pad_token_id", self._pad_id(settings))
        check_length(self.model, prepared.prompt_width, settings)
        generator = self._current_generator()
        loop, options = generator.route(prompts, not prepared.single, settings)
        route = route_vision_language(loop)
        if route.path != "fast" or options is None:
            return None, route.reason
        try:
            prefilled = vision_language.prefill(self.model, prepared.inputs, int(settings["pad_token_id"]))
        except vision_language.PrefillMisfit as why:
            return None, f"{why}; transformers' generate runs this call"
        report = GenerationReport("fast", route.reason, len(prompts))
        ran = generator.fast_or_failure(prompts, route, options, report, prefilled)
        if isinstance(ran, str):
            return None, ran
        outputs, self.last_generation = ran
        return outputs, report.reason

    def _plain(self, prepared: plain_generate.Prepared, settings: dict[str, Any], reason: str
               ) -> tuple[Any, list[list[int]] | None]:
        """``model.generate`` on ``prepared``: (its output, the new ids of each row), the ids ``None``
        when the caller asked for transformers' output structure."""
        from ..decoding.generation import GenerationReport

        settings = dict(settings)
        check_length(self.model, prepared.prompt_width, settings)
        if not self._encoder_decoder or "pad_token_id" in settings:
            settings.setdefault("pad_token_id", self._pad_id(settings))
        parallelism = self.plan.decided.parallelism
        trains_sharded = parallelism is not None and parallelism.sharded_load
        output = plain_generate.run(self.model, prepared, settings, no_grad=trains_sharded)
        self.last_generation = GenerationReport("generate", reason, prepared.rows, batches=1)
        if self._wants_output(settings):
            return output, None
        return output, plain_generate.new_tokens(output, prepared, plain_generate.eos_ids(self.model, settings),
                                                 self.model)

    def _pad_id(self, settings: dict[str, Any]) -> int:
        """The pad id of a call: its own, the model's generation config's, the tokenizer's, or EOS."""
        for value in (settings.get("pad_token_id"), getattr(getattr(self.model, "generation_config", None),
                                                              "pad_token_id", None),
                      getattr(self.tokenizer, "pad_token_id", None)):
            if isinstance(value, int):
                return value
        eos = plain_generate.eos_ids(self.model, settings)
        return eos[0] if eos else 0

    def _generate_ids(self, route: CallRoute, ids: list[list[int]], as_list: bool,
                      generation_kwargs: dict[str, Any]) -> Any:
        """New ids per prompt of a decoder-only language model (or transformers' own output, wrapped
        in :class:`_RawOutput`, when the call asks for it or masks more than left padding)."""
        from ..decoding.routing import route_token_ids

        if any(not p for p in ids):
            raise ConfigurationError("the prompt is empty after tokenization; pass some text")
        kwargs = dict(generation_kwargs)
        mask = kwargs.pop("attention_mask", None)
        stripped = ids if mask is None else _strip_left_padding(ids, mask)
        route = route_token_ids(route, masked=stripped is None)
        if stripped is None:
            return self._masked(ids, mask, kwargs, route.reason)
        ids = stripped
        check_prompts(self.model, ids)
        check_length(self.model, max(len(p) for p in ids), kwargs)
        if route.path == "generate":
            from ..decoding.generation import left_pad

            input_ids, padded = left_pad(ids, self._pad_id(kwargs), self.model.device)
            prepared = plain_generate.Prepared({"input_ids": input_ids, "attention_mask": padded}, len(ids),
                                               not as_list, int(input_ids.shape[1]))
            output, _ = self._plain(prepared, kwargs, route.reason)
            return _RawOutput(output)
        outputs, self.last_generation = self._current_generator().run(ids, as_list, kwargs)
        return outputs

    def _masked(self, ids: list[list[int]], mask: Any, settings: dict[str, Any], reason: str) -> Any:
        """A mask that hides more than left padding: ``generate`` on the ids and mask as given."""
        import torch

        widths = {len(p) for p in ids}
        if len(widths) != 1:
            raise ConfigurationError("attention_mask= masks tokens inside the prompts: give prompts of one length "
                                     "(padded as you mean them) with a mask of that shape")
        check_prompts(self.model, ids)
        check_length(self.model, widths.copy().pop(), settings)
        prepared = plain_generate.Prepared(
            plain_generate.on_device({"input_ids": torch.tensor(ids), "attention_mask": torch.as_tensor(mask)},
                                     self.model), len(ids), len(ids) == 1, widths.pop())
        output, rows = self._plain(prepared, settings, reason)
        return _RawOutput(output) if rows is None else rows

    def fast_decoder(self) -> FastDecoder | None:
        """The fast decode engine this model's ``generate`` uses, with its compiled and captured
        steps (``None`` when the plan decodes with transformers' ``generate``); ``intelrt serve``
        builds its in-flight batch on it."""
        self._require_task("text-generation")
        generator = self._current_generator()
        return generator.decoder() if generator.plan.decode.fast else None

    def _current_generator(self) -> Generator:
        """The generator for the current ``decode_tuning``: made anew when that was replaced since
        (the engine is sized and switched by it: a changed setting is never silently ignored)."""
        if self._generator is None or self._generator.tuning != self.decode_tuning:
            self._generator = self._new_generator()
        return self._generator

    def _new_generator(self) -> Generator:
        from ..decoding.generation import Generator
        from ..decoding.routing import GenerationPlan, vision_language_decodes

        decode = self.plan.decisions.get("decode")
        batching = self.plan.decisions.get("batching")
        parallelism = self.plan.decided.parallelism
        generation = GenerationPlan(
            decode=self.plan.decided.decode or DecodeChoice.plain_generate(),
            decode_reason=decode.reason if decode is not None else "the plan has no decode decision",
            batching=self.plan.decided.batching,
            batching_reason=batching.reason if batching is not None else "the plan has no batching decision",
            buckets=self.plan.decided.buckets,
            trains_sharded=isinstance(parallelism, ParallelismChoice) and parallelism.training == "fsdp"
            and parallelism.sharded_load)
        model = self.model
        if vision_language_decodes(self.task, self.plan.decided.decode):
            from ..decoding.vision_language import language_model

            model = language_model(self.model)  # the engine steps the language model after the image prefill
        return Generator(model, generation, self._graph_capturer, self.decode_tuning, backend=self.plan.backend)

    def _graph_capturer(self) -> Callable[..., Any] | None:
        """The backend's capturer for the plan's device-graph kind (asked once, at the first fast call)."""
        decode = self.plan.decided.decode
        if decode is None or not decode.graphs:
            return None
        return (self.host or get_host()).graph_capturer(self.plan.backend, decode.graphs)

    def stream(self, prompt: str, **generation_kwargs: Any) -> Iterator[str]:
        """Generate a continuation of ``prompt`` and yield its text as it comes, piece by piece
        (the same text :meth:`generate` returns, in order). The fast decode loop hands over tokens
        every few steps; other paths stream through transformers' ``TextIteratorStreamer``. A consumer
        that stops reading (``break``, an error, the program's end) ends the generation at its next token."""
        self._require_task("text-generation")
        tokenizer = self._require_tokenizer("stream()")
        if not isinstance(prompt, str):
            raise ConfigurationError(f"stream() takes one prompt (a str), got {type(prompt).__name__}")
        if generation_kwargs.get("num_return_sequences", 1) not in (None, 1):
            raise ConfigurationError("stream() yields one continuation; drop num_return_sequences or use generate()")
        from ..support.torch_threads import start_torch_thread

        streamer = _closable_streamer(tokenizer)
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                self.generate(prompt, streamer=streamer, **generation_kwargs)
            except StreamClosed:
                pass  # the consumer stopped reading: nobody waits for the rest
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consuming thread
                failure.append(exc)
                streamer.end()

        worker = start_torch_thread(produce, name="intelrt-stream", what="the generation stream() started",
                                    stop=streamer.close)
        try:
            yield from streamer
        finally:
            # a consumer that stopped early (break, an error, the program's end) ends the generation
            # at its next token rather than leaving it to run on
            streamer.close()
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
        """transformers' own ``Pipeline`` for ``task`` (default: the plan's task) on this model, its
        processors and device — the device the plan chose (SPEC X6, H6, T2), with no ``device=`` to
        pass. Any task ``transformers.pipeline`` accepts whose auto classes load this model's class;
        the processors it reads (tokenizer, image processor, feature extractor, ``AutoProcessor``) are
        the checkpoint's own. Keyword arguments go to ``transformers.pipeline`` (``device``, ``model``
        and the processors are the plan's and the checkpoint's)."""
        import transformers

        name = pipeline_task(task or self._default_pipeline_task())
        self._check_serves(name)
        taken = sorted({"model", "tokenizer", "device", "device_map", "image_processor", "feature_extractor",
                        "processor", "video_processor"} & set(pipeline_kwargs))
        if taken:
            raise ConfigurationError(f"pipeline(): {', '.join(taken)} come from the plan and the checkpoint; pass "
                                     "options to intelrt.load (backend=, devices=) instead")
        from transformers.pipelines import PIPELINE_REGISTRY

        entry = PIPELINE_REGISTRY.supported_tasks[name]
        pipeline_class = _pipeline_class(entry)
        if entry.get("type") in ("image", "video") or getattr(pipeline_class, "_load_image_processor", None):
            require_vision(f"the {name} pipeline")
        processors = self.processors or Processors(self.plan.model.local_dir or self.plan.model.source,
                                                   trust_remote_code=self.plan.request.trust_remote_code)
        build: Any = transformers.pipeline  # typed per literal task name; ours is a runtime string
        # A model placed by accelerate (device_map) is where the plan put it; the pipeline reads its
        # device from the model, and refuses a second device= for it.
        device = None if getattr(self.model, "hf_device_map", None) else self.model.device
        if "pipeline_class" not in pipeline_kwargs:
            pipeline_kwargs["pipeline_class"] = checked(pipeline_class)  # inputs (lengths, ids) checked per call
        try:
            components = pipeline_components(pipeline_class, processors, self.tokenizer)
            return build(name, model=self.model, device=device, **components, **pipeline_kwargs)
        except ImportError as exc:
            raise explain_missing(f"the {name} pipeline", exc) or exc from exc

    def _default_pipeline_task(self) -> str:
        if tasks.get(self.task).pipeline:
            return self.task
        serving = [t for t in tasks.tasks_of_class(type(_unwrapped(self.model)).__name__) if tasks.get(t).pipeline]
        if serving:
            return serving[0]
        raise ConfigurationError(f"this model was loaded for {self.plan.task!r}, which transformers has no pipeline "
                                 f"for (transformers.pipelines.SUPPORTED_TASKS); call loaded.model directly, or "
                                 "pass a pipeline task")

    def _check_serves(self, name: str) -> None:
        """The pipeline of task ``name`` runs the classes its auto classes load: refuse another class
        (transformers would only log an error, then answer with the wrong head or fail)."""
        model = _unwrapped(self.model)
        cls = type(model)
        if not cls.__module__.startswith("transformers."):
            return  # remote code: its class is its own, and its pipeline its own business
        if cls.__name__ in tasks.class_names(name):
            return
        fitting = [t for t in tasks.tasks_of_class(cls.__name__) if tasks.get(t).pipeline]
        raise ConfigurationError(
            f"pipeline task {name!r} runs models of {', '.join(tasks.get(name).auto_classes) or 'its own classes'}, "
            f"and this one is a {cls.__name__} (loaded for {self.plan.task!r})"
            + (f": use task {' or '.join(map(repr, fitting))}" if fitting else "")
            + f", or intelrt.pipeline({name!r}, model) to load it for that task")

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

    def save_quantized(self, directory: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write this quantized model to ``directory`` as a checkpoint plain ``from_pretrained``
        loads (its ``quantization_config`` in config.json), with the tokenizer; returns the directory.

        For a model loaded with ``quantization=`` (bitsandbytes, torchao, AutoRound) or from a
        quantized checkpoint whose method saves (docs/quantization.md, "saves"). FP8 on Gaudi in
        INC's measure stage writes INC's statistics and ``directory/inc_fp8_quantize.json`` (for
        ``QUANT_CONFIG``) instead. ``intelrt.quantize`` / ``intelrt quantize`` load and save in one
        step, with calibration text for AutoRound.

        The directory the model was loaded from is refused (the checkpoint would replace its weights),
        and so is one holding files unless ``overwrite=True``; the files are written to a staging
        directory and swapped in at the end, so a failed save leaves ``directory`` as it was."""
        from .quantized_save import save_quantized_model

        return save_quantized_model(self, directory, overwrite=overwrite)


class StreamClosed(Exception):
    """Raised in ``Loaded.stream``'s generation at its next token once the consumer stopped reading."""


def _closable_streamer(tokenizer: Any) -> Any:
    """transformers' ``TextIteratorStreamer`` whose ``close()`` makes the generation feeding it end
    at its next token (``put`` raises :class:`StreamClosed`; the decode loops stop on a streamer
    that raises, without a retry)."""
    from transformers import TextIteratorStreamer

    class ClosableStreamer(TextIteratorStreamer):
        closed = False

        def close(self) -> None:
            self.closed = True

        def put(self, value: Any) -> None:
            if self.closed:
                raise StreamClosed("the consumer of stream() stopped reading")
            super().put(value)

    return ClosableStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)


@dataclass(frozen=True)
class _RawOutput:
    """transformers' own ``generate`` output, returned to the caller as it is."""

    output: Any


def _has_media(prompt: object) -> bool:
    """Chat messages with image, video or audio parts."""
    chats = plain_generate.conversations(prompt)
    if chats is None:
        return False
    return any(isinstance(part, dict) and part.get("type") in ("image", "video", "audio")
               for conversation in chats[0] for message in conversation
               for part in (message.get("content") if isinstance(message.get("content"), list) else ()))


def _strip_left_padding(ids: list[list[int]], mask: Any) -> list[list[int]] | None:
    """The prompts without the tokens ``mask`` hides, when it hides only left padding (what intelrt
    pads with itself); ``None`` when it hides anything else."""
    rows = mask.tolist() if hasattr(mask, "tolist") else mask
    if isinstance(rows, list) and rows and not isinstance(rows[0], list):
        rows = [rows]
    if not isinstance(rows, list) or len(rows) != len(ids) or any(
            not isinstance(r, list) or len(r) != len(p) for r, p in zip(rows, ids, strict=False)):
        raise ConfigurationError("attention_mask= must have one row per prompt, each as long as its prompt's ids")
    stripped = []
    for prompt, row in zip(ids, rows, strict=True):
        start = next((i for i, v in enumerate(row) if v), len(row))
        if not all(row[start:]) or start == len(row):
            return None
        stripped.append(prompt[start:])
    return stripped


def _unwrapped(model: Any) -> Any:
    """The transformers model under a PEFT wrapper."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


def _pipeline_class(entry: dict[str, Any]) -> Any:
    """The ``Pipeline`` class of a ``SUPPORTED_TASKS`` entry (its ``impl`` is the class or its dotted path)."""
    import importlib

    impl = entry["impl"]
    if isinstance(impl, str):
        module, _, name = impl.rpartition(".")
        return getattr(importlib.import_module(module), name)
    return impl


def pipeline_task(task: str) -> str:
    """``task`` as ``transformers.pipeline`` names it (aliases resolved: ``ner``, ``sentiment-analysis``);
    a task it removed or does not know is a :class:`ConfigurationError` saying what to use instead."""
    from transformers import pipelines

    removed = getattr(pipelines, "REMOVED_TASKS", {})
    base = "translation" if task.startswith("translation_") else task
    if base in removed:
        how = "loaded.generate() runs it" if base in ("text2text-generation", "summarization", "translation") else \
            removed[base]
        raise ConfigurationError(f"transformers {_version()} has no {task!r} pipeline any more ({removed[base]}); "
                                 f"{how}")
    try:
        return str(pipelines.PIPELINE_REGISTRY.check_task(task)[0])
    except KeyError:
        raise ConfigurationError(f"pipeline task {task!r} is not one transformers {_version()} has; one of: "
                                 f"{', '.join(tasks.pipeline_tasks())}") from None


def _version() -> str:
    import transformers

    return str(transformers.__version__)


def _per_prompt(rows: list[Any], prompts: int, single: bool) -> Any:
    """Rows in the caller's shape: one per prompt, or a list of ``n`` per prompt when the call
    asked for several sequences each (``num_return_sequences``)."""
    each = len(rows) // prompts if prompts else 1
    grouped = [rows[i * each:(i + 1) * each] for i in range(prompts)] if each > 1 else rows
    return grouped[0] if single else grouped

