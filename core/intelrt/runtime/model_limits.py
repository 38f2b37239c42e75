"""What a loaded model can read — its vocabulary and its positions — checked before any device
work: a token id outside the vocabulary ends in an ``IndexError`` deep inside the embedding, and a
length past the positions (``max_new_tokens=10**12``) runs or allocates for ever. ``Loaded``'s
calls and the pipelines ``intelrt`` builds (:mod:`.checked_pipeline`) check the same way; the
command line checks its flags against the config before loading (``cli/models.py``)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..backends.sizing import model_positions
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
UNBOUNDED_POSITIONS = 65536
"""The positions a call may reach on a model whose config sets none of ``sizing.POSITION_KEYS``
(relative positions: T5, XLNet's ``-1``): transformers sets no limit there, and
``max_new_tokens=10**12`` would decode until the process is killed."""


def _vocabulary(model: Any) -> int | None:
    try:  # a speech encoder has none: transformers raises NotImplementedError (Wav2Vec2Model)
        embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    except NotImplementedError:
        embeddings = None
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
    """(config key, positions) the model's decoder can read (``sizing.model_positions``), or ``None``."""
    return model_positions(model.config)


def check_length(model: Any, prompt_tokens: int, settings: dict[str, Any]) -> None:
    """Refuse a length (``max_new_tokens``, ``max_length``) past the positions the model reads —
    or, for a model whose config names none, past :data:`UNBOUNDED_POSITIONS` — before any device
    work: ``max_new_tokens=10**12`` would otherwise run (or allocate) for ever. ``prompt_tokens``:
    what the decoder reads first (the prompt of a decoder-only model, the decoder's start of an
    encoder-decoder one: at least 1). The command line refuses the same (``--max-new-tokens``)."""
    bound = decoder_positions(model)
    if bound is None:
        positions = UNBOUNDED_POSITIONS
        limit = (f"this model's config names no position limit (relative positions), so intelrt caps a call at "
                 f"{positions} (docs/api.md, Generation)")
    else:
        key, positions = bound
        limit = f"the model reads at most {positions} ({key})"
    prompt_tokens = max(prompt_tokens, 1)
    new, total = settings.get("max_new_tokens"), settings.get("max_length")
    if isinstance(new, int) and prompt_tokens + new > positions:
        room = max(positions - prompt_tokens, 0)
        raise ConfigurationError(
            f"max_new_tokens={new} with a prompt of {prompt_tokens} tokens needs {prompt_tokens + new} positions, and "
            f"{limit}; pass max_new_tokens={room} or less" + ("" if room else " and a shorter prompt"))
    if new is None and isinstance(total, int) and total > positions:
        raise ConfigurationError(f"max_length={total} is past {positions} positions: {limit}; pass "
                                 f"max_length={positions} or less (or max_new_tokens=)")


COUNTS = {"max_new_tokens": 1, "max_length": 1, "num_return_sequences": 1, "num_beams": 1, "min_new_tokens": 0,
          "min_length": 0, "top_k": 0, "no_repeat_ngram_size": 0}
"""Generation settings that count (tokens, sequences, beams) and their least value."""


def check_counts(settings: Mapping[str, Any]) -> None:
    """Each count is a whole number from its least value (``num_return_sequences=0`` gave one
    sequence, ``"2"`` a ``TypeError`` inside transformers), and ``min_new_tokens`` fits ``max_new_tokens``."""
    for name, least in COUNTS.items():
        value = settings.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
            raise ConfigurationError(f"{name} must be an int >= {least}, got {value!r}")
    low, high = settings.get("min_new_tokens"), settings.get("max_new_tokens")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        raise ConfigurationError(f"min_new_tokens={low} is more than max_new_tokens={high}: at most {high} tokens "
                                 "come; lower min_new_tokens or raise max_new_tokens")
    stops = settings.get("stop_strings")
    if stops is not None and not (isinstance(stops, str) or (isinstance(stops, (list, tuple)) and stops
                                                             and all(isinstance(x, str) and x for x in stops))):
        raise ConfigurationError(f"stop_strings= takes a string or a list of strings, got {stops!r:.80}")


SAMPLING_ONLY = ("temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")
"""Settings that change only a sampled token: with greedy decoding transformers drops them with a
warning ("generation flags are not valid and may be ignored")."""


def check_sampling(model: Any, given: Mapping[str, Any]) -> None:
    """Refuse sampling settings the call gives (``temperature=0.7``) while it decodes greedily (no
    ``do_sample=True``, and the model's generation config does not sample): they would be ignored.
    ``temperature=0`` means greedy, and says so. A value no setting takes (``top_p=1.5``) is named as
    such first."""
    from ..decoding.keywords import check_setting_types

    check_setting_types(given)
    sampled = [name for name in SAMPLING_ONLY if given.get(name) is not None
               and not (name == "temperature" and given[name] == 0)]
    if not sampled:
        return
    own = getattr(getattr(model, "generation_config", None), "do_sample", False)
    if given.get("do_sample", own):
        return
    where = "do_sample=False" if "do_sample" in given else "the model's generation config does not sample"
    shown = ", ".join(f"{name}={given[name]!r}" for name in sampled)
    raise ConfigurationError(f"{shown}: {'it applies' if len(sampled) == 1 else 'they apply'} only when sampling, and "
                             f"this call decodes greedily ({where}); pass do_sample=True to sample, or leave "
                             f"{', '.join(sampled)} out")


def check_text(prompt: object) -> None:
    """Every string of ``prompt`` (a str, a list of them, chat messages) is text UTF-8 can encode: a
    lone surrogate (``"\\ud800"``, what a broken JSON decoder or a cut UTF-16 string leaves) makes the
    tokenizer raise a ``TypeError`` about its input types."""
    def strings(value: object) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from strings(item)

    for text in strings(prompt):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigurationError(
                f"the prompt holds {text[exc.start]!r} at character {exc.start}, a lone surrogate: not text any "
                "encoding can write (a string cut out of UTF-16, or JSON with a bad \\u escape). Decode the text "
                "properly, or replace it (text.encode('utf-8', 'replace').decode())") from None


@contextlib.contextmanager
def generate_refused() -> Iterator[None]:
    """transformers' ``generate`` refusing a setting (a ``ValueError`` or ``TypeError`` raised by its
    generation code: a keyword it does not use, ``repetition_penalty=-1`` …) as a
    :class:`ConfigurationError` quoting it; an error of the model's own code passes unchanged."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if isinstance(exc, ConfigurationError) or not frames or "/transformers/generation/" not in frames[-1].filename:
            raise
        raise ConfigurationError(f"generate() refused the call's settings: {' '.join(str(exc).split())[:400]}. "
                                 "Correct or remove the keyword it names") from exc
