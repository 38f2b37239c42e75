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
    # Issue 31's families. Each from its model's config.json on the Hugging Face hub (the repo id
    # is named above it), architecture fields only.
    # ibm-granite/granite-3.1-2b-instruct: the µP multipliers of Granite.
    "Granite-3.1-2B": {
        "architectures": ["GraniteForCausalLM"], "model_type": "granite", "vocab_size": 49155, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 5000000.0, "rms_norm_eps": 1e-5,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.015625,
        "logits_scaling": 8.0, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "hidden_act": "silu"},
    # allenai/OLMo-1B-hf: layer norms without weights, a family the compact step does not reproduce (its
    # own forward is the engine's step).
    "OLMo-1B": {
        "architectures": ["OlmoForCausalLM"], "model_type": "olmo", "vocab_size": 50304, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "max_position_embeddings": 2048, "rope_theta": 10000.0, "attention_bias": False, "clip_qkv": None,
        "tie_word_embeddings": True, "hidden_act": "silu"},
    # allenai/OLMo-2-0425-1B: norms after attention and MLP only, q/k norms over whole projections.
    "OLMo-2-1B": {
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "max_position_embeddings": 4096, "rope_theta": 500000.0, "rms_norm_eps": 1e-6, "attention_bias": False,
        "tie_word_embeddings": False, "hidden_act": "silu"},
    # allenai/Olmo-3-1025-7B: OLMo-2's layers, three sliding-window layers to one full, YaRN on the full ones.
    "OLMo-3-7B": {
        "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "vocab_size": 100278, "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 65536, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
                         "attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0},
        "sliding_window": 4096, "layer_types": [*["sliding_attention"] * 3, "full_attention"] * 8,
        "rms_norm_eps": 1e-6, "attention_bias": False, "tie_word_embeddings": False, "hidden_act": "silu"},
    # HuggingFaceTB/SmolLM3-3B: every fourth layer without a rotary embedding (NoPE).
    "SmolLM3-3B": {
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
        "max_position_embeddings": 65536, "rope_theta": 5000000.0, "rms_norm_eps": 1e-6,
        "no_rope_layer_interval": 4, "use_sliding_window": False, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": True, "hidden_act": "silu"},
    # CohereForAI/c4ai-command-r7b-12-2024: parallel attention and MLP on one LayerNorm, interleaved rotary
    # embedding on the sliding layers only (the full ones have none), logits scaled.
    "Command-R7B": {
        "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "vocab_size": 256000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 8192, "rope_theta": 50000.0, "layer_norm_eps": 1e-5, "logit_scale": 0.25,
        "sliding_window": 4096, "sliding_window_pattern": 4, "attention_bias": False, "use_qk_norm": False,
        "tie_word_embeddings": True, "hidden_act": "silu"},
    # openai/gpt-oss-20b: attention sinks, alternating 128-token sliding layers, 32 experts (4 per token)
    # with biases and a clamped SwiGLU; published in MXFP4, benched here with random bf16 weights.
    "GPT-OSS-20B": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880,
        "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
        "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        "rms_norm_eps": 1e-5, "attention_bias": True, "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "hidden_act": "silu"},
    # deepseek-ai/DeepSeek-V2-Lite: multi-head latent attention (no query compression), 64 experts (6 per
    # token) and 2 shared, softmax routing.
    "DeepSeek-V2-Lite": {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 102400,
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512,
        "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "topk_method": "greedy", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0, "norm_topk_prob": False,
        "max_position_embeddings": 163840, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707},
        "rms_norm_eps": 1e-6, "attention_bias": False, "tie_word_embeddings": False, "hidden_act": "silu"},
    # deepseek-ai/DeepSeek-V3: latent attention with query compression, 256 experts (8 per token, in 4 of 8
    # groups) and one shared, sigmoid routing with a bias; 671B parameters: bench it with --layers.
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 8, "topk_group": 4,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "max_position_embeddings": 163840,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "rms_norm_eps": 1e-6, "attention_bias": False, "tie_word_embeddings": False, "hidden_act": "silu"},
}
"""Published configs (architecture fields) of the models ``--shape`` accepts."""

TINY_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
              "head_dim": 16, "max_position_embeddings": 512}
TINY_TOKENS = {"bos_token_id": None, "eos_token_id": 0, "pad_token_id": 1}
"""The special tokens of intelrt's tiny tokenizer (``intelrt.tiny``)."""
TINY_WINDOW = 6
LAYER_PATTERNS = ("gemma2", "gemma3_text", "cohere2")
"""Families whose config class derives sliding and full layers from a pattern (not ``layer_types``)."""
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
    if config.get("sliding_window") and (config.get("layer_types") or config.get("model_type") in LAYER_PATTERNS):
        tiny["layer_types"] = ["sliding_attention", "full_attention", "sliding_attention"]  # a full layer among sliding
    if "no_rope_layer_interval" in config:  # SmolLM3: a layer without rotary embedding among the three
        tiny["no_rope_layer_interval"] = 2
    if "kv_lora_rank" in config:  # DeepSeek's latent attention at a tiny size
        tiny.update(kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, head_dim=8, v_head_dim=16,
                    first_k_dense_replace=1)
        if config.get("q_lora_rank"):
            tiny["q_lora_rank"] = 24
    rope = tiny.get("rope_scaling")
    if isinstance(rope, dict) and "original_max_position_embeddings" in rope:
        rope["original_max_position_embeddings"] = TINY_SIZES["max_position_embeddings"] // 2
    if "original_max_position_embeddings" in tiny:
        tiny["original_max_position_embeddings"] = TINY_SIZES["max_position_embeddings"]
    for experts in ("num_experts", "num_local_experts", "n_routed_experts"):
        if experts in tiny:
            tiny[experts], tiny["num_experts_per_tok"] = 4, 2
    if (tiny.get("n_group") or 1) > 1:  # DeepSeek-V3's expert groups: two of two experts, one chosen
        tiny["n_group"], tiny["topk_group"] = 2, 1
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
