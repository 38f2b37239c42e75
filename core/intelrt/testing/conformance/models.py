"""Config-only model directories the conformance suite plans against (no weights, no network).

Planning reads ``config.json`` only, so three small configs cover the shapes plugins key on: a
decoder with grouped-query attention (Qwen3), a decoder with soft-capped attention logits
(Gemma 2 — a family some plugins special-case) and an encoder (BERT).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3": {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 384,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "tie_word_embeddings": True, "dtype": "float32",
    },
    "gemma2": {
        "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 384,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "dtype": "bfloat16",
    },
    "bert": {
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": 384, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "dtype": "float32",
    },
}


def write_models(root: Path) -> list[Path]:
    """Write one directory per config under ``root``; return their paths."""
    paths = []
    for name, config in CONFIGS.items():
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        paths.append(directory)
    return paths
