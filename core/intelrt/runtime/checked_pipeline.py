"""The pipelines ``intelrt`` builds check each call's input by its kind — text, images, audio,
video (:mod:`.inputs`, the checks ``Loaded.generate`` shares) — before the pipeline's preprocessing,
and translate what still fails there (:func:`.inputs.library_refused`). Fill-mask also checks its
mask token and ``targets=``. Generating tasks check each call as ``Loaded.generate`` does, before
``model.generate`` runs: a length past the model's positions (``max_new_tokens=10**12``
would run for ever), a token id outside its vocabulary, and an empty prompt for a model with no
``bos_token_id`` to start from (transformers' own message then asks for ``input_ids``); and, before
the pipeline's preprocessing, an empty batch, ``None``, a lone surrogate and a chat message without a
role or content (an ``IndexError`` or a ``TypeError`` there).

A subclass of the task's own pipeline class, passed to ``transformers.pipeline(pipeline_class=…)``
(transformers/pipelines/__init__.py, ``pipeline``): everything else is transformers' pipeline,
unchanged. It hooks ``Pipeline.forward`` (which knows the prompt's tokens) and
``_prepare_generate_kwargs`` (transformers/pipelines/base.py, the ``generate()`` keywords of one
call: the call's, the pipeline's and the task's defaults merged).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from ..errors import ConfigurationError
from .inputs import (
    FIRST_INPUT_NAMES,
    TASK_INPUTS,
    audio_inputs,
    check_mask,
    check_targets,
    check_texts,
    first_input,
    image_inputs,
    library_refused,
    video_inputs,
)
from .model_limits import check_counts, check_length, check_sampling, check_text, check_token_ids
from .plain_generate import check_message


class _Checked:
    """The checks, mixed in before the task's pipeline class."""

    model: Any
    _intelrt_prompt_width = 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._checked_inputs(args, kwargs)
        with library_refused(f"the {getattr(self, 'task', '') or type(self).__name__} pipeline"):
            return self._generating_call(args, kwargs)

    def _checked_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's inputs checked by the task's kind of input (images as bytes opened)."""
        task = getattr(self, "task", "")
        kind = TASK_INPUTS.get(task)
        given, value, name = first_input(args, kwargs, *FIRST_INPUT_NAMES)
        if kind is not None and not given:
            raise ConfigurationError(f"the {task} pipeline was called without an input; pass it first: pipe(INPUT)")
        if kind == "text":
            check_texts(value, name)
            if task == "fill-mask":
                check_mask(value, getattr(self, "tokenizer", None), name)
                if kwargs.get("targets") is not None:
                    check_targets(kwargs["targets"], self.tokenizer)  # type: ignore[attr-defined]
                top_k = kwargs.get("top_k")
                if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
                    raise ConfigurationError(f"top_k must be an int >= 1, got {top_k!r}")
        elif kind == "image":
            value = image_inputs(value, name)
        elif kind == "audio":
            extractor = getattr(self, "feature_extractor", None)
            value = audio_inputs(value, name, sampling_rate=getattr(extractor, "sampling_rate", None))
        elif kind == "video":
            value = video_inputs(value, name)
        if kind is None:
            for key, check in (("images", image_inputs), ("videos", video_inputs), ("audio", audio_inputs)):
                if kwargs.get(key) is not None:
                    kwargs = {**kwargs, key: check(kwargs[key], key)}
        elif args:
            args = (value, *args[1:])
        else:
            kwargs = {**kwargs, name: value}
        return args, kwargs

    def _generating_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Before the pipeline's preprocessing: an empty batch ends in an IndexError there (its first
        # item is read to tell chats from texts), None and a lone surrogate in TypeErrors.
        inputs = args[0] if args else kwargs.get("text_inputs", kwargs.get("inputs"))
        if isinstance(inputs, (list, tuple)) and not inputs:
            raise ConfigurationError("the pipeline was given an empty list of prompts; pass a prompt or a list of "
                                     "at least one")
        if inputs is None and (args or "text_inputs" in kwargs) and \
                type(self).__name__ == "TextGenerationPipeline":
            raise ConfigurationError("the pipeline was given None as its prompt; pass a string, a list of strings or "
                                     "chat messages")
        check_text(args)
        check_text(kwargs)
        if type(self).__name__ == "TextGenerationPipeline" and isinstance(inputs, (list, tuple)):
            # transformers reads a list whose first item is a dict as one chat (a list of such lists as
            # several); a message without a role or content ended in a TypeError of its preprocessing
            chats = [inputs] if isinstance(inputs[0], Mapping) else [
                c for c in inputs if isinstance(c, (list, tuple)) and c and isinstance(c[0], Mapping)]
            for chat in chats:
                for index, message in enumerate(chat):
                    if not isinstance(message, Mapping):
                        raise ConfigurationError(f"chat message {index} is a {type(message).__name__}, not a "
                                                 "{'role': …, 'content': …} dict")
                    check_message(index, message)
        return super().__call__(*args, **kwargs)  # type: ignore[misc]

    def forward(self, model_inputs: Any, **forward_params: Any) -> Any:
        ids = model_inputs.get("input_ids") if isinstance(model_inputs, Mapping) else None
        decoder_only = generates(type(self)) and not getattr(self.model.config, "is_encoder_decoder", False)
        width = int(ids.shape[-1]) if decoder_only and ids is not None and hasattr(ids, "shape") else 1
        if decoder_only and ids is not None and width == 0 and \
                getattr(getattr(self.model, "generation_config", None), "bos_token_id", None) is None:
            raise ConfigurationError("the prompt is empty, and this model has no bos_token_id to start generating "
                                     "from; pass some text")
        self._intelrt_prompt_width = width
        return super().forward(model_inputs, **forward_params)  # type: ignore[misc]

    def _prepare_generate_kwargs(self, generate_kwargs: dict[str, Any], **overrides: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = super()._prepare_generate_kwargs(generate_kwargs, **overrides)  # type: ignore[misc]
        settings: dict[str, Any] = self._get_set_generation_params(kwargs)  # type: ignore[attr-defined]
        check_counts(settings)
        check_token_ids(self.model, settings)
        check_sampling(self.model, settings)
        check_length(self.model, self._intelrt_prompt_width, settings)
        return kwargs


@cache
def checked(pipeline_class: type) -> type:
    """``pipeline_class`` with the checks (the same class for every call: transformers compares classes)."""
    return type(pipeline_class.__name__, (_Checked, pipeline_class),
                {"__module__": pipeline_class.__module__, "__qualname__": pipeline_class.__qualname__,
                 "__doc__": pipeline_class.__doc__})


def generates(pipeline_class: type) -> bool:
    """Whether the task's pipeline calls ``model.generate`` (transformers' ``_pipeline_calls_generate``)."""
    return bool(getattr(pipeline_class, "_pipeline_calls_generate", False))
