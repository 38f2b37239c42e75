"""The zoo's tasks beyond causal LMs and text classifiers (issue 26): every model type of the auto
mapping of each task, built as a tiny random float32 model saved as its hub class, one batch of
inputs made from its config, and what to compare.

* ``TASKS``: zoo task → (transformers auto class, the inputs it reads, what is compared);
* ``model_types(task)``: every model type the auto class maps in the installed transformers;
* ``build(task, model_type, root)``: the tiny checkpoint (cached per config fingerprint);
* ``inputs(task, model)``: two rows of random inputs shaped from the model's config;
* ``outputs(task, model, inputs)``: the tensors compared (logits, or greedy tokens for the
  generative tasks).

Nothing here touches intelrt: both sides get the same checkpoint and the same inputs.
"""

from __future__ import annotations

import inspect
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import build, shrink

ROWS = 2
TEXT_LENGTH = 7
AUDIO_SAMPLES = 1600
NEW_TOKENS = 5
ATOL = 1e-5


@dataclass(frozen=True)
class ZooTask:
    """One zoo task: the auto class a plain user loads it with, the inputs it reads
    (``text``, ``choices``, ``pixels``, ``text+pixels``, ``audio``, ``features``) and whether its
    greedy tokens (``generate``) or its forward's tensors (``forward``) are compared."""

    auto_class: str
    inputs: str
    compare: str
    pipeline_task: str
    """The task intelrt plans for it (what its plan says)."""


TASKS: dict[str, ZooTask] = {
    "seq2seq": ZooTask("AutoModelForSeq2SeqLM", "text", "generate", "text2text-generation"),
    "image-text-to-text": ZooTask("AutoModelForImageTextToText", "text", "generate", "image-text-to-text"),
    "speech-seq2seq": ZooTask("AutoModelForSpeechSeq2Seq", "features", "generate", "automatic-speech-recognition"),
    "ctc": ZooTask("AutoModelForCTC", "audio", "forward", "automatic-speech-recognition"),
    "audio-classification": ZooTask("AutoModelForAudioClassification", "audio", "forward", "audio-classification"),
    "token-classification": ZooTask("AutoModelForTokenClassification", "text", "forward", "token-classification"),
    "question-answering": ZooTask("AutoModelForQuestionAnswering", "text", "forward", "question-answering"),
    "fill-mask": ZooTask("AutoModelForMaskedLM", "text", "forward", "fill-mask"),
    "multiple-choice": ZooTask("AutoModelForMultipleChoice", "choices", "forward", "multiple-choice"),
    "image-classification": ZooTask("AutoModelForImageClassification", "pixels", "forward", "image-classification"),
    "zero-shot-image-classification": ZooTask("AutoModelForZeroShotImageClassification", "text+pixels", "forward",
                                              "zero-shot-image-classification"),
    "object-detection": ZooTask("AutoModelForObjectDetection", "pixels", "forward", "object-detection"),
    "semantic-segmentation": ZooTask("AutoModelForSemanticSegmentation", "pixels", "forward", "image-segmentation"),
    "depth-estimation": ZooTask("AutoModelForDepthEstimation", "pixels", "forward", "depth-estimation"),
}
"""Zoo task → what it builds, feeds and compares."""

SKIP: dict[tuple[str, str], str] = {}
"""(zoo task, model type) → why no tiny model is built for it."""


def model_types(task: str) -> list[str]:
    """Every model type the task's auto class maps (``AutoModelFor…._model_mapping``)."""
    import transformers

    return list(getattr(transformers, TASKS[task].auto_class)._model_mapping._model_mapping)


def class_name(task: str, model_type: str) -> str:
    """The class the task's auto class builds for ``model_type`` (the first, for a tuple)."""
    import transformers

    value = getattr(transformers, TASKS[task].auto_class)._model_mapping._model_mapping[model_type]
    return str(value[0] if isinstance(value, (list, tuple)) else value)


OVERRIDES: dict[str, dict[str, Any]] = {
    # encoder-decoder models whose config has no decoder start (real checkpoints set it)
    "longt5": {"decoder_start_token_id": shrink.PAD_ID},
    "switch_transformers": {"decoder_start_token_id": shrink.PAD_ID},
    "encoder-decoder": {"decoder_start_token_id": shrink.BOS_ID, "pad_token_id": shrink.PAD_ID},
    "speech-encoder-decoder": {"decoder_start_token_id": shrink.BOS_ID, "pad_token_id": shrink.PAD_ID},
    "bit": {"num_groups": 8},  # GroupNorm groups of the narrower stages
}
"""model_type → fields merged last, for what the generic rules cannot know."""

VISION_RULES: dict[str, Any] = {
    "hidden_sizes": lambda v: [max(8, x // 8) for x in v],  # per stage: convnets (ResNet, ConvNeXt …)
    "depths": lambda v: [1] * len(v),  # blocks per stage
    "depth": lambda v: [1] * len(v) if isinstance(v, list) else v,
    "embed_dim": lambda v: ([max(4, x // 4) for x in v] if isinstance(v, list) else max(8, v // 4))
    if isinstance(v, (int, list)) and not isinstance(v, bool) else v,  # stays divisible by the heads
    "entity_vocab_size": lambda v: 32 if isinstance(v, int) else v,  # LUKE's 500k entity embeddings
    "entity_emb_size": lambda v: 32 if isinstance(v, int) else v,
    "d_latents": lambda v: 64 if isinstance(v, int) else v,  # Perceiver
    "num_latents": lambda v: 16 if isinstance(v, int) else v,
    "num_self_attends_per_block": lambda v: 2 if isinstance(v, int) else v,
    "neck_hidden_sizes": lambda v: [max(8, x // 8) for x in v],  # DPT-style necks and heads
    "post_process_channels": lambda v: [max(8, x // 8) for x in v],
    "fusion_hidden_size": lambda v: 32 if isinstance(v, int) else v,
    "bottleneck_features": lambda v: 32 if isinstance(v, int) else v,
    "head_hidden_size": lambda v: 32 if isinstance(v, int) else v,
}
"""Sizes of vision and other non-decoder configs that ``shrink``'s rules (written for causal LMs) leave
alone, by field name, in every sub-config."""


def _stage_count(d: dict[str, Any]) -> int | None:
    if isinstance(d.get("depths"), list):
        return len(d["depths"])
    value = d.get("num_hidden_layers")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fit_backbone(d: dict[str, Any]) -> None:
    """``out_features`` / ``out_indices`` naming stages the shrunk config no longer has: the same
    number of stages, the last ones (a ViT backbone gets as many layers as it must expose)."""
    names = d.get("out_features")
    indices = d.get("out_indices")
    wanted = len(names) if isinstance(names, list) else len(indices) if isinstance(indices, list) else 0
    stages = _stage_count(d)
    if not wanted or stages is None:
        return
    if "depths" not in d and wanted > stages:
        d["num_hidden_layers"] = stages = wanted
    keep = list(range(max(1, stages - wanted + 1), stages + 1))
    if isinstance(names, list) and any(int(str(n).removeprefix("stage") or 0) > stages for n in names
                                       if str(n).startswith("stage")):
        d["out_features"] = [f"stage{i}" for i in keep]
        d.pop("out_indices", None)
    elif isinstance(indices, list) and any(isinstance(i, int) and i > stages for i in indices):
        d["out_indices"] = keep
        d.pop("out_features", None)


def _smaller_images(d: dict[str, Any]) -> None:
    """A quarter of the image side, a multiple of the patch (or of 32, a convnet's total stride)."""
    size, patch = d.get("image_size"), d.get("patch_size")
    step = patch if isinstance(patch, int) and patch > 0 else 32
    if isinstance(size, int) and not isinstance(size, bool) and size >= 4 * step and size > 96:
        d["image_size"] = max(2 * step, size // 4 // step * step)


def _shrink_more(d: dict[str, Any], images: bool = False) -> dict[str, Any]:
    """:data:`VISION_RULES` in ``d`` and its sub-configs; ``images``: smaller images too (not for a
    vision-language model, whose image-token count follows its vision tower's image size)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict) and (key.endswith("_config") or "model_type" in value):
            out[key] = _shrink_more(value, images)
        elif key in VISION_RULES and value is not None and not (key == "hidden_sizes" and "stage_out_channels" in d):
            out[key] = VISION_RULES[key](value)  # (HGNet's stages are sized by stage_*_channels)
        else:
            out[key] = value
    if "embed_dim" in out and isinstance(out.get("layers"), int):  # Kosmos-2's text decoder names its layers so
        out["layers"] = shrink.LAYERS
    if images:
        _smaller_images(out)
    _fit_backbone(out)
    _follow_backbone(d, out)
    return out


def _follow_backbone(before: dict[str, Any], after: dict[str, Any]) -> None:
    """A detector's encoder reads the last stages of its backbone (RT-DETR, D-FINE:
    ``encoder_in_channels`` = the backbone's last ``hidden_sizes``): keep it so once they shrink."""
    channels = before.get("encoder_in_channels")
    old = (before.get("backbone_config") or {}).get("hidden_sizes")
    new = (after.get("backbone_config") or {}).get("hidden_sizes")
    if isinstance(channels, list) and isinstance(old, list) and isinstance(new, list) and channels and \
            channels == old[-len(channels):]:
        after["encoder_in_channels"] = new[-len(channels):]


def tiny_config_dict(task: str, model_type: str) -> dict[str, Any]:
    """``shrink``'s tiny config, the sizes it leaves alone shrunk too (:data:`VISION_RULES`), with
    labels for the classifying heads."""
    images = TASKS[task].compare == "forward"
    config = shrink._merge(_shrink_more(shrink.tiny_config_dict(model_type), images), OVERRIDES.get(model_type, {}))
    if TASKS[task].compare == "forward" and task not in ("fill-mask", "depth-estimation", "question-answering"):
        config["id2label"] = {str(i): f"label_{i}" for i in range(build.NUM_LABELS)}
        config["label2id"] = {f"label_{i}": i for i in range(build.NUM_LABELS)}
    return config


def build_model(task: str, model_type: str, root: Path) -> tuple[Path, dict[str, Any], Any]:
    """The tiny checkpoint of ``model_type`` for ``task`` at ``<root>/<task>-<model_type>``, and the
    model itself when it was built now (``None`` when the cache had it)."""
    import torch
    import transformers
    from transformers import CONFIG_MAPPING

    config_dict = tiny_config_dict(task, model_type)
    target = root / f"{task}-{model_type}"
    fingerprint = build._fingerprint(f"task-{task}", config_dict)
    info = build._cached(target, fingerprint)
    if info is not None:
        return target, {**info, "cached": True}, None
    start = time.perf_counter()
    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    config.architectures = [class_name(task, model_type)]  # as a hub checkpoint names its class
    torch.manual_seed(0)
    model = getattr(transformers, TASKS[task].auto_class).from_config(config, dtype=torch.float32).eval()
    if TASKS[task].compare == "generate":
        build.silence_eos(model)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{task}-{model_type}.", dir=root))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        info = {"fingerprint": fingerprint, "task": task, "model_type": model_type, "class": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()),
                "build_s": round(time.perf_counter() - start, 3)}
        (staging / build.STAMP).write_text(json.dumps(info, indent=1))
        build._publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, {**info, "cached": False}, model


def _sub(config: Any, *names: str) -> Any:
    for name in names:
        sub = getattr(config, name, None)
        if sub is not None:
            return sub
    return config


def _image_side(vision: Any) -> tuple[int, int]:
    size = getattr(vision, "image_size", None) or 224
    if isinstance(size, dict):
        size = [size.get("height", 224), size.get("width", 224)]
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def inputs(task: str, model: Any) -> dict[str, Any]:
    """Two rows of seeded random inputs shaped from the model's config and forward signature."""
    import torch

    config = model.config
    generator = torch.Generator().manual_seed(0)
    parameters = inspect.signature(model.forward).parameters
    kind = TASKS[task].inputs
    made: dict[str, Any] = {}
    if kind in ("text", "choices", "text+pixels"):
        text = config.get_text_config(decoder=False) if hasattr(config, "get_text_config") else config
        vocab = int(getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or shrink.VOCAB)
        high = min(vocab, shrink.LAST_PROMPT_ID)
        shape = (ROWS, 2, TEXT_LENGTH) if kind == "choices" else (ROWS, TEXT_LENGTH)
        made["input_ids"] = torch.randint(shrink.FIRST_PROMPT_ID, high, shape, generator=generator)
        if "attention_mask" in parameters:
            made["attention_mask"] = torch.ones(shape, dtype=torch.long)
    if kind in ("pixels", "text+pixels"):
        vision = _sub(config, "vision_config", "backbone_config", "encoder")
        height, width = _image_side(vision)
        channels = int(getattr(vision, "num_channels", None) or getattr(config, "num_channels", None) or 3)
        made["pixel_values"] = torch.randn((ROWS, channels, height, width), generator=generator)
    if kind in ("audio", "features"):  # raw audio (wav2vec2) or feature frames (Whisper, Parakeet …)
        made.update(_speech_features(config, parameters, generator))
    return made


def _speech_features(config: Any, parameters: Any, generator: Any) -> dict[str, Any]:
    """A speech encoder's input: raw audio (``input_values``), Whisper-style log-mel frames
    ``(batch, mel bins, 2 x max_source_positions)``, or ``(batch, frames, feature size)`` frames."""
    import torch

    if "input_features" not in parameters and "input_values" in parameters:
        return {"input_values": torch.randn((ROWS, AUDIO_SAMPLES), generator=generator)}
    audio = _sub(config, "audio_config", "encoder_config", "speech_config")
    bins, positions = getattr(audio, "num_mel_bins", None), getattr(audio, "max_source_positions", None)
    if isinstance(bins, int) and isinstance(positions, int):
        return {"input_features": torch.randn((ROWS, bins, 2 * positions), generator=generator)}
    per_channel = getattr(audio, "input_feat_per_channel", None)
    width = (per_channel * int(getattr(audio, "input_channels", 1) or 1) if isinstance(per_channel, int) else
             next((v for v in (getattr(audio, n, None) for n in ("feature_projection_input_dim", "input_dim",
                                                                  "num_mel_bins", "feature_size"))
                   if isinstance(v, int) and v > 0), 80))
    return {"input_features": torch.randn((ROWS, 64, int(width)), generator=generator)}


def outputs(task: str, model: Any, batch: dict[str, Any]) -> list[Any]:
    """What is compared: greedy new tokens (generative tasks) or every floating tensor of the forward."""
    import torch

    with torch.inference_mode():
        if TASKS[task].compare == "generate":
            # as a dict: a model's own generate may shape its sequences by it (Whisper keeps its
            # decoder prompt then)
            out = model.generate(**batch, do_sample=False, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True)
            return [out.sequences]
        result = model(**batch)
    values = result.values() if hasattr(result, "values") else [result]
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


def same(ours: list[Any], theirs: list[Any]) -> str | None:
    """``None`` when equal (tokens exactly, tensors within :data:`ATOL`), else how they differ."""
    import torch

    if len(ours) != len(theirs):
        return f"{len(ours)} outputs != {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a.shape != b.shape:
            return f"output {i}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        if a.is_floating_point():
            if not torch.allclose(a, b, atol=ATOL, rtol=0, equal_nan=True):
                return f"output {i}: largest difference {float((a - b).abs().max()):.2e}"
        elif not torch.equal(a, b):
            return f"output {i}: {a.tolist()} != {b.tolist()}"
    return None
