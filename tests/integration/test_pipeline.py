"""``intelrt.pipeline`` and ``Loaded.pipeline()`` return transformers' own ``Pipeline`` on the plan's
model, tokenizer and device, answering exactly as a plain ``transformers.pipeline`` on the same
model (issue 21; the seeds' ``pipeline()`` entry point, SPEC X6 / H6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import intelrt
from intelrt.errors import ConfigurationError


def _plain(task: str, model: Path) -> transformers.Pipeline:
    return transformers.pipeline(task, model=str(model), device="cpu")


@pytest.mark.claim("X6")
def test_text_generation_pipeline_answers_as_plain_transformers(tiny_model: Path) -> None:
    ours = intelrt.pipeline("text-generation", tiny_model)
    assert isinstance(ours, transformers.TextGenerationPipeline)
    assert ours.device.type == "cpu" and ours.model.config._attn_implementation == "sdpa"
    prompts = ["Intel GPUs are", "Gaudi runs PyTorch"]
    settings = {"max_new_tokens": 8, "do_sample": False}
    assert ours(prompts, **settings) == _plain("text-generation", tiny_model)(prompts, **settings)


def test_feature_extraction_pipeline_answers_as_plain_transformers(tiny_encoder: Path) -> None:
    ours = intelrt.pipeline("feature-extraction", tiny_encoder)
    assert isinstance(ours, transformers.FeatureExtractionPipeline)
    mine = ours("Intel GPUs run PyTorch", return_tensors=True)
    theirs = _plain("feature-extraction", tiny_encoder)("Intel GPUs run PyTorch", return_tensors=True)
    assert mine.shape == theirs.shape and torch.allclose(mine, theirs, atol=1e-6)


def test_text_classification_pipeline_answers_as_plain_transformers(tiny_classifier: Path) -> None:
    loaded = intelrt.load(tiny_classifier)
    ours = loaded.pipeline()  # the plan's task: sequence-classification → text-classification
    assert isinstance(ours, transformers.TextClassificationPipeline) and ours.model is loaded.model
    texts = ["Intel GPUs", "Gaudi runs PyTorch eagerly", "the CPU is always there"]
    mine = ours(texts, top_k=None)
    theirs = _plain("text-classification", tiny_classifier)(texts, top_k=None)
    assert [[r["label"] for r in row] for row in mine] == [[r["label"] for r in row] for row in theirs]
    assert [r["score"] for row in mine for r in row] == pytest.approx(
        [r["score"] for row in theirs for r in row], abs=1e-6)


def test_pipeline_options_go_to_the_plan_and_mismatches_are_refused(tiny_model: Path, tiny_encoder: Path) -> None:
    generator = intelrt.pipeline("text-generation", tiny_model, dtype="bfloat16")
    assert generator.model.dtype == torch.bfloat16
    with pytest.raises(ConfigurationError, match="no class of transformers for task 'image-classification'.*serves "
                       "text-generation"):
        intelrt.pipeline("image-classification", tiny_model)
    with pytest.raises(ConfigurationError, match="the plan chooses the device"):
        intelrt.pipeline("text-generation", tiny_model, device="cpu")
    with pytest.raises(ConfigurationError, match="loaded for 'feature-extraction'"):
        intelrt.load(tiny_encoder).pipeline("text-generation")
