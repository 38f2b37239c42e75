"""Real model configs by name, for benchmarks without a download: ``intelrt bench --shape NAME``.

Each entry is the architecture part of the model's published ``config.json`` (sizes, attention
layout, rotary embedding, sliding window, soft-caps, experts); tokenizer and generation fields are
left out. ``tiny_config`` keeps a shape's family and features (sliding layers, soft-caps, grouped
queries, experts) at a size the CPU runs in seconds, for ``--tiny`` and the tests.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

SHAPES: dict[str, dict[str, Any]] = {
    "Qwen2.5-0.5B": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False},
    "Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu"},
    "Llama-3.2-1B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "hidden_act": "silu"},
    "Qwen2.5-1.5B": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536,
        "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False},
    "Llama-3.2-3B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "hidden_act": "silu"},
    "Qwen3-4B": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560,
        "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu"},
    "Mistral-7B-v0.1": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 32768, "rope_theta": 10000.0, "sliding_window": 4096, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "hidden_act": "silu"},
    "Llama-3.1-8B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"},
    "Phi-3-mini-4k": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "sliding_window": 2047, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"},
    "Gemma-2-2B": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
        "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "query_pre_attn_scalar": 256, "max_position_embeddings": 8192, "rope_theta": 10000.0,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh"},
    "Gemma-3-1B": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
        "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 256, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 512, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh"},
    "Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "hidden_act": "silu"},
    "Mixtral-8x7B": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768, "rope_theta": 1e6,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"},
}
"""Published configs (architecture fields) of the models ``--shape`` accepts."""

TINY_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
              "head_dim": 16, "max_position_embeddings": 512}
TINY_TOKENS = {"bos_token_id": None, "eos_token_id": 0, "pad_token_id": 1}
"""The special tokens of intelrt's tiny tokenizer (``intelrt.tiny``)."""
TINY_WINDOW = 6
"""A tiny shape's sliding window: shorter than the tests' prompts, so the window decides what is seen."""


def shape(name: str) -> dict[str, Any]:
    """A copy of the config of shape ``name`` (a ``ConfigurationError`` naming the known ones otherwise)."""
    if name not in SHAPES:
        raise ConfigurationError(f"--shape {name!r} is not a known shape; choose from {', '.join(SHAPES)}")
    return copy.deepcopy(SHAPES[name])


def tiny_config(config: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """``config`` at a tiny size: same family, grouped-query ratio class (none, some, one key/value
    head), sliding window (shortened to ``TINY_WINDOW``, alternating layers kept alternating),
    soft-caps, rotary type and experts (4, two per token)."""
    tiny = {**copy.deepcopy(config), **TINY_SIZES, "vocab_size": vocab_size, **TINY_TOKENS}
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    tiny["num_key_value_heads"] = 4 if kv == heads else 1 if kv == 1 else 2
    if "query_pre_attn_scalar" in config:
        tiny["query_pre_attn_scalar"] = TINY_SIZES["head_dim"]
    if config.get("sliding_window"):
        tiny["sliding_window"] = TINY_WINDOW
    if config.get("model_type") in ("gemma2", "gemma3_text"):  # a full-attention layer among sliding ones
        tiny["layer_types"] = ["sliding_attention", "full_attention", "sliding_attention"]
    rope = tiny.get("rope_scaling")
    if isinstance(rope, dict) and "original_max_position_embeddings" in rope:
        rope["original_max_position_embeddings"] = TINY_SIZES["max_position_embeddings"] // 2
    if "original_max_position_embeddings" in tiny:
        tiny["original_max_position_embeddings"] = TINY_SIZES["max_position_embeddings"]
    for experts in ("num_experts", "num_local_experts"):
        if experts in tiny:
            tiny[experts], tiny["num_experts_per_tok"] = 4, 2
    if "moe_intermediate_size" in tiny:
        tiny["moe_intermediate_size"] = 32
    return tiny


def pretrained_config(config: dict[str, Any]) -> Any:
    """The transformers config object for a config dict (its ``model_type`` picks the class)."""
    from transformers import AutoConfig

    fields = {k: v for k, v in config.items() if k != "model_type"}
    return AutoConfig.for_model(config["model_type"], **fields)


def random_model(config: dict[str, Any], *, dtype: Any, device: str, seed: int = 0,
                 attn_implementation: str | None = None) -> Any:
    """A causal LM of ``config`` with random weights, built on ``device`` in ``dtype`` (no download,
    nothing saved), in eval mode, with no end-of-sequence token (decoding runs its full length)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(pretrained_config(config), dtype=dtype,
                                                 attn_implementation=attn_implementation)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 1
    return model.eval()


def save_shape(directory: Path, config: dict[str, Any], *, weights: bool, seed: int = 0) -> Path:
    """Save ``config`` (and, with ``weights``, random float32 weights) with intelrt's tiny tokenizer
    into ``directory``: a model directory ``intelrt.plan`` (and, with weights, ``intelrt.load``) reads."""
    from ..tiny import build_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer(directory)
    if weights:
        import torch

        random_model(config, dtype=torch.float32, device="cpu", seed=seed).save_pretrained(directory)
    else:
        saved = pretrained_config(config)
        saved.architectures = config["architectures"]
        saved.save_pretrained(directory)
    return directory
