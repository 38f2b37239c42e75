"""What a loaded model can read — its vocabulary and its positions — checked before any device
work: a token id outside the vocabulary ends in an ``IndexError`` deep inside the embedding, and a
length past the positions (``max_new_tokens=10**12``) runs or allocates for ever. ``Loaded``'s
calls and the pipelines ``intelrt`` builds (:mod:`.checked_pipeline`) check the same way; the
command line checks its flags against the config before loading (``cli/models.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError


def check_prompts(model: Any, ids: Sequence[Sequence[int]]) -> None:
    """Refuse token ids outside the model's vocabulary and prompts longer than its positions, before
    any device work (inside the model they end in an ``IndexError`` far from the cause)."""
    vocab = _vocabulary(model)
    if vocab:
        for row, prompt in enumerate(ids):
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise ConfigurationError(
                    f"token id {bad} (prompt {row}) is outside the model's vocabulary of {vocab} ids (0..{vocab - 1}); "
                    "tokenize with this model's own tokenizer")
    bound = decoder_positions(model)  # XLNet says -1: relative positions, no limit
    longest = max(len(p) for p in ids)
    if bound is not None and bound[1] < longest:
        raise ConfigurationError(f"the prompt has {longest} tokens and the model reads at most {bound[1]} positions "
                                 f"({bound[0]}); shorten the prompt")


TOKEN_ID_SETTINGS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
"""Generation settings that name token ids: each must be an id of the model's vocabulary."""
POSITION_KEYS = ("max_target_positions", "max_position_embeddings", "n_positions")
"""Config keys that bound the positions a model's decoder reads (Whisper's ``max_target_positions``
first: its ``max_position_embeddings`` is the encoder's)."""


def _vocabulary(model: Any) -> int | None:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    vocab = getattr(embeddings, "num_embeddings", None) or getattr(model.config.get_text_config(), "vocab_size", None)
    return vocab if isinstance(vocab, int) and vocab > 0 else None


def check_token_ids(model: Any, settings: dict[str, Any]) -> None:
    """Refuse a ``pad_token_id`` (``eos_token_id`` …) that is not an id of the model's vocabulary:
    padding with it ends in an ``IndexError`` inside the embedding, and an end-of-sequence id the
    model cannot produce is never met (the call runs to its length)."""
    vocab = _vocabulary(model)
    for name in TOKEN_ID_SETTINGS:
        value = settings.get(name)
        if value is None:
            continue
        ids = value if isinstance(value, (list, tuple)) else [value]
        bad = next((i for i in ids if not isinstance(i, int) or isinstance(i, bool) or i < 0
                    or (vocab is not None and i >= vocab)), None)
        if bad is not None or not ids:
            shown = f" (0..{vocab - 1})" if vocab else ""
            raise ConfigurationError(f"{name}={value!r} is not a token id of this model's vocabulary{shown}; pass an "
                                     f"id the tokenizer gives (tokenizer.{name.removesuffix('_id')}_id), or leave it "
                                     "out")


def decoder_positions(model: Any) -> tuple[str, int] | None:
    """(config key, positions) the model's decoder can read, or ``None`` when its config sets no
    bound (relative positions: T5; XLNet's ``-1``)."""
    config = model.config
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    for key in POSITION_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def check_length(model: Any, prompt_tokens: int, settings: dict[str, Any]) -> None:
    """Refuse a length (``max_new_tokens``, ``max_length``) past the positions the model reads,
    before any device work: ``max_new_tokens=10**12`` would otherwise run (or allocate) for ever.
    ``prompt_tokens``: what the decoder reads first (the prompt of a decoder-only model, the
    decoder's start of an encoder-decoder one). The command line refuses the same (``--max-new-tokens``)."""
    bound = decoder_positions(model)
    if bound is None:
        return
    key, positions = bound
    new, total = settings.get("max_new_tokens"), settings.get("max_length")
    if isinstance(new, int) and prompt_tokens + new > positions:
        room = max(positions - prompt_tokens, 0)
        raise ConfigurationError(
            f"max_new_tokens={new} with a prompt of {prompt_tokens} tokens needs {prompt_tokens + new} positions, and "
            f"the model reads at most {positions} ({key}); pass max_new_tokens={room} or less"
            + ("" if room else " and a shorter prompt"))
    if new is None and isinstance(total, int) and total > positions:
        raise ConfigurationError(f"max_length={total} is past the {positions} positions the model reads ({key}); "
                                 f"pass max_length={positions} or less (or max_new_tokens=)")
