"""Fault catalogue: every kind of input the pipelines and ``Loaded.generate`` take, beyond the causal
LM's text — text for the token-classification and fill-mask pipelines, images for image
classification, audio for speech recognition (CTC and Whisper) and audio classification, the
encoder-decoder, CTC and speech models' ``generate`` — given what a careless caller passes:
``None``, an empty or non-string text, a prompt without a mask, a fill-mask target that is not one
token, bytes that are not an image, a path that does not exist, a 0×0 image, empty, NaN or stereo
audio, another sampling rate, a text prompt to a speech model. transformers', PIL's and torch's
exceptions came through raw (about twenty tracebacks), some blaming ffmpeg or torchaudio; a 0×0
image was scored with confidence and a stereo array transcribed as one signal. One check per kind of
input (``intelrt.runtime.inputs``) now answers all of them, naming the argument and the fix.

Not covered here (no tiny checkpoint of the kind in the test zoo): video classification's
``videos`` (the same :func:`intelrt.runtime.inputs.video_inputs` serves ``Loaded.generate``'s
``videos=``), document question answering. A vision-language model's ``images=`` is (LLaVA). Chat messages and token ids of the causal LM are in
``test_faults_pipeline.py`` / ``test_faults_generate.py``.

Each checkpoint is a tiny random one of ``tests/zoo/heads.py``, built once and loaded once per module.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faults import Catalogue, Fault, call, check, error, works
from zoo import heads, table

import intelrt

catalogue = Catalogue(__file__)
RATE = heads.SAMPLING_RATE
CLIP = np.random.default_rng(1).standard_normal(RATE // 2).astype(np.float32)
NOT_AN_IMAGE = b"GIF89a? not really"


@cache
def _loaded(head: str) -> Any:
    import torch

    torch.set_num_threads(1)
    return intelrt.load(heads.build_head(head, table.models_root()))


@cache
def _pipe(head: str, task: str) -> Any:
    return _loaded(head).pipeline(task)


def _run(spec: tuple[Any, ...]) -> Any:
    head, how, args, kwargs = spec
    if how == "generate":
        return _loaded(head).generate(*args, **kwargs)
    return _pipe(head, how)(*args, **kwargs)


def _case(id: str, fault: str, head: str, how: str, args: tuple[Any, ...], kwargs: dict[str, Any], *says: str,
          risk: str = "traceback", shown: str = "") -> Fault:
    call_text = "generate" if how == "generate" else f"pipeline({how!r})"
    trigger = f"{head}: {call_text}({shown or ', '.join(map(repr, args))}{', ' if kwargs else ''}" \
              f"{', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    return error(f"inputs-{id}", "inputs", fault, *says, risk=risk, error="ConfigurationError", trigger=trigger,
                 data=(head, how, args, kwargs))


TEXT = [
    _case("token-classification-none", "token classification of None (ValueError: At least one input is required)",
          "bert-token", "token-classification", (None,), {}, "the input is None", "a string"),
    _case("token-classification-int", "… of a number", "bert-token", "token-classification", (5,), {},
          "the input is an int, not text"),
    _case("token-classification-empty-list", "… of an empty list", "bert-token", "token-classification", ([],), {},
          "empty list"),
    _case("token-classification-list-with-int", "… of a list holding a number (ValueError: … must be an "
          "untokenized string)", "bert-token", "token-classification", (["Intel", 3],), {}, "the input[1] is an int"),
    _case("token-classification-empty-text", "… of an empty string (answered [] without a word)", "bert-token",
          "token-classification", ("",), {}, "the input is empty", "pass some text", risk="silent wrong"),
    _case("token-classification-blank-text", "… of whitespace only", "bert-token", "token-classification",
          ("   ",), {}, "only whitespace", risk="silent wrong"),
    _case("token-classification-lone-surrogate", "… of a lone surrogate (TypeError from the tokenizer)",
          "bert-token", "token-classification", ("w1 \ud800",), {}, "lone surrogate"),
    _case("fill-mask-without-mask", "fill-mask of a text without the mask token (PipelineException)", "bert-masked",
          "fill-mask", ("w1 w2 w3",), {}, "holds no mask token (<mask>)", "put <mask> where"),
    _case("fill-mask-none", "fill-mask of None (ValueError from the tokenizer)", "bert-masked", "fill-mask",
          (None,), {}, "the input is None"),
    _case("fill-mask-int", "fill-mask of a number", "bert-masked", "fill-mask", (5,), {}, "is an int, not text"),
    _case("fill-mask-empty", "fill-mask of an empty string", "bert-masked", "fill-mask", ("",), {},
          "the input is empty"),
    _case("fill-mask-target-two-tokens", "a fill-mask target that is two tokens (its first token scored, a "
          "warning only)", "bert-masked", "fill-mask", ("w1 <mask> w2",), {"targets": ["w1 w2"]},
          "'w1 w2' is not one token", "2 tokens", risk="silent wrong"),
    _case("fill-mask-target-unknown", "a fill-mask target the vocabulary does not hold (<unk> scored instead)",
          "bert-masked", "fill-mask", ("w1 <mask> w2",), {"targets": "zzzzqq"},
          "'zzzzqq' is not one token", "does not hold it", risk="silent wrong"),
    _case("fill-mask-targets-empty", "fill-mask with targets=[] (ValueError)", "bert-masked", "fill-mask",
          ("w1 <mask> w2",), {"targets": []}, "targets is an empty list"),
    _case("fill-mask-top-k-zero", "fill-mask with top_k=0 (answered [])", "bert-masked", "fill-mask",
          ("w1 <mask> w2",), {"top_k": 0}, "top_k must be an int >= 1", risk="silent wrong"),
]

IMAGES = [
    _case("image-classification-bytes-not-an-image", "image classification of bytes that are not an image "
          "(TypeError: Incorrect format used for image)", "vit", "image-classification", (NOT_AN_IMAGE,), {},
          "18 bytes that are not an image", "PNG, JPEG", shown="b'GIF89a? not really'"),
    _case("image-classification-missing-path", "… of a path that does not exist (a ValueError about base64)",
          "vit", "image-classification", ("no/such/photo.png",), {}, "'no/such/photo.png': no such file",
          risk="wrong culprit"),
    _case("image-classification-text-file", "… of a file that is not an image (PIL.UnidentifiedImageError)", "vit",
          "image-classification", (str(Path(__file__)),), {}, "is not an image file PIL can read",
          shown="'tests/integration/test_faults_inputs.py'"),
    _case("image-classification-none", "… of None", "vit", "image-classification", (None,), {}, "the input is None"),
    _case("image-classification-int", "… of a number", "vit", "image-classification", (5,), {}, "the input is an int"),
    _case("image-classification-empty-list", "… of an empty list (IndexError)", "vit", "image-classification", ([],),
          {}, "empty list"),
    _case("image-classification-0x0", "… of a 0×0 image (scored with confidence)", "vit", "image-classification",
          (None,), {"_image": (0, 0)}, "has no pixels (size 0×0)", risk="silent wrong", shown="Image.new('RGB', (0, 0))"),
    _case("image-classification-empty-array", "… of an array of 0×32 pixels", "vit", "image-classification",
          (np.zeros((0, 32, 3), dtype=np.uint8),), {}, "has no pixels", risk="silent wrong",
          shown="np.zeros((0, 32, 3))"),
    _case("image-classification-url-unreachable", "… of a URL that cannot be fetched (httpx.ConnectError)", "vit",
          "image-classification", ("http://127.0.0.1:9/photo.png",), {}, "fetching a URL failed", "ConnectError"),
]

AUDIO = [
    _case(f"{short}-{what}", f"{task.replace('-', ' ')} of {fault}", head, task, (value,), {}, *says, risk=risk,
          shown=shown)
    for short, task, head in (("asr-ctc", "automatic-speech-recognition", "wav2vec2-ctc"),
                              ("audio-classification", "audio-classification", "wav2vec2-audio"))
    for what, fault, value, says, risk, shown in (
        ("empty", "an empty array (RuntimeError: Kernel size can't be greater than actual input size)",
         np.zeros(0, dtype=np.float32), ("the input has no samples",), "traceback", "np.zeros(0)"),
        ("nan", "an array of NaN (transcribed / scored nan without a word)", np.full(800, np.nan, dtype=np.float32),
         ("NaN or infinite samples", "the first at 0"), "silent wrong", "np.full(800, np.nan)"),
        ("stereo", "a stereo array (read as one signal, or a ValueError)", np.zeros((2, 800), dtype=np.float32),
         ("shape (2, 800)", "one channel", "mean(axis=0)"), "silent wrong", "np.zeros((2, 800))"),
        ("other-rate", "a clip at 8000 Hz without torchaudio (ImportError blaming torchaudio)",
         {"raw": CLIP, "sampling_rate": 8000}, ("8000 Hz", f"the model reads {RATE} Hz", "librosa.resample"),
         "wrong culprit", "{'raw': CLIP, 'sampling_rate': 8000}"),
        ("missing-path", "a path that does not exist (FileNotFoundError)", "no/such/clip.wav",
         ("'no/such/clip.wav': no such file",), "traceback", ""),
        ("bytes-without-ffmpeg", "bytes, with no ffmpeg installed (ValueError: ffmpeg was not found)",
         b"RIFF....WAVE", ("decoded by ffmpeg, which is not installed", "soundfile.read"), "wrong culprit", ""),
        ("none", "None (TypeError: We expect a numpy ndarray)", None, ("the input is None",), "traceback", ""),
        ("dict-without-rate", "a dict without its sampling_rate", {"raw": CLIP},
         ("without sampling_rate",), "traceback", "{'raw': CLIP}"),
    )
]

GENERATE = [
    _case("generate-t5-max-new-tokens-1e12", "T5 (no position key in its config) with max_new_tokens=10**12 "
          "(decoded until killed)", "t5", "generate", ("translate: hi",), {"max_new_tokens": 10**12},
          "no position limit", "caps a call at 65536", "max_new_tokens=65535 or less", risk="hang"),
    _case("generate-t5-max-length-1e12", "T5 with max_length=10**12", "t5", "generate", ("translate: hi",),
          {"max_length": 10**12}, "max_length=65536 or less", risk="hang"),
    _case("generate-t5-temperature-greedy", "T5 with temperature=0.5 and no do_sample (ignored, a warning)", "t5",
          "generate", ("translate: hi",), {"temperature": 0.5, "max_new_tokens": 2}, "temperature=0.5",
          "only when sampling", "do_sample=True", risk="silent wrong"),
    _case("generate-ctc", "Loaded.generate on a CTC model (NotImplementedError: get_input_embeddings)",
          "wav2vec2-ctc", "generate", (), {"audio": CLIP, "sampling_rate": RATE}, "does not generate",
          "loaded.pipeline()", shown="audio=CLIP, sampling_rate=1600"),
    _case("generate-whisper-text-only", "Whisper's generate given text alone (ValueError: provide input_features)",
          "whisper", "generate", ("hello",), {}, "reads input_features", "pass audio="),
    _case("generate-whisper-empty-audio", "Whisper's generate with empty audio", "whisper", "generate", (),
          {"audio": np.zeros(0, dtype=np.float32), "sampling_rate": RATE}, "audio has no samples",
          shown="audio=np.zeros(0)"),
    _case("generate-whisper-nan-audio", "Whisper's generate with NaN audio (transcribed)", "whisper", "generate", (),
          {"audio": np.full(800, np.nan, dtype=np.float32), "sampling_rate": RATE}, "NaN", risk="silent wrong",
          shown="audio=np.full(800, np.nan)"),
    _case("generate-whisper-other-rate", "Whisper's generate at another sampling rate (ValueError)", "whisper",
          "generate", (), {"audio": CLIP, "sampling_rate": 8000, "max_new_tokens": 2}, "sampling_rate=8000",
          f"reads audio at {RATE} Hz", "does not resample", shown="audio=CLIP, sampling_rate=8000"),
    _case("generate-whisper-audio-path", "Whisper's generate with a file path as audio (the feature extractor "
          "cannot read it)", "whisper", "generate", (), {"audio": "clip.wav", "sampling_rate": RATE},
          "audio is a str", "soundfile.read", shown="audio='clip.wav'"),
    _case("generate-vlm-bytes-not-an-image", "a vision-language model's generate with images= bytes that are not "
          "an image", "llava", "generate", ("w1 <image> w2",), {"images": NOT_AN_IMAGE, "max_new_tokens": 2},
          "images: 18 bytes that are not an image", shown="'w1 <image> w2', images=b'GIF89a? not really'"),
    _case("generate-vlm-missing-image-path", "… with images= a path that does not exist", "llava", "generate",
          ("w1 <image> w2",), {"images": "no/such/photo.png", "max_new_tokens": 2}, "'no/such/photo.png': no such file",
          risk="wrong culprit"),
    _case("generate-vlm-empty-image-list", "… with images=[]", "llava", "generate", ("w1 <image> w2",),
          {"images": [], "max_new_tokens": 2}, "images is an empty list"),
    _case("generate-whisper-array-as-prompt", "Whisper's generate given the samples as the prompt", "whisper",
          "generate", (CLIP,), {}, "reads input_features", "audio=", shown="CLIP"),
]


@catalogue.cases(TEXT)
def test_text_that_is_not_text_is_named_before_the_pipeline_reads_it(case: Fault) -> None:
    check(case, call(lambda: _run(case.data)))


@catalogue.cases(IMAGES)
def test_images_that_are_not_images_are_named_before_the_pipeline_reads_them(case: Fault) -> None:
    head, how, args, kwargs = case.data
    if "_image" in kwargs:
        from PIL import Image

        args, kwargs = (Image.new("RGB", kwargs["_image"]),), {}
    check(case, call(lambda: _run((head, how, args, kwargs))))


@catalogue.cases(AUDIO)
def test_audio_that_cannot_be_heard_is_named_before_the_pipeline_reads_it(case: Fault,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no ffmpeg on PATH, as on this machine and many others
    check(case, call(lambda: _run(case.data)))


@catalogue.cases(GENERATE)
def test_generate_on_seq2seq_ctc_and_speech_models_names_bad_input(case: Fault) -> None:
    check(case, call(lambda: _run(case.data)))


WORKS = [
    works("inputs-image-classification-bytes-of-a-png", "inputs", "image classification of the bytes of a PNG file "
          "(transformers takes no bytes: they are opened)", trigger="pipeline('image-classification')(png_bytes)",
          data="png"),
    works("inputs-image-classification-1x1", "inputs", "a 1×1 image: the smallest that has pixels",
          trigger="pipeline('image-classification')(Image.new('RGB', (1, 1)))", data="1x1"),
    works("inputs-asr-ctc-clip", "inputs", "speech recognition of a mono clip at the model's rate",
          trigger="pipeline('automatic-speech-recognition')(CLIP)", data="asr"),
    works("inputs-fill-mask-target-in-vocabulary", "inputs", "fill-mask with a target the vocabulary holds",
          trigger="pipeline('fill-mask')('w1 <mask> w2', targets=['w5'])", data="target"),
    works("inputs-whisper-generate-clip", "inputs", "Whisper's generate on a clip at the model's rate",
          trigger=f"generate(audio=CLIP, sampling_rate={RATE}, max_new_tokens=2)", data="whisper"),
]


@catalogue.cases(WORKS)
def test_good_input_of_each_kind_still_answers(case: Fault) -> None:
    import io

    from PIL import Image

    def run() -> Any:
        if case.data == "png":
            buffer = io.BytesIO()
            Image.new("RGB", (32, 32), "red").save(buffer, format="PNG")
            return _pipe("vit", "image-classification")(buffer.getvalue())
        if case.data == "1x1":
            return _pipe("vit", "image-classification")(Image.new("RGB", (1, 1)))
        if case.data == "asr":
            return _pipe("wav2vec2-ctc", "automatic-speech-recognition")(CLIP)
        if case.data == "target":
            return _pipe("bert-masked", "fill-mask")("w1 <mask> w2", targets=["w5"])
        return _loaded("whisper").generate(audio=CLIP, sampling_rate=RATE, max_new_tokens=2, min_new_tokens=2)

    seen = check(case, call(run))
    if case.data in ("png", "1x1"):
        assert len(seen.value) == 3 and {row["label"] for row in seen.value} == set(heads.LABELS)
    elif case.data == "asr":
        assert isinstance(seen.value["text"], str)
    elif case.data == "target":
        assert [row["token_str"] for row in seen.value] == ["w5"]
    else:
        assert isinstance(seen.value, str)
