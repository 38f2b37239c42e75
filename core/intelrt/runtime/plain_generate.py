"""``Loaded.generate`` where transformers' ``generate`` runs the whole call (SPEC T3): encoder-decoder
models (T5, BART, Marian, Whisper …), speech models, vision-language models the plan keeps off the
fast loop, and calls that ask for transformers' own output structure (``return_dict_in_generate=True``).

Why ``generate`` and not intelrt's fast loop: the fast loop decodes decoder-only causal LMs from
token ids (its KV cache holds self-attention only). An encoder-decoder model runs its encoder
once and then decodes with a cross-attention cache over the encoder's output — exactly what
``generate`` does (``GenerationMixin._prepare_encoder_decoder_kwargs_for_generation``, then the
decoder loop), a step the loop does not have, so ``generate`` runs it and
``Loaded.last_generation`` says so. A vision-language model loaded for image-text-to-text whose
language model the loop steps decodes there after ``generate``'s prefill
(``decoding/vision_language.py``); the inputs are prepared here for both.

The inputs are what the checkpoint's own processor makes of the call — text, ``images=``,
``audio=`` (with ``sampling_rate=``), chat messages with image parts — or the model's inputs given
as tensors (``input_features=``, ``pixel_values=`` …), moved to the model's device, floating point
ones in the model's dtype (as transformers' pipelines do: ``Pipeline._ensure_tensor_on_device``,
``ImageTextToTextPipeline.preprocess``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .inputs import audio_inputs, image_inputs, video_inputs


def is_chat(prompt: object) -> bool:
    """One conversation: a list of ``{"role": …, "content": …}`` messages."""
    return isinstance(prompt, Sequence) and not isinstance(prompt, (str, bytes)) and bool(prompt) and all(
        isinstance(m, Mapping) and "role" in m for m in prompt)


def conversations(prompt: object) -> tuple[list[Any], bool] | None:
    """``(conversations, single)`` when ``prompt`` is one conversation or a list of them, each
    message checked (:func:`check_message`)."""
    found: tuple[list[Any], bool] | None = None
    if is_chat(prompt):
        found = [list(prompt)], True  # type: ignore[call-overload]
    elif isinstance(prompt, Sequence) and not isinstance(prompt, (str, bytes)) and prompt and all(
            is_chat(p) for p in prompt):
        found = [list(p) for p in prompt], False
    for conversation in found[0] if found else ():
        for index, message in enumerate(conversation):
            check_message(index, message)
    return found


def check_message(index: int, message: Mapping[str, Any]) -> None:
    """A chat message has a ``role`` that is a name and a ``content`` (text, or a list of parts);
    an assistant's may hold ``tool_calls`` instead. Chat templates render anything else without a
    word — a message of ``role: 5`` or with no content becomes an empty turn."""
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ConfigurationError(f"chat message {index} has role {role!r}: a role is a name such as 'user', "
                                 "'assistant' or 'system'")
    content = message.get("content")
    if content is None and not message.get("tool_calls"):
        raise ConfigurationError(f"chat message {index} ({role}) has no content; give it text, or a list of parts "
                                 "such as {'type': 'text', 'text': …}")
    if content is not None and not isinstance(content, (str, list)):
        raise ConfigurationError(f"chat message {index} ({role}) has content of type {type(content).__name__}; "
                                 "give it text, or a list of parts")


def model_input_names(kwargs: Mapping[str, Any]) -> list[str]:
    """The keywords of a ``generate`` call that are not generation settings but tensors for the model
    (``pixel_values``, ``input_features`` …): what ``GenerationConfig.update`` leaves unused."""
    from transformers import GenerationConfig

    unused = GenerationConfig().update(**{k: v for k, v in kwargs.items() if k != "generation_config"})
    return sorted(k for k, v in unused.items() if hasattr(v, "shape"))


DECODER_START = -1
"""``Prepared.prompt_width`` of an encoder-decoder call without ``decoder_input_ids``: its output
starts with the decoder's start token when ``generate`` prepends it (see :func:`new_tokens`)."""


@dataclass
class Prepared:
    """The model's inputs for one call, and how to read its output."""

    inputs: dict[str, Any]
    rows: int
    single: bool
    prompt_width: int
    """Tokens of the (left-padded) prompt a decoder-only model's output starts with; for an
    encoder-decoder model, the ``decoder_input_ids`` given, or :data:`DECODER_START`."""


def on_device(inputs: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """Every tensor on the model's device, floating point ones in its dtype."""
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        if hasattr(value, "to") and hasattr(value, "is_floating_point"):
            value = value.to(model.device)
            if value.is_floating_point():
                value = value.to(model.dtype)
        out[name] = value
    return out


def _texts(prompt: object) -> tuple[list[str] | None, bool]:
    if prompt is None:
        return None, True
    if isinstance(prompt, str):
        return [prompt], True
    if isinstance(prompt, Sequence) and prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt), False
    hint = ("; pass audio as audio=… (with sampling_rate=), images as images=…, token ids to generate_ids()"
            if hasattr(prompt, "shape") or isinstance(prompt, (bytes, bytearray)) or callable(getattr(prompt, "getbbox", None))
            else "")
    raise ConfigurationError("the prompt must be a str, a list of str, chat messages ([{'role': …, 'content': …}]) "
                             f"or a list of conversations; got {type(prompt).__name__}{hint}")


def prepare(model: Any, processor: Any, tokenizer: Any, prompt: object, *, images: Any = None, audio: Any = None,
            sampling_rate: int | None = None, videos: Any = None, tensors: Mapping[str, Any] | None = None,
            processor_kwargs: Mapping[str, Any] | None = None) -> Prepared:
    """The inputs for ``model.generate``: the processor's output for the prompt and media, or the
    tensors given (``input_ids``, ``input_features`` …) as they are."""
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    extra = dict(processor_kwargs or {})
    given = dict(tensors or {})
    chats = conversations(prompt)
    images = image_inputs(images, "images") if images is not None else None
    videos = video_inputs(videos, "videos") if videos is not None else None
    if audio is not None:
        audio_inputs(audio, "audio", arrays_only=True)
        _check_rate(processor, sampling_rate)
    media = {k: v for k, v in (("images", images), ("audio", audio), ("videos", videos)) if v is not None}
    _require_main_input(model, media, given)
    if chats is not None:
        handler = processor if hasattr(processor, "apply_chat_template") else tokenizer
        if handler is None or not hasattr(handler, "apply_chat_template"):
            raise ConfigurationError("chat messages need a processor or tokenizer with a chat template, and this "
                                     "model has neither")
        if media:
            raise ConfigurationError(f"{', '.join(media)}= and chat messages: put the images in the messages "
                                     "({'type': 'image', 'image': …}) instead")
        items, single = chats
        batch = _pad_left(items, encoder_decoder)
        made = handler.apply_chat_template(items if not single else items[0], add_generation_prompt=True,
                                           tokenize=True, return_dict=True, return_tensors="pt",
                                           **batch, **extra)
        inputs = {**dict(made), **given}
    elif media or prompt is not None:
        texts, single = _texts(prompt)
        inputs = {**_process(processor, tokenizer, texts, media, sampling_rate, encoder_decoder, extra), **given}
        if texts is None:
            single = _rows(inputs) == 1
    elif given:
        inputs, single = given, _rows(given) == 1
    else:
        raise ConfigurationError("generate() needs a prompt, images=, audio= or the model's inputs (input_ids=, "
                                 "input_features=, pixel_values= …)")
    inputs = on_device(inputs, model)
    rows = _rows(inputs)
    if encoder_decoder:
        start = inputs.get("decoder_input_ids")
        width = int(start.shape[-1]) if start is not None else DECODER_START
    else:
        ids = inputs.get("input_ids")
        width = int(ids.shape[-1]) if ids is not None else 0
    return Prepared(inputs=inputs, rows=rows, single=single, prompt_width=width)


MAIN_INPUTS = {"input_features": "audio=… (with sampling_rate=)", "input_values": "audio=… (with sampling_rate=)",
               "pixel_values": "images=…"}
"""A model's ``main_input_name`` that is not text, and the keyword that makes it."""


def _require_main_input(model: Any, media: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """A speech or vision model called with text alone: its ``generate`` raises a ``ValueError``
    asking for ``input_features`` (Whisper) or fails on missing pixels (an image encoder-decoder). A
    decoder that takes images beside text (Kosmos-2's main input is ``pixel_values``) generates from
    text alone, as plain transformers does."""
    main = getattr(model, "main_input_name", "input_ids")
    if main == "pixel_values" and not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return
    if main in MAIN_INPUTS and not media and main not in given and "encoder_outputs" not in given:
        raise ConfigurationError(f"{type(model).__name__} reads {main}, made from {MAIN_INPUTS[main].split('=')[0]}: "
                                 f"pass {MAIN_INPUTS[main]} (a prompt alone gives it nothing to read)")


def _check_rate(processor: Any, given: int | None) -> None:
    """``sampling_rate=`` against the feature extractor's: ``generate`` does not resample (its
    feature extractor raises a ``ValueError``)."""
    extractor = getattr(processor, "feature_extractor", processor)
    model = getattr(extractor, "sampling_rate", None)
    if given is not None and isinstance(model, int) and given != model:
        raise ConfigurationError(f"sampling_rate={given}: the model reads audio at {model} Hz, and generate() does not "
                                 f"resample; resample it first (e.g. librosa.resample(samples, orig_sr={given}, "
                                 f"target_sr={model})) and pass sampling_rate={model}")


def _pad_left(items: list[Any], encoder_decoder: bool) -> dict[str, Any]:
    """A batch of prompts for a decoder-only model is padded on the left (generate continues the
    last token of every row)."""
    if len(items) > 1:
        return {"padding": True, **({} if encoder_decoder else {"padding_side": "left"})}
    return {}


def _process(processor: Any, tokenizer: Any, texts: list[str] | None, media: dict[str, Any],
             sampling_rate: int | None, encoder_decoder: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """A multimodal processor takes everything in one call; otherwise the image processor takes
    ``images``, the feature extractor ``audio`` and the tokenizer the text."""
    from transformers import ProcessorMixin
    from transformers.image_processing_utils import BaseImageProcessor

    padding = _pad_left(texts or [], encoder_decoder)
    rate = {"sampling_rate": sampling_rate} if sampling_rate is not None else {}
    if isinstance(processor, ProcessorMixin):
        return dict(processor(text=texts, **media, **rate, return_tensors="pt", **padding, **extra))
    made: dict[str, Any] = {}
    if media:
        reads = "images" if isinstance(processor, BaseImageProcessor) else "audio"
        if processor is None or processor is tokenizer or set(media) != {reads}:
            what = type(processor).__name__ if processor is not None and processor is not tokenizer else "no processor"
            raise ConfigurationError(f"{', '.join(media)}=: this model has {what}, which reads "
                                     f"{reads if what != 'no processor' else 'nothing'}; save the model's processor "
                                     "beside it (save_pretrained) or pass the model's inputs as tensors")
        made.update(processor(media[reads], **(rate if reads == "audio" else {}), return_tensors="pt", **extra))
    if texts is not None:
        if tokenizer is None:
            raise ConfigurationError("a text prompt needs the model's tokenizer, and none is saved beside it")
        made.update(tokenizer(texts, return_tensors="pt", **padding, **({} if media else extra)))
    return made


def _rows(inputs: Mapping[str, Any]) -> int:
    for value in inputs.values():
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return 1


def run(model: Any, prepared: Prepared, settings: Mapping[str, Any], no_grad: bool = False) -> Any:
    """``model.generate`` on the prepared inputs (``settings``: the generation keywords)."""
    import torch

    clash = sorted(set(prepared.inputs) & set(settings))
    if clash:
        raise ConfigurationError(f"{', '.join(clash)} given twice: as generate() keywords and by the processor's "
                                 "output; pass them once")
    with torch.no_grad() if no_grad else torch.inference_mode():
        return model.generate(**prepared.inputs, **settings)


def new_tokens(output: Any, prepared: Prepared, eos: Sequence[int], model: Any) -> list[list[int]]:
    """Each row's generated ids, past the prompt (decoder-only) or the decoder's start token
    (encoder-decoder), up to and including its first end-of-sequence id.

    ``GenerationMixin.generate`` returns an encoder-decoder's decoder sequence with its start token
    first (``_prepare_decoder_input_ids_for_generation``); a model's own ``generate`` may not
    (Whisper's returns the tokens after its decoder prompt: ``generation_whisper.py:
    _postprocess_outputs``), so there the start token is cut only where every row begins with it."""
    from transformers import GenerationMixin

    from ..decoding.generation import until_eos

    sequences = output.sequences if hasattr(output, "sequences") else output
    width = prepared.prompt_width
    if width == DECODER_START:
        width = 1
        if getattr(type(model), "generate", None) is not GenerationMixin.generate:
            start = getattr(getattr(model, "generation_config", None), "decoder_start_token_id", None)
            start = start if start is not None else getattr(model.config, "decoder_start_token_id", None)
            width = int(start is not None and bool((sequences[:, :1] == start).all()))
    return until_eos(sequences[:, width:].tolist(), eos)


def eos_ids(model: Any, settings: Mapping[str, Any]) -> list[int]:
    """The end-of-sequence ids of this call (its own, else the model's generation config's)."""
    value = settings.get("eos_token_id", getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]
