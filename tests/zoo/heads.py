"""Tiny random checkpoints of every kind of head, with the processors a real checkpoint carries
(tokenizer, image processor, feature extractor, multimodal processor), saved as their hub class —
what a new user downloads, in miniature. Each is built once per config fingerprint into the zoo's
cache (``build._cached`` / ``build._publish``).

``build_head(name, root)`` builds one of :data:`HEADS`; ``images()`` / ``audio()`` are the inputs
the tests feed both sides. Nothing here touches intelrt.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import build, shrink

IMAGE = 32
"""Image side of the vision heads (patches of 8: 16 patches)."""
SAMPLING_RATE = 1600
"""Audio sampling rate of the speech heads (Whisper: 1 s is 32 feature frames)."""
LABELS = ("label_0", "label_1", "label_2")
NLI_LABELS = ("contradiction", "entailment", "neutral")
TOKEN_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
IMAGE_TOKEN, MASK_TOKEN = "<image>", "<mask>"
IMAGE_TOKEN_ID, MASK_TOKEN_ID = 254, 253
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %} <image> {% else %} {{ c['text'] }} "
    "{% endif %}{% endfor %}{% endif %} </s> {% endfor %}{% if add_generation_prompt %} w7 : {% endif %}")
"""A chat template over the word-level vocabulary (``<image>`` where an image part is)."""


def images(count: int = 2) -> list[Any]:
    """``count`` random RGB images of different sizes (seeded)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (IMAGE + 8 * i, IMAGE + 4 * i, 3), dtype=np.uint8))
            for i in range(count)]


def audio(count: int = 2) -> list[Any]:
    """``count`` random mono clips of different lengths at :data:`SAMPLING_RATE` (seeded)."""
    import numpy as np

    rng = np.random.default_rng(1)
    return [rng.standard_normal(SAMPLING_RATE // 2 + 200 * i).astype(np.float32) for i in range(count)]


def word_tokenizer(extra: dict[str, int] | None = None, max_length: int = 128, **special: str) -> Any:
    """The zoo's word-level tokenizer (``w3 .. w223``), with ``extra`` tokens and specials
    (``mask_token="<mask>"`` …)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = dict(build.TOKENIZER_SPECIALS)
    vocab.update({word: int(word[1:]) for word in build.WORDS})
    vocab.update(extra or {})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", shrink.BOS_ID), ("</s>", shrink.EOS_ID)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", model_max_length=max_length, **special)


def whisper_tokenizer() -> Any:
    """A byte-level Whisper tokenizer: the 256 bytes, then Whisper's special tokens (ids 256 …)."""
    from tokenizers import pre_tokenizers
    from transformers import WhisperTokenizer

    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for name in WHISPER_SPECIALS:
        vocab[name] = len(vocab)
    return WhisperTokenizer(vocab=vocab, merges=[])


WHISPER_SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|translate|>",
                    "<|notimestamps|>")


def _labels(config: dict[str, Any], names: tuple[str, ...]) -> None:
    config["id2label"] = {str(i): n for i, n in enumerate(names)}
    config["label2id"] = {n: i for i, n in enumerate(names)}


def _vit(config: dict[str, Any]) -> dict[str, Any]:
    config.update(image_size=IMAGE, patch_size=8, encoder_stride=8)
    return config


Builder = Callable[[], tuple[Any, list[Any]]]
"""Returns (model, processors to save beside it)."""


def _model(model_type: str, auto: str, config_dict: dict[str, Any]) -> Any:
    import torch
    import transformers
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    torch.manual_seed(0)
    return getattr(transformers, auto).from_config(config, dtype=torch.float32).eval()


def _text(model_type: str, auto: str, labels: tuple[str, ...] | None = None, **extra: Any) -> Builder:
    def make() -> tuple[Any, list[Any]]:
        config = shrink.tiny_config_dict(model_type)
        if labels:
            _labels(config, labels)
        config.update(extra)
        model = _model(model_type, auto, config)
        for token in (shrink.EOS_ID, shrink.PAD_ID):  # a generative head writes every new token it is asked for
            build.silence_eos(model, token)
        tokenizer = word_tokenizer({MASK_TOKEN: MASK_TOKEN_ID}, mask_token=MASK_TOKEN,
                                   model_input_names=build._input_names(model))
        return model, [tokenizer]
    return make


def _vision(model_type: str, auto: str, labels: tuple[str, ...] | None = None) -> Builder:
    def make() -> tuple[Any, list[Any]]:
        from transformers import ViTImageProcessor

        config = _vit(shrink.tiny_config_dict(model_type))
        if labels:
            _labels(config, labels)
        model = _model(model_type, auto, config)
        processor = ViTImageProcessor(size={"height": IMAGE, "width": IMAGE})
        return model, [processor]
    return make


def _segformer() -> tuple[Any, list[Any]]:
    from transformers import SegformerImageProcessor

    config = shrink.tiny_config_dict("segformer")
    config.update(depths=[1, 1], hidden_sizes=[16, 32], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
                  sr_ratios=[2, 1], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32)
    _labels(config, LABELS)
    model = _model("segformer", "AutoModelForSemanticSegmentation", config)
    return model, [SegformerImageProcessor(size={"height": IMAGE, "width": IMAGE})]


def _dpt() -> tuple[Any, list[Any]]:
    from transformers import DPTImageProcessor

    config = _vit(shrink.tiny_config_dict("dpt"))
    config.update(num_hidden_layers=4, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 16, 32, 64],
                  fusion_hidden_size=16, head_in_index=-1, is_hybrid=False)
    model = _model("dpt", "AutoModelForDepthEstimation", config)
    return model, [DPTImageProcessor(size={"height": IMAGE, "width": IMAGE}, keep_aspect_ratio=False)]


def _yolos() -> tuple[Any, list[Any]]:
    from transformers import YolosImageProcessor

    config = shrink.tiny_config_dict("yolos")
    config.update(image_size=[IMAGE, IMAGE], patch_size=8, num_detection_tokens=5)
    _labels(config, LABELS)
    model = _model("yolos", "AutoModelForObjectDetection", config)
    return model, [YolosImageProcessor(size={"height": IMAGE, "width": IMAGE}, do_pad=False)]


def _clip() -> tuple[Any, list[Any]]:
    from transformers import CLIPImageProcessor, CLIPProcessor

    config = shrink.tiny_config_dict("clip")
    config["vision_config"].update(image_size=IMAGE, patch_size=8)
    config["projection_dim"] = 32
    config["text_config"]["projection_dim"] = config["vision_config"]["projection_dim"] = 32
    model = _model("clip", "AutoModel", config)
    tokenizer = word_tokenizer(max_length=32)
    image_processor = CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})
    return model, [CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)]


def _wav2vec2(auto: str) -> Builder:
    def make() -> tuple[Any, list[Any]]:
        from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2Processor

        config = shrink.tiny_config_dict("wav2vec2")
        config.update(conv_dim=[16, 16], conv_kernel=[10, 3], conv_stride=[5, 2], num_feat_extract_layers=2,
                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32,
                      classifier_proj_size=16, tdnn_dim=[16, 16], xvector_output_dim=16)
        features = Wav2Vec2FeatureExtractor(sampling_rate=SAMPLING_RATE, return_attention_mask=True)
        if auto == "AutoModelForCTC":
            letters = {c: i + 4 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz|")}
            vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **letters}
            directory = Path(tempfile.mkdtemp())
            (directory / "vocab.json").write_text(json.dumps(vocab))
            tokenizer = Wav2Vec2CTCTokenizer(str(directory / "vocab.json"))
            shutil.rmtree(directory)
            config["pad_token_id"] = 0
            model = _model("wav2vec2", auto, config)
            return model, [Wav2Vec2Processor(feature_extractor=features, tokenizer=tokenizer)]
        _labels(config, LABELS)
        return _model("wav2vec2", auto, config), [features]
    return make


def _whisper() -> tuple[Any, list[Any]]:
    from transformers import WhisperFeatureExtractor, WhisperProcessor

    tokenizer = whisper_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in WHISPER_SPECIALS}
    config = shrink.tiny_config_dict("whisper")
    config.update(num_mel_bins=16, max_source_positions=16, max_target_positions=448, vocab_size=len(tokenizer),
                  begin_suppress_tokens=None,
                  suppress_tokens=None, pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"],
                  eos_token_id=ids["<|endoftext|>"], decoder_start_token_id=ids["<|startoftranscript|>"])
    model = _model("whisper", "AutoModelForSpeechSeq2Seq", config)
    build.silence_eos(model, ids["<|endoftext|>"])
    model.generation_config.no_timestamps_token_id = ids["<|notimestamps|>"]
    features = WhisperFeatureExtractor(feature_size=16, sampling_rate=SAMPLING_RATE, hop_length=50, chunk_length=1,
                                       n_fft=400)
    return model, [WhisperProcessor(feature_extractor=features, tokenizer=tokenizer)]


def _llava() -> tuple[Any, list[Any]]:
    from transformers import CLIPImageProcessor, LlavaProcessor

    config = shrink.tiny_config_dict("llava")
    config["vision_config"].update(image_size=28, patch_size=14)
    config.update(image_token_index=IMAGE_TOKEN_ID, image_seq_length=4)
    model = _model("llava", "AutoModelForImageTextToText", config)
    build.silence_eos(model)
    tokenizer = word_tokenizer({IMAGE_TOKEN: IMAGE_TOKEN_ID, MASK_TOKEN: MASK_TOKEN_ID},
                               extra_special_tokens={"image_token": IMAGE_TOKEN})
    image_processor = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=14,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
                               num_additional_image_tokens=1)
    return model, [processor]


HEADS: dict[str, Builder] = {
    "t5": _text("t5", "AutoModelForSeq2SeqLM"),
    "bart": _text("bart", "AutoModelForSeq2SeqLM"),
    "bert-token": _text("bert", "AutoModelForTokenClassification", TOKEN_LABELS),
    "bert-masked": _text("bert", "AutoModelForMaskedLM"),
    "bert-nli": _text("bert", "AutoModelForSequenceClassification", NLI_LABELS),
    "bert-qa": _text("bert", "AutoModelForQuestionAnswering"),
    "bert-choice": _text("bert", "AutoModelForMultipleChoice"),
    "vit": _vision("vit", "AutoModelForImageClassification", LABELS),
    "vit-base": _vision("vit", "AutoModel"),
    "segformer": _segformer,
    "dpt": _dpt,
    "yolos": _yolos,
    "clip": _clip,
    "wav2vec2-audio": _wav2vec2("AutoModelForAudioClassification"),
    "wav2vec2-ctc": _wav2vec2("AutoModelForCTC"),
    "whisper": _whisper,
    "llava": _llava,
}
"""Name → builder of a tiny checkpoint with its processors."""


def build_head(name: str, root: Path) -> Path:
    """The checkpoint :data:`HEADS` names (built unless cached); returns its directory."""
    import inspect
    import sys

    target = root / f"head-{name}"
    # any change to this module rebuilds its checkpoints
    fingerprint = build._fingerprint(f"head-{name}", {"module": inspect.getsource(sys.modules[__name__])})
    if build._cached(target, fingerprint) is not None:
        return target
    start = time.perf_counter()
    model, processors = HEADS[name]()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".head-{name}.", dir=root))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        for processor in processors:
            processor.save_pretrained(staging)
        info = {"fingerprint": fingerprint, "head": name, "class": type(model).__name__,
                "build_s": round(time.perf_counter() - start, 3)}
        (staging / build.STAMP).write_text(json.dumps(info, indent=1))
        build._publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
