"""Quantization: which method runs on which backend, pre-quantized checkpoints, and the runtime
objects that apply a plan's quantization.

Pure planning (no torch or transformers at import): ``checkpoint`` reads a checkpoint's
``quantization_config``, ``methods`` holds the one method × backend table and decides a request
against a backend's facts, ``choice`` is the typed decision value, ``lora`` says whether PEFT
trains adapters on a quantized base, ``inc`` writes Intel Neural Compressor's FP8 configurations.
Runtime (imports torch, transformers and the method's library inside functions): ``builders``
makes the ``quantization_config`` object ``from_pretrained`` takes, ``saving`` writes a quantized
checkpoint, ``compact_weights`` runs weight-only int8/int4 projections in the compact decode step.
docs/quantization.md is generated from ``methods.TABLE`` and every backend's ``quantization_columns``.
"""

from .checkpoint import CheckpointQuantization, read_checkpoint_quantization
from .choice import QuantizationChoice, QuantizationPlan
from .methods import REQUESTS, Target, decide

__all__ = ["REQUESTS", "CheckpointQuantization", "QuantizationChoice", "QuantizationPlan", "Target", "decide",
           "read_checkpoint_quantization"]
