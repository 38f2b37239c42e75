"""One check per kind of input — text, images, audio, video — shared by every pipeline intelrt
builds (:mod:`.checked_pipeline`) and ``Loaded.generate``: each names the argument, what was wrong
and the fix, before the library reads it. transformers' pipelines and processors let their own
(and PIL's, torch's, ffmpeg's) exceptions through on ordinary bad input — ``ValueError: At least
one input is required`` for ``None``, ``TypeError: Incorrect format used for image`` for bytes,
``RuntimeError: Kernel size can't be greater than actual input size`` for empty audio, an
``ImportError`` about torchaudio for another sampling rate — and some read bad input as good: a
0×0 image scored with confidence, a stereo array transcribed as one signal, NaN audio classified.
What passes these checks and still fails in the library is translated at the same boundary
(:func:`library_refused`), the original kept as the cause (shown with ``-v``).

Token ids and chat messages have their checks where they are read (``model_limits.check_prompts``,
``plain_generate.check_message``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, IntelrtError
from .model_limits import check_text

IMAGE_FORMS = "a PIL image, a path or http(s) URL of an image file, an array of pixels, or a list of them"
AUDIO_FORMS = ("a 1-D array of samples (numpy or torch), {'raw': array, 'sampling_rate': HZ}, a path or http(s) URL "
               "of an audio file, or a list of them")


def _a(value: object) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _items(value: object, argument: str, forms: str) -> tuple[list[Any], bool]:
    """``(items, batched)``: the inputs of one call, a list refused when empty and ``None`` refused."""
    if value is None:
        raise ConfigurationError(f"{argument} is None; pass {forms}")
    if isinstance(value, (list, tuple)):
        if not value:
            raise ConfigurationError(f"{argument} is an empty list; pass {forms}")
        return list(value), True
    return [value], False


def _name(argument: str, index: int, batched: bool) -> str:
    return f"{argument}[{index}]" if batched else argument


# -- text ------------------------------------------------------------------------------------------

def check_texts(value: object, argument: str = "the text") -> None:
    """Text to tokenize: a non-empty str or a list of them (``{'text': …, 'text_pair': …}`` too);
    no lone surrogate (:func:`~.model_limits.check_text`)."""
    items, batched = _items(value, argument, "a string or a list of strings")
    for index, item in enumerate(items):
        name = _name(argument, index, batched)
        if isinstance(item, Mapping):
            texts = [v for k, v in item.items() if k in ("text", "text_pair")]
            if not texts:
                raise ConfigurationError(f"{name} is a dict without 'text'; pass a string, or {{'text': …, "
                                         "'text_pair': …}")
        else:
            texts = [item]
        for text in texts:
            if not isinstance(text, str):
                raise ConfigurationError(f"{name} is {_a(text)}, not text; pass a string or a list of "
                                         "strings")
            if not text.strip():
                raise ConfigurationError(f"{name} is {'empty' if not text else 'only whitespace'}; pass some text")
    check_text(value)


def check_mask(value: object, tokenizer: Any, argument: str = "the text") -> None:
    """Each text of a fill-mask call holds the tokenizer's mask token (transformers raises a
    ``PipelineException`` from inside its preprocessing)."""
    mask = getattr(tokenizer, "mask_token", None)
    if not mask:
        return
    items, batched = _items(value, argument, "a string or a list of strings")
    for index, text in enumerate(items):
        if isinstance(text, str) and mask not in text:
            raise ConfigurationError(f"{_name(argument, index, batched)} holds no mask token ({mask}): put {mask} where "
                                     f"the word to fill goes, e.g. 'Paris is the {mask} of France.'")


def check_targets(targets: object, tokenizer: Any) -> None:
    """Fill-mask ``targets=``: each one token of the vocabulary. transformers scores the first token
    of a longer target, and ``<unk>`` for one it does not know, with a warning only."""
    items, _ = _items(targets, "targets", "a word of the model's vocabulary, or a list of them")
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    unknown = getattr(tokenizer, "unk_token_id", None)
    for target in items:
        if not isinstance(target, str) or not target.strip():
            raise ConfigurationError(f"targets holds {target!r}: each target is a word (a non-empty string)")
        if target in vocab:
            continue
        ids = tokenizer(target, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or ids[0] == unknown:
            pieces = tokenizer.convert_ids_to_tokens(ids) if ids else []
            why = (f"it is {len(ids)} tokens ({', '.join(map(str, pieces))})" if len(ids) > 1 else
                   "the vocabulary does not hold it")
            raise ConfigurationError(f"targets: {target!r} is not one token of this model's vocabulary ({why}); "
                                     "fill-mask scores single tokens: pass words the tokenizer keeps whole")


# -- images ----------------------------------------------------------------------------------------

def _open_image(data: bytes) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except UnidentifiedImageError as exc:
        raise ConfigurationError("PIL knows no image format that starts so") from exc
    except (OSError, ValueError) as exc:  # a truncated or damaged file of a known format
        raise ConfigurationError(f"{type(exc).__name__}: {exc}") from exc
    return image


def image_inputs(value: object, argument: str = "images") -> Any:
    """``value`` with each image checked: a PIL image or array with pixels (not 0×0), a path that
    is an image file, a URL (fetched by transformers); bytes of an image file become a PIL image
    (transformers takes no bytes)."""
    items, batched = _items(value, argument, IMAGE_FORMS)
    out = [_image(item, _name(argument, index, batched)) for index, item in enumerate(items)]
    return out if batched else out[0]


def _image(item: object, name: str) -> Any:
    if isinstance(item, (bytes, bytearray)):
        if not item:
            raise ConfigurationError(f"{name} is empty bytes; pass {IMAGE_FORMS}")
        try:
            return _open_image(bytes(item))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{name}: {len(item)} bytes that are not an image PIL can read ({exc}); pass "
                                     "the bytes of a PNG, JPEG … file, or a PIL image") from exc.__cause__
    if isinstance(item, str):
        if item.startswith(("http://", "https://", "data:image/")):
            return item
        if os.path.isdir(item):
            raise ConfigurationError(f"{name}={item!r} is a directory; pass the path of an image file")
        if os.path.isfile(item):
            with open(item, "rb") as fh:
                head = fh.read()
            try:
                _open_image(head)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{name}={item!r} is not an image file PIL can read ({exc}); pass a PNG, "
                                         "JPEG … file") from exc.__cause__
            return item
        if _is_base64_image(item):
            return item
        raise ConfigurationError(f"{name}={item[:200]!r}: no such file (relative paths start from "
                                 f"{os.getcwd()}); pass {IMAGE_FORMS}")
    shape = _shape(item)
    if shape is not None:
        if not shape or 0 in shape:
            raise ConfigurationError(f"{name} has no pixels (size {'×'.join(map(str, shape)) or 'none'}); pass an "
                                     "image at least 1×1")
        return item
    if isinstance(item, Mapping) and "image" in item:
        return {**item, "image": _image(item["image"], f"{name}['image']")}
    raise ConfigurationError(f"{name} is {_a(item)}; pass {IMAGE_FORMS}")


def _shape(item: object) -> tuple[int, ...] | None:
    """Pixels or samples as a shape: a PIL image's ``(width, height)``, an array's ``shape``."""
    if callable(getattr(item, "getbbox", None)):
        return tuple(item.size)  # type: ignore[attr-defined]
    shape = getattr(item, "shape", None)
    return tuple(int(n) for n in shape) if shape is not None else None


def _is_base64_image(text: str) -> bool:
    import base64
    import binascii

    if len(text) < 16:
        return False
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        _open_image(data)
    except ConfigurationError:
        return False
    return True


# -- audio -----------------------------------------------------------------------------------------

def audio_inputs(value: object, argument: str = "audio", *, sampling_rate: int | None = None,
                 arrays_only: bool = False) -> Any:
    """``value`` with each clip checked: a 1-D array with samples, all finite; a dict with its
    ``sampling_rate``; a file that exists (decoded by ffmpeg, which must be installed).
    ``sampling_rate``: the model's, to name a clip recorded at another rate that cannot be resampled;
    ``arrays_only``: a processor's input (``Loaded.generate``), which decodes no files."""
    items, batched = _items(value, argument, AUDIO_FORMS)
    for index, item in enumerate(items):
        name = _name(argument, index, batched)
        if arrays_only and _shape(item) is None:
            raise ConfigurationError(f"{name} is {_a(item)}; generate() takes audio as arrays of samples: decode a "
                                     "file first (soundfile.read(path)) and pass audio=samples, sampling_rate=HZ")
        _audio(item, name, sampling_rate)
    return value


def _needs_ffmpeg(name: str, what: str) -> None:
    if shutil.which("ffmpeg") is None:
        raise ConfigurationError(f"{name}: {what} is decoded by ffmpeg, which is not installed (not on PATH); install "
                                 "ffmpeg, or decode it yourself (soundfile.read(path)) and pass {'raw': samples, "
                                 "'sampling_rate': HZ}")


def _audio(item: object, name: str, sampling_rate: int | None) -> None:
    if isinstance(item, str):
        if item.startswith(("http://", "https://")):
            _needs_ffmpeg(name, "an audio file from a URL")
            return
        if not os.path.isfile(item):
            why = "is a directory" if os.path.isdir(item) else \
                f"no such file (relative paths start from {os.getcwd()})"
            raise ConfigurationError(f"{name}={item[:200]!r}: {why}; pass {AUDIO_FORMS}")
        _needs_ffmpeg(name, f"the file {item}")
        return
    if isinstance(item, (bytes, bytearray)):
        if not item:
            raise ConfigurationError(f"{name} is empty bytes; pass {AUDIO_FORMS}")
        _needs_ffmpeg(name, "audio given as bytes")
        return
    if isinstance(item, Mapping):
        samples = item.get("raw", item.get("array"))
        rate = item.get("sampling_rate")
        if samples is None or rate is None:
            raise ConfigurationError(f"{name} is a dict without {'raw' if samples is None else 'sampling_rate'}; pass "
                                     "{'raw': samples, 'sampling_rate': HZ}")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
            raise ConfigurationError(f"{name}['sampling_rate'] is {rate!r}; pass the clip's rate in Hz (an int > 0)")
        check_sampling_rate(rate, sampling_rate, name)
        _samples(samples, f"{name}['raw']")
        return
    _samples(item, name)


def check_sampling_rate(given: int | None, model: int | None, name: str = "audio") -> None:
    """A clip at another rate than the model's: transformers' pipelines resample it with torchaudio
    and raise an ``ImportError`` without it; its feature extractors raise a ``ValueError``."""
    if given is None or model is None or given == model:
        return
    import importlib.util

    if importlib.util.find_spec("torchaudio") is None:
        raise ConfigurationError(
            f"{name} is sampled at {given} Hz and the model reads {model} Hz; resample it first (e.g. "
            f"librosa.resample(samples, orig_sr={given}, target_sr={model})) and pass sampling_rate={model} — or "
            "install torchaudio, with which the pipelines resample it")


def _samples(samples: object, name: str) -> None:
    shape = _shape(samples)
    if shape is None:
        raise ConfigurationError(f"{name} is {_a(samples)}; pass {AUDIO_FORMS}")
    if len(shape) != 1:
        raise ConfigurationError(
            f"{name} has shape {shape}: audio is one channel of samples (a 1-D array). Mix channels down "
            "(samples.mean(axis=0) for channels first), or pass several clips as a list of 1-D arrays")
    if shape[0] == 0:
        raise ConfigurationError(f"{name} has no samples; pass a clip of at least a fraction of a second")
    import numpy as np

    array = samples.detach().cpu().numpy() if hasattr(samples, "detach") else np.asarray(samples)
    if array.dtype.kind in "fc" and not np.isfinite(array).all():
        first = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ConfigurationError(f"{name} holds NaN or infinite samples (the first at {first}); pass finite samples "
                                 "(np.nan_to_num fills them)")


# -- video -----------------------------------------------------------------------------------------

def video_inputs(value: object, argument: str = "videos") -> Any:
    """Each video a path or URL of a file that exists, or frames (an array or a list of images) that
    are not empty."""
    items, batched = _items(value, argument, "a path or URL of a video file, frames as an array, or a list of them")
    for index, item in enumerate(items):
        name = _name(argument, index, batched)
        if isinstance(item, str):
            if not item.startswith(("http://", "https://")) and not os.path.isfile(item):
                raise ConfigurationError(f"{name}={item[:200]!r}: no such file (relative paths start from "
                                         f"{os.getcwd()})")
            continue
        if isinstance(item, (list, tuple)):
            if not item:
                raise ConfigurationError(f"{name} is an empty list of frames")
            image_inputs(list(item), f"{name}")
            continue
        shape = _shape(item)
        if shape is None or not shape or 0 in shape:
            raise ConfigurationError(f"{name} is {'a ' + type(item).__name__ if shape is None else f'of shape {shape}'}"
                                     "; pass a video file, or frames (an array of shape frames × height × width × "
                                     "channels)")
    return value


# -- what passes the checks and still fails in the library ---------------------------------------

#: Where a library reads inputs: an error raised there is about the input, not about intelrt.
_READERS = ("/transformers/pipelines/", "/transformers/image_utils.py", "/transformers/audio_utils.py",
            "/transformers/video_utils.py", "/transformers/feature_extraction_", "/transformers/image_processing_",
            "/transformers/tokenization_", "/transformers/processing_utils.py", "/transformers/models/", "/PIL/",
            "/torch/nn/modules/conv.py", "/httpx", "/requests/")
_TOO_SHORT = "Kernel size can't be greater than actual input size"


@contextlib.contextmanager
def library_refused(what: str) -> Iterator[None]:
    """An exception of transformers' (PIL's, torch's convolution, the HTTP client's) reading of the
    inputs as a :class:`ConfigurationError` quoting it; the original is its cause (``-v``). An
    error raised elsewhere (the model's forward, intelrt) passes unchanged."""
    try:
        yield
    except IntelrtError:
        raise
    except Exception as exc:
        module = type(exc).__module__.split(".")[0]
        fetching = module in ("httpx", "httpx2", "requests", "urllib3")
        frames = traceback.extract_tb(exc.__traceback__)
        where = frames[-1].filename.replace(os.sep, "/") if frames else ""
        message = " ".join(str(exc).split())[:400]
        too_short = isinstance(exc, RuntimeError) and _TOO_SHORT in message
        read_there = isinstance(exc, (ValueError, TypeError, KeyError, IndexError, OSError, ImportError)) and any(
            reader in where for reader in _READERS)
        if not (fetching or too_short or read_there or type(exc).__name__ == "PipelineException"):
            raise
        if too_short:
            message = f"the audio is too short for the model's first convolution ({message})"
        elif fetching:
            message = f"fetching a URL failed ({type(exc).__name__}: {message}); download the file and pass its path"
        raise ConfigurationError(f"{what} refused its input: {message}. Check the input against what the task "
                                 "takes (docs/api.md, Tasks)") from exc


TASK_INPUTS = {
    **dict.fromkeys(("feature-extraction", "fill-mask", "text-classification", "token-classification",
                     "zero-shot-classification", "text-to-audio"), "text"),
    **dict.fromkeys(("depth-estimation", "image-classification", "image-feature-extraction", "image-segmentation",
                     "mask-generation", "object-detection", "zero-shot-image-classification",
                     "zero-shot-object-detection", "document-question-answering"), "image"),
    **dict.fromkeys(("audio-classification", "automatic-speech-recognition", "zero-shot-audio-classification"),
                    "audio"),
    "video-classification": "video",
}
"""The kind of a pipeline task's first input (its positional argument); tasks not listed take
several inputs by keyword (``image-text-to-text``: ``images=``, ``text=``), checked by name."""
FIRST_INPUT_NAMES = ("inputs", "text_inputs", "sequences", "images", "image", "audio", "videos")
"""What the pipelines call their first input when it is passed by keyword."""


def first_input(args: Sequence[Any], kwargs: Mapping[str, Any], *names: str) -> tuple[bool, Any, str]:
    """``(given, value, name)``: a call's first positional argument, or its first keyword of ``names``."""
    if args:
        return True, args[0], "the input"
    for name in names:
        if name in kwargs:
            return True, kwargs[name], name
    return False, None, "the input"
