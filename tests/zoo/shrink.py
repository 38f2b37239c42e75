"""Shrink any transformers config to a tiny, fast, random-weight model.

``tiny_config_dict(model_type)`` starts from the config class's defaults (``to_dict()`` of a default
instance, sub-configs included, ``BASE_KWARGS`` where bare defaults do not validate), then

1. rewrites every size-like field by the generic ``RULES`` (by field name, in every sub-config);
2. recomputes derived fields by ``RELATIONS`` (e.g. MLA ``qk_head_dim = nope + rope``) where the
   relation holds in the defaults;
3. keeps a few layers: per-layer lists (``layer_types``, ``mlp_layer_types``...), layer-index lists
   (``moe_layers``, ``*_layer_ids``...) and ``per_layer_config`` are subsampled jointly so that each
   distinct kind of layer survives (usually 2 layers, at most one per kind);
4. remaps special token ids into the small vocabulary (pad 0, bos 1, eos 255);
5. applies the per-architecture ``OVERRIDES`` table for what generic rules cannot know.

``SKIP`` names causal-LM model types the survey does not build, with the reason.

Nothing here touches intelrt: the harness builds the same tiny models for the plain
transformers side and for the intelrt side.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from typing import Any

HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
LAYERS = 2
FFN = 128
VOCAB = 256
POSITIONS = 256
WINDOW = 8
"""Sliding windows / attention chunks: shorter than prompt + new tokens, so windowing is exercised."""
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
INIT_STD = 0.3
"""Random-init std (``initializer_range``): with the usual 0.02 a tiny model's greedy output is mostly
its input token repeated (40% of rows had at most 2 distinct tokens on a 30-architecture probe, 14%
with 0.3), which would make "identical" a weak verdict."""

PAD_ID, BOS_ID, EOS_ID = 0, 1, VOCAB - 1
"""In the configs. EOS is the last id; the builder zeroes its output-embedding row so greedy search
never picks it."""
GENERATION_PAD_ID = 2
"""What generation pads prompts with (``generation_config.pad_token_id``): not the config's
``pad_token_id``, whose embedding row many models zero (``padding_idx``), because a zero pad
embedding hides padding leaks (it passes unchanged through RMSNorm, bias-free projections and SSM
input projections). Real checkpoints often pad with EOS, whose embedding is not zero."""
FIRST_PROMPT_ID, LAST_PROMPT_ID = 3, VOCAB - 32
"""Prompt tokens are drawn from this range (special ids live outside it)."""

# -- generic rules: field name -> new value (a callable gets (old value, the whole dict)) ----------------


def _keep_none(value: Any) -> Callable[[Any, Mapping[str, Any]], Any]:
    """``value`` unless the default is ``None`` (an unset optional stays unset)."""
    return lambda old, _d: None if old is None else value


def _at_most(value: int) -> Callable[[Any, Mapping[str, Any]], Any]:
    return lambda old, _d: old if not isinstance(old, int) or isinstance(old, bool) else min(old, value)


def _kv_heads(old: Any, d: Mapping[str, Any]) -> Any:
    """Keep the attention kind: MHA stays MHA, MQA stays MQA, GQA becomes 2 groups (``None``, which
    usually means "as many as the query heads", becomes that number: not all modeling code derives it)."""
    if old is None:
        return HEADS
    heads = next((d[k] for k in ("num_attention_heads", "n_head", "n_heads", "num_heads") if k in d), None)
    if old == heads:
        return HEADS
    return 1 if old == 1 else 2


def _positive_float(value: float) -> Callable[[Any, Mapping[str, Any]], Any]:
    return lambda old, _d: value if isinstance(old, float) and old > 0 else old


def _positive(value: int) -> Callable[[Any, Mapping[str, Any]], Any]:
    """``value`` when the default is a positive int (0 / None / -1 mean "off" and stay)."""
    return lambda old, _d: value if isinstance(old, int) and not isinstance(old, bool) and old > 0 else old


_GROUPS: dict[tuple[str, ...], Any] = {
    ("hidden_size", "d_model", "n_embd", "emb_dim", "embedding_size", "word_embed_proj_dim", "input_embedding_size",
     "output_embedding_size", "embedding_dim", "backbone_hidden_size", "attention_hidden_size", "lru_width",
     "router_hidden_size", "hidden_dim", "adapter_in_dim", "adapter_input_size", "adapter_out_dim",
     "pooler_hidden_size"): _keep_none(HIDDEN),
    ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers",
     "num_decoder_layers", "num_encoder_layers", "num_blocks"): _positive(LAYERS),
    ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads", "encoder_attention_heads",
     "attention_heads", "num_decoder_attention_heads", "num_encoder_attention_heads", "swa_num_attention_heads",
     "linear_num_heads", "linear_num_value_heads"): _keep_none(HEADS),
    ("num_key_value_heads", "num_kv_heads", "multi_query_group_num", "swa_num_key_value_heads", "num_query_groups",
     "kv_n_heads", "linear_num_key_heads"): _kv_heads,
    ("head_dim",): HEAD_DIM,  # None often means "derive it", which some modeling code does not do
    ("d_head", "dim_head", "kv_channels", "attention_head_dim", "attention_head_size", "swa_head_dim",
     "linear_head_dim", "linear_key_head_dim", "linear_value_head_dim", "indexer_head_dim"): _keep_none(HEAD_DIM),
    ("intermediate_size", "ffn_dim", "n_inner", "decoder_ffn_dim", "encoder_ffn_dim", "dff", "dim_ff", "d_inner",
     "ffn_hidden_size", "feed_forward_size", "intermediate_size_mlp", "dense_intermediate_size",
     "prefix_dense_intermediate_size", "mamba_d_ssm"): _keep_none(FFN),
    ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_ffn_hidden_size", "shared_intermediate_size",
     "moe_shared_expert_intermediate_size", "shared_experts_intermediate_size"): _positive(FFN // 2),
    ("vocab_size", "unpadded_vocab_size", "decoder_vocab_size"): _keep_none(VOCAB),
    ("shape_vocab_size", "pronunciation_vocab_size", "shape_embed_dim", "pronunciation_embed_dim"): _positive(32),
    ("vocab_size_per_layer_input",): _positive(VOCAB),
    ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_target_positions",
     "context_length", "max_source_positions"): _at_most(POSITIONS),
    ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"): _positive(EXPERTS),
    ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "moe_k", "moe_topk", "top_k_experts",
     "zero_expert_num"): _at_most(EXPERTS_PER_TOKEN),
    ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"): _at_most(1),
    ("n_group", "topk_group", "num_expert_group"): _positive(1),
    ("num_dense_layers", "first_k_dense_replace"): _at_most(1),
    ("kv_lora_rank", "q_lora_rank", "o_lora_rank"): _keep_none(32),
    ("qk_nope_head_dim", "v_head_dim"): _keep_none(HEAD_DIM),
    ("qk_rope_head_dim",): _keep_none(8),
    ("index_head_dim",): _keep_none(HEAD_DIM),
    ("index_n_heads", "indexer_n_heads", "indexer_kv_heads"): _keep_none(2),
    ("index_topk", "index_topk_blocks"): _keep_none(WINDOW),
    ("sliding_window", "attention_window_size", "sliding_window_size", "local_attention", "attention_chunk_size",
     "local_attention_window_len"): _positive(WINDOW),
    ("mamba_d_state", "state_size", "ssm_state_size"): _positive(16),
    ("mamba_n_heads", "mamba_num_heads", "n_mamba_heads"): _positive(HEADS),
    ("mamba_head_dim",): _positive(2 * HIDDEN // HEADS),
    ("mamba_chunk_size",): _positive(16),
    ("n_groups", "mamba_n_groups", "mamba_ngroups"): _positive(1),
    ("rotary_dim",): _keep_none(HEAD_DIM // 2),
    ("adapter_rank", "laurel_rank", "hidden_size_per_layer_input", "gated_norm_rank", "hc_lowrank",
     "loop_gate_rank"): _positive(16),
    ("num_kv_shared_layers",): _at_most(0),
    ("max_window_layers",): _at_most(LAYERS),
    ("original_max_position_embeddings",): _at_most(POSITIONS // 2),
    ("initializer_range", "init_std"): _positive_float(INIT_STD),
}
RULES: dict[str, Any] = {name: rule for names, rule in _GROUPS.items() for name in names}
"""Field name -> rule; applied in every (sub-)config dict that has the field."""

RELATIONS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("head_dim", lambda d: d["qk_rope_head_dim"]),                               # MLA (DeepSeek-style)
    ("qk_head_dim", lambda d: d["qk_nope_head_dim"] + d["qk_rope_head_dim"]),
    ("mamba_d_head", lambda d: d["mamba_d_ssm"] // d["mamba_n_heads"]),                # Falcon-H1
    ("mamba_d_head", lambda d: d["mamba_expand"] * d["hidden_size"] // d["mamba_n_heads"]),
    ("mamba_headdim", lambda d: d["mamba_expand"] * d["hidden_size"] // d["n_mamba_heads"]),  # Zamba2
    ("attention_hidden_size", lambda d: 2 * d["hidden_size"]),                          # Zamba: concat input
    ("attention_head_dim", lambda d: d["attention_hidden_size"] // d["num_attention_heads"]),
    ("mamba_head_dim", lambda d: d["mamba_expand"] * d["hidden_size"] // d["mamba_num_heads"]),
    ("mamba_head_dim", lambda d: d["expand"] * d["hidden_size"] // d["mamba_num_heads"]),
    ("head_dim", lambda d: d["expand"] * d["hidden_size"] // d["num_heads"]),     # Mamba2
    ("mamba_d_ssm", lambda d: d["mamba_expand"] * d["hidden_size"]),
)
"""Derived fields: where ``key == f(defaults)`` holds in the default config, the shrunk config gets
``key = f(shrunk)`` (the first relation that holds wins)."""

LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers")
SUB_CONFIG_SUFFIX = "_config"
PER_LAYER_CONFIG = "per_layer_config"
INDEX_LIST_SUFFIXES = ("_idxs", "_indices", "_layer_ids", "_layers")
TOKEN_ID_SUFFIXES = ("_token_id", "_token_index", "_token_ids")
SPECIAL_IDS = {"pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
               "decoder_start_token_id": BOS_ID}

# -- per-architecture overrides: model_type -> dict merged last (nested dicts merge into sub-configs) ----
# A callable value takes the shrunk dict and returns the new value. They apply to every kind of
# model built from the config (causal LM, sequence classifier, base model).

_QWEN4_EXP_TEXT = {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": HEAD_DIM, "indexer_budget": 8,
                   "indexer_compress_ratio": 4}

OVERRIDES: dict[str, dict[str, Any]] = {
    # defaults with no attention layer at all (transformers' generate needs one to know the cache length)
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "recurrent_gemma": {"num_hidden_layers": 3},  # block_types cycles recurrent, recurrent, attention
    # layer-index bookkeeping the generic rules cannot remap
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    "dory": {"num_hidden_layers": 3, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
             "n_input_layers": 1, "n_recurrent_layers": 1, "n_output_layers": 1},
    "hrm_text": {"num_layers_per_stack": 1, "H_cycles": 1, "L_cycles": 1, "L_bp_cycles": [1], "num_hidden_layers": 2},
    "reformer": {"axial_pos_shape": [16, 16], "axial_pos_embds_dim": [16, 48]},  # product = positions, sum = hidden
    "xmod": {"default_language": lambda d: d["languages"][0]},
    # defaults that leave a required field unset
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "lfm2": {"layer_types": ["conv", "full_attention"], "full_attn_idxs": [1]},  # defaults: attention only
    "dots1": {"n_routed_experts": EXPERTS, "num_experts_per_tok": EXPERTS_PER_TOKEN, "n_shared_experts": 1},
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},  # the model reads both; the config has neither
    "xlstm": {"hidden_size": 128, "embedding_dim": 128},  # the cache rounds qk_dim up to a multiple of 64
    "deepseek_v2": {"num_experts_per_tok": EXPERTS_PER_TOKEN},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "t5": {"decoder_start_token_id": PAD_ID},  # T5Config has no default; real checkpoints set 0
    "esm": {"vocab_size": VOCAB},  # EsmConfig's default vocab_size is None
    # Perceiver's latent array is not named like a hidden size: 256 latents of 1280 through 2 x 26
    # self-attention layers by default (about 30 s a classification on the CPU); the task zoo's sizes
    "perceiver": {"d_latents": 64, "num_latents": 16, "num_self_attends_per_block": 2},
    "qwen4_exp_text": _QWEN4_EXP_TEXT,
    "qwen4_exp": {"text_config": _QWEN4_EXP_TEXT},
    # derived sizes the generic rules cannot see
    "dots3_note_text": {"head_dim": 24 + 8},  # sliding layers: head_dim == qk_nope (per-layer 24) + qk_rope
    "dots3_note": {"text_config": {"head_dim": 24 + 8}},
}

BASE_KWARGS: dict[str, dict[str, Any]] = {
    "gemma4_assistant": {"text_config": {"model_type": "gemma4_text", "hidden_size_per_layer_input": 0,
                                         "vocab_size_per_layer_input": 0}},
}
"""model_type -> keywords for the default config, where the bare defaults do not validate."""

SKIP: dict[str, str] = {
    "musicgen": "audio codes, not text: MusicgenForCausalLM takes a MusicgenDecoderConfig ('musicgen_decoder', which "
                "AutoModelForCausalLM does not map) and (batch x codebooks, length) inputs",
    "musicgen_melody": "audio codes, not text: MusicgenMelodyForCausalLM takes a MusicgenMelodyDecoderConfig, which "
                       "AutoModelForCausalLM does not map, and (batch x codebooks, length) inputs",
    "gemma3n": "multimodal: its vision tower (TimmWrapperModel) needs timm, not installed here; gemma3n_text covers "
               "the text decoder",
}
"""model_type -> why no tiny causal LM is built for it (the reason goes into the report)."""


def _layer_count(d: Mapping[str, Any]) -> int | None:
    for key in LAYER_COUNT_KEYS:
        value = d.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _is_index_list(key: str, value: Any, layers: int) -> bool:
    """A list of layer indices (``moe_layers``, ``attn_layer_indices``, ``hybrid_layer_ids``...)."""
    return (key.endswith(INDEX_LIST_SUFFIXES) and isinstance(value, list) and bool(value)
            and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value)
            and all(a < b for a, b in itertools.pairwise(value)))


def _index_keys(d: Mapping[str, Any], layers: int) -> list[str]:
    return [k for k, v in d.items() if _is_index_list(k, v, layers)]


def _per_layer_keys(d: Mapping[str, Any], layers: int) -> list[str]:
    """Fields holding one entry per layer (a list as long as the default layer count)."""
    return [k for k, v in d.items() if isinstance(v, list) and len(v) == layers and layers > 1
            and not k.endswith(TOKEN_ID_SUFFIXES) and k != "architectures" and not _is_index_list(k, v, layers)]


def _pick_layers(d: Mapping[str, Any], keys: list[str], layers: int, wanted: int) -> list[int]:
    """Indices of layers to keep: the first layer of each distinct combination of the per-layer
    fields, layer-index lists and ``per_layer_config`` entries (so every kind of layer survives),
    topped up with the following layers to ``wanted``."""
    overrides = _per_layer_config(d)
    indices = [set(d[k]) for k in _index_keys(d, layers)]
    chosen: list[int] = []
    seen: set[str] = set()
    for i in range(layers):
        combo = repr([d[k][i] for k in keys] + [i in s for s in indices] + [overrides.get(i)])
        if combo not in seen:
            seen.add(combo)
            chosen.append(i)
    for i in range(layers):
        if len(chosen) >= wanted:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen)


def _per_layer_config(d: Mapping[str, Any]) -> dict[int, Any]:
    """``per_layer_config`` (heterogeneous layers: ``{"05": {"head_dim": 512}}``) by layer index."""
    value = d.get(PER_LAYER_CONFIG)
    if not isinstance(value, Mapping):
        return {}
    return {int(k): v for k, v in value.items() if str(k).isdigit()}


def _scaled_entry(entry: Mapping[str, Any], base: Mapping[str, Any], shrunk: Mapping[str, Any]) -> dict[str, Any]:
    """A per-layer override scaled like its field: ``head_dim`` 512 where the default is 256 and the
    shrunk value 16 becomes 32 (so the layer stays different from the others)."""
    out = {}
    for key, value in entry.items():
        old, new = base.get(key), shrunk.get(key)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (value, old, new)) and old:
            out[key] = max(1, round(value * new / old))
        else:
            out[key] = value
    return out


def _shrink_dict(d: dict[str, Any]) -> dict[str, Any]:
    """Apply ``RULES`` to one config dict (and recurse into sub-config dicts)."""
    layers_before = _layer_count(d)
    per_layer = _per_layer_keys(d, layers_before) if layers_before else []
    out = dict(d)
    for key, old in d.items():
        if key == PER_LAYER_CONFIG:
            continue
        if isinstance(old, dict) and (key.endswith(SUB_CONFIG_SUFFIX) or "model_type" in old):
            out[key] = _shrink_dict(old)
        elif key in RULES and key not in per_layer:
            rule = RULES[key]
            new = rule(old, d) if callable(rule) else rule
            if isinstance(old, list) and not isinstance(new, list):
                new = [new] * len(old) if all(isinstance(x, int) for x in old) else old
            out[key] = new
    done: set[str] = set()
    for key, relation in RELATIONS:
        if key in d and key not in done:
            try:
                holds = relation(d) == d[key]
            except (KeyError, TypeError, ZeroDivisionError):
                continue
            if holds:
                out[key] = relation(out)
                done.add(key)
    heterogeneous = _per_layer_config(d)
    index_keys = _index_keys(d, layers_before) if layers_before else []
    if layers_before and (per_layer or heterogeneous or index_keys):
        layer_key = next(k for k in LAYER_COUNT_KEYS if k in d)
        keep = _pick_layers(d, per_layer, layers_before, LAYERS)
        out[layer_key] = len(keep)
        for key in per_layer:
            out[key] = [_shrink_value(key, d[key][i], d) for i in keep]
        for key in index_keys:
            out[key] = [new for new, old in enumerate(keep) if old in set(d[key])]
        if heterogeneous:
            width = max(len(str(k)) for k in d[PER_LAYER_CONFIG])
            out[PER_LAYER_CONFIG] = {str(new).zfill(width): _scaled_entry(heterogeneous[old], d, out)
                                     for new, old in enumerate(keep) if old in heterogeneous}
    return out


def _shrink_value(key: str, value: Any, d: Mapping[str, Any]) -> Any:
    """One entry of a per-layer list under the field's rule (e.g. per-layer intermediate sizes)."""
    rule = RULES.get(key)
    if rule is None or not isinstance(value, int) or isinstance(value, bool):
        return value
    return rule(value, d) if callable(rule) else rule


def _remap_token_ids(d: dict[str, Any], vocab: int) -> None:
    """Special ids: pad/bos/eos fixed; any other id outside the vocabulary moved inside it."""
    spare = iter(range(vocab - 2, LAST_PROMPT_ID, -1))
    for key in list(d):
        value = d[key]
        if key in SPECIAL_IDS:
            if value is not None or key in ("eos_token_id", "pad_token_id"):
                d[key] = SPECIAL_IDS[key]
        elif key.endswith(TOKEN_ID_SUFFIXES):
            if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
                d[key] = next(spare, vocab - 2)
            elif isinstance(value, list):
                d[key] = [v if not isinstance(v, int) or v < vocab else next(spare, vocab - 2) for v in value]
        elif isinstance(value, dict) and (key.endswith(SUB_CONFIG_SUFFIX) or "model_type" in value):
            _remap_token_ids(value, int(value.get("vocab_size") or vocab))


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif callable(value):
            out[key] = value(out)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_config_dict(model_type: str) -> dict[str, Any]:
    """The shrunk config of ``model_type`` as a dict (for ``config_class.from_dict``)."""
    from transformers import CONFIG_MAPPING

    base = CONFIG_MAPPING[model_type](**copy.deepcopy(BASE_KWARGS.get(model_type, {}))).to_dict()
    shrunk = _shrink_dict(base)
    for key in ("architectures", "transformers_version", "_name_or_path", "auto_map", "dtype", "torch_dtype"):
        shrunk.pop(key, None)
    _remap_token_ids(shrunk, int(shrunk.get("vocab_size") or VOCAB))
    return _merge(shrunk, OVERRIDES.get(model_type, {}))


def tiny_config(model_type: str) -> Any:
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type].from_dict(tiny_config_dict(model_type))
