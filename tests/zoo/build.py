"""Build tiny random models (seed 0, float32) into a cache directory, once per config fingerprint.

* causal LMs: ``<root>/<model_type>``, no tokenizer (the harness works with token ids);
* encoders: ``<root>/<head>-<model_type>`` with a tiny word-level tokenizer (``embed`` /
  ``classify`` need one).

The EOS id's row of the output embedding is zeroed, so greedy search never picks EOS: both sides
always generate ``max_new_tokens`` tokens (EOS stopping stays enabled and identical on both sides).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import shrink

BUILD_VERSION = "3"
STAMP = "zoo_build.json"
NUM_LABELS = 3


def _fingerprint(kind: str, config_dict: dict[str, Any]) -> str:
    text = json.dumps({"v": BUILD_VERSION, "kind": kind, "config": config_dict}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cached(target: Path, fingerprint: str) -> dict[str, Any] | None:
    stamp = target / STAMP
    if not stamp.is_file():
        return None
    info = json.loads(stamp.read_text())
    return info if info.get("fingerprint") == fingerprint else None


def _publish(staging: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def silence_eos(model: Any, eos: int = shrink.EOS_ID) -> bool:
    """Zero the EOS row of the output embedding (and its bias): its logit is 0 while the largest of
    the other random logits is positive, so greedy search never ends early. Returns whether done."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is None or weight.dim() != 2 or weight.shape[0] <= eos:
        return False
    with torch.no_grad():
        weight[eos].zero_()
        bias = getattr(head, "bias", None)
        if bias is not None and bias.dim() == 1 and bias.shape[0] > eos:
            bias[eos] = 0.0
    return True


def tiny_causal_lm(model_type: str, config_dict: dict[str, Any] | None = None) -> Any:
    """The tiny random causal LM of ``model_type`` (seed 0, float32, eval mode, EOS silenced)."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    config_dict = dict(config_dict or shrink.tiny_config_dict(model_type))
    if "is_decoder" in config_dict:  # BERT-style encoders are causal LMs only as decoders (as real checkpoints set)
        config_dict["is_decoder"] = True
    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    model.zoo_eos_silenced = silence_eos(model)
    generation = model.generation_config
    generation.eos_token_id, generation.pad_token_id = shrink.EOS_ID, shrink.GENERATION_PAD_ID
    if getattr(generation, "bos_token_id", None) is not None:
        generation.bos_token_id = shrink.BOS_ID
    return model


def _loadable_config_json(model_type: str, config_dict: dict[str, Any], model: Any, directory: Path) -> bool:
    """Some causal-LM classes (Emu3, Mllama) keep and save only their text sub-config, whose
    ``model_type`` ``AutoModelForCausalLM`` does not map; a real checkpoint carries the composite
    config. Write that one (same weights, same class) so ``from_pretrained`` can load the model.
    Returns whether config.json was replaced."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if type(model.config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return False
    full = CONFIG_MAPPING[model_type].from_dict(config_dict)
    if type(full) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return False
    saved = full.to_dict()
    saved["architectures"] = [type(model).__name__]
    saved["dtype"] = "float32"
    (directory / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True, default=repr))
    return True


def build_causal_lm(model_type: str, root: Path) -> tuple[Path, dict[str, Any]]:
    """The tiny causal LM of ``model_type`` (built unless cached); returns (dir, build info)."""
    config_dict = shrink.tiny_config_dict(model_type)
    if "is_decoder" in config_dict:
        config_dict["is_decoder"] = True
    target = root / model_type
    fingerprint = _fingerprint("causal", config_dict)
    info = _cached(target, fingerprint)
    if info is not None:
        return target, {**info, "cached": True}
    start = time.perf_counter()
    model = tiny_causal_lm(model_type, config_dict)
    silenced = model.zoo_eos_silenced
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{model_type}.", dir=root))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        composite = _loadable_config_json(model_type, config_dict, model, staging)
        info = {"fingerprint": fingerprint, "model_type": model_type, "class": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()), "eos_silenced": silenced,
                "composite_config_json": composite, "build_s": round(time.perf_counter() - start, 3)}
        (staging / STAMP).write_text(json.dumps(info, indent=1))
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, {**info, "cached": False}


# -- encoders ----------------------------------------------------------------------------------------

WORDS = tuple(f"w{i}" for i in range(shrink.FIRST_PROMPT_ID, shrink.LAST_PROMPT_ID))
TOKENIZER_SPECIALS = {"<pad>": shrink.PAD_ID, "<s>": shrink.BOS_ID, "<unk>": 2, "</s>": shrink.EOS_ID}


def build_tokenizer(directory: Path, model_input_names: list[str], max_length: int) -> None:
    """A whitespace word-level tokenizer over ``w3 .. w223`` (id = number), wrapped in ``<s> … </s>``,
    with the input names the model's forward accepts (as the model's real tokenizer would)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = dict(TOKENIZER_SPECIALS)
    vocab.update({word: int(word[1:]) for word in WORDS})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", shrink.BOS_ID), ("</s>", shrink.EOS_ID)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>", model_max_length=max_length,
                                   model_input_names=model_input_names)
    fast.save_pretrained(directory)


def _input_names(model: Any) -> list[str]:
    import inspect

    parameters = inspect.signature(model.forward).parameters
    return ["input_ids"] + [n for n in ("token_type_ids", "attention_mask") if n in parameters]


def build_encoder(model_type: str, head: str, root: Path) -> tuple[Path, dict[str, Any]]:
    """``head``: ``classify`` (AutoModelForSequenceClassification, 3 labels) or ``embed`` (AutoModel)."""
    config_dict = shrink.tiny_config_dict(model_type)
    if head == "classify":
        config_dict["id2label"] = {str(i): f"label_{i}" for i in range(NUM_LABELS)}
        config_dict["label2id"] = {f"label_{i}": i for i in range(NUM_LABELS)}
    target = root / f"{head}-{model_type}"
    fingerprint = _fingerprint(head, config_dict)
    info = _cached(target, fingerprint)
    if info is not None:
        return target, {**info, "cached": True}
    import torch
    from transformers import CONFIG_MAPPING, AutoModel, AutoModelForSequenceClassification

    start = time.perf_counter()
    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    config.architectures = []  # AutoModel iterates it for multi-class mappings (Funnel); None breaks that
    auto = AutoModelForSequenceClassification if head == "classify" else AutoModel
    torch.manual_seed(0)
    model = auto.from_config(config, dtype=torch.float32)
    model.eval()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{head}-{model_type}.", dir=root))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        positions = getattr(config.get_text_config(), "max_position_embeddings", None)
        if not isinstance(positions, int) or positions <= 8:  # XLNet: -1 (relative positions)
            positions = shrink.POSITIONS
        build_tokenizer(staging, _input_names(model), min(positions, shrink.POSITIONS) - 4)
        info = {"fingerprint": fingerprint, "model_type": model_type, "class": type(model).__name__,
                "parameters": sum(p.numel() for p in model.parameters()),
                "build_s": round(time.perf_counter() - start, 3)}
        (staging / STAMP).write_text(json.dumps(info, indent=1))
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, {**info, "cached": False}


def check(model_types: list[str]) -> int:
    """Build each tiny causal LM in memory and run a 3-token plain ``generate`` on a padded batch:
    the quick loop for writing ``shrink`` rules and overrides. Returns the number of failures."""
    import traceback

    import torch

    failures = 0
    for model_type in model_types:
        start, stage = time.perf_counter(), "config"
        try:
            config_dict = shrink.tiny_config_dict(model_type)
            stage = "model"
            model = tiny_causal_lm(model_type, config_dict)
            stage = "generate"
            pad = shrink.GENERATION_PAD_ID
            ids = torch.tensor([[5, 6, 7, 8, 9], [pad, pad, 10, 11, 12]])
            with torch.inference_mode():
                model.generate(input_ids=ids, attention_mask=(ids != pad).long(), do_sample=False, max_new_tokens=3,
                               pad_token_id=shrink.GENERATION_PAD_ID)
            size = sum(p.numel() for p in model.parameters())
            print(f"ok    {model_type:28s} {size / 1e6:6.2f}M params {time.perf_counter() - start:5.1f}s", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            failures += 1
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            print(f"FAIL  {model_type:28s} {stage:8s} {type(exc).__name__}: {first} "
                  f"[{frame.filename.split('site-packages/')[-1]}:{frame.lineno}]", flush=True)
    return failures


if __name__ == "__main__":
    import sys

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    names = sys.argv[1:] or [m for m in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if m not in shrink.SKIP]
    sys.exit(1 if check(names) else 0)
