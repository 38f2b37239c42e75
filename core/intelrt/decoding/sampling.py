"""What one completion asks of the decode engine's sampler, and what it gets back per token.

:class:`SamplingParams` is the per-request interface of the engine (``inflight.py``): a server's
HTTP layer, ``Loaded.generate`` and tests all describe a completion with it. Every row of a running
batch carries its own parameters; the engine's one sampler (``sampler.py``) applies them on the
device, per row, inside the (captured, compiled) decode step, in this order:

1. ``constraint``: tokens outside ``allowed_tokens_mask`` get ``-inf``;
2. ``logit_bias``: added to the logits (OpenAI's ``logit_bias``);
3. ``repetition_penalty`` over every token of the prompt and the completion so far (transformers'
   ``RepetitionPenaltyLogitsProcessor``: a positive logit divided by it, a negative one multiplied);
   ``presence_penalty`` and ``frequency_penalty`` over the completion's tokens (OpenAI's and vLLM's
   definition: ``logit -= presence * (count > 0) + frequency * count``);
4. greedy rows (``temperature == 0``) take the argmax; sampling rows apply ``temperature``, then
   ``top_k``, ``top_p`` and ``min_p`` (transformers' warper order in
   ``GenerationMixin._get_logits_processor``) and draw with noise that is a function of the row's
   ``seed``, the token's position and the token id only — so a seeded completion samples the same
   tokens whatever else shares the batch, and after a preemption (recomputed) as before it.

Log-probabilities (``logprobs``) are the model's own distribution (``log_softmax`` of the raw
logits, before any of the steps above), as vLLM reports them by default (``logprobs_mode=
"raw_logprobs"``).

Importing this module imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .prefilled import PrefilledPrompt

MAX_LOGPROBS = 20
"""The most top log-probabilities one token may carry (OpenAI's ``top_logprobs`` limit, vLLM's
default ``max_logprobs``)."""


@runtime_checkable
class TokenConstraint(Protocol):
    """A per-row constraint on which tokens may come next (a grammar, a JSON schema, a choice).

    The engine calls it on its decode thread, one row at a time, never concurrently:

    - before each token of the row: ``allowed_tokens_mask(vocab_size)``;
    - after the row's token is chosen: ``advance(token_id)`` with that token;
    - after ``advance``: ``is_terminated()``; ``True`` ends the completion (finish reason
      ``stop``), the token just advanced being its last.

    A row with a constraint makes the engine look at the host after every step (one token per
    look instead of ``DecodeTuning.inflight_steps``), since each mask depends on the token before.
    After a preemption (the row recomputed later) the constraint is not replayed: its state stays
    where the accepted tokens left it, which is exactly where the recomputed row resumes.
    """

    def allowed_tokens_mask(self, vocab_size: int) -> Any:
        """A bool tensor of shape ``[vocab_size]`` (any device; ``True``: the token may come next),
        or ``None`` for no restriction at this position. At least one token must be allowed."""
        ...

    def advance(self, token_id: int) -> None:
        """The row's next token is ``token_id`` (one the last mask allowed)."""
        ...

    def is_terminated(self) -> bool:
        """Whether the constraint is complete: the completion ends after the token just advanced."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """How one completion is sampled and when it ends; every field has vLLM's / OpenAI's meaning.

    Checked when built: a value out of range raises ``ValueError`` naming the field, the value and
    what is allowed (an HTTP layer turns it into a 400).
    """

    max_new_tokens: int = 16
    """The most tokens generated (a stop token, when it comes, is one of them and the last)."""
    temperature: float = 0.0
    """0: greedy (the likeliest token, every other sampling field but the penalties, ``logit_bias``
    and ``constraint`` unused); > 0: logits divided by it before sampling."""
    top_p: float = 1.0
    """In (0, 1]: sample among the smallest set of likeliest tokens whose probability reaches it
    (1: off)."""
    top_k: int = 0
    """Sample among the ``top_k`` likeliest tokens (0: off)."""
    min_p: float = 0.0
    """In [0, 1]: drop tokens whose probability is below ``min_p`` times the likeliest token's (0: off)."""
    repetition_penalty: float = 1.0
    """> 0; 1: off. Applies to the tokens of the prompt and of the completion so far."""
    presence_penalty: float = 0.0
    """In [-2, 2]; subtracted once from the logit of every token the completion already holds."""
    frequency_penalty: float = 0.0
    """In [-2, 2]; subtracted from a token's logit once per time the completion already holds it."""
    logit_bias: Mapping[int, float] = field(default_factory=dict, hash=False)
    """Token id → value added to its logit (each value in [-100, 100], as OpenAI allows)."""
    logprobs: int | None = None
    """``None``: no log-probabilities; 0: each token carries its own log-probability; ``k`` (at most
    :data:`MAX_LOGPROBS`): also the ``k`` likeliest tokens' (see :class:`SampledToken`)."""
    seed: int | None = None
    """Sampling noise seed (any int, reduced to 64 bits); ``None``: the engine draws one. Two
    completions with the same prompt, parameters and seed sample the same tokens."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the completion when generated (the token is kept as its last, as
    transformers' ``generate`` keeps its end-of-sequence token). The model's end-of-sequence ids are
    not added here by the engine: the caller lists them (with any ``stop_token_ids`` of its own)."""
    constraint: TokenConstraint | None = field(default=None, compare=False, hash=False)
    """A :class:`TokenConstraint` (stateful, one per completion: never share one between rows), or
    ``None``."""

    def __post_init__(self) -> None:
        def refuse(name: str, allowed: str) -> None:
            raise ValueError(f"SamplingParams.{name}={getattr(self, name)!r}: {name} must be {allowed}")

        def number(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                refuse(name, "a finite number")
            return float(value)

        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            refuse("max_new_tokens", "a whole number >= 1")
        if number("temperature") < 0:
            refuse("temperature", ">= 0 (0: greedy)")
        if not 0 < number("top_p") <= 1:
            refuse("top_p", "in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            refuse("top_k", "a whole number >= 0 (0: off)")
        if not 0 <= number("min_p") <= 1:
            refuse("min_p", "in [0, 1]")
        if number("repetition_penalty") <= 0:
            refuse("repetition_penalty", "> 0 (1: off)")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= number(name) <= 2:
                refuse(name, "in [-2, 2]")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)
                                          or not 0 <= self.logprobs <= MAX_LOGPROBS):
            refuse("logprobs", f"None or a whole number in [0, {MAX_LOGPROBS}]")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            refuse("seed", "None or an int")
        stops = tuple(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in stops):
            refuse("stop_token_ids", "token ids (ints >= 0)")
        object.__setattr__(self, "stop_token_ids", stops)
        bias: dict[int, float] = {}
        for token, value in dict(self.logit_bias).items():
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(f"SamplingParams.logit_bias: key {token!r} must be a token id (an int >= 0)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
                raise ValueError(f"SamplingParams.logit_bias[{token}]={value!r}: a bias must be a number in "
                                 "[-100, 100]")
            bias[token] = float(value)
        object.__setattr__(self, "logit_bias", MappingProxyType(bias))
        if self.constraint is not None and not isinstance(self.constraint, TokenConstraint):
            raise ValueError(f"SamplingParams.constraint={self.constraint!r} must have allowed_tokens_mask(), "
                             "advance() and is_terminated() (intelrt.decoding.sampling.TokenConstraint)")

    @property
    def greedy(self) -> bool:
        """The likeliest token is taken (``temperature == 0``)."""
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        """Any of the three penalties is on."""
        return self.repetition_penalty != 1 or self.presence_penalty != 0 or self.frequency_penalty != 0

    def check_vocabulary(self, vocab_size: int) -> None:
        """Refuse token ids (in ``logit_bias``, ``stop_token_ids``) outside a vocabulary of
        ``vocab_size`` tokens; ``ValueError`` naming the first one."""
        for name, ids in (("logit_bias", self.logit_bias), ("stop_token_ids", self.stop_token_ids)):
            bad = next((t for t in ids if t >= vocab_size), None)
            if bad is not None:
                raise ValueError(f"SamplingParams.{name} names token id {bad}, outside the model's vocabulary of "
                                 f"{vocab_size} tokens")


@dataclass(frozen=True)
class TokenLogprob:
    """One token and its log-probability under the model's distribution at that position."""

    token_id: int
    logprob: float


@dataclass(frozen=True)
class SampledToken:
    """One generated token, as the engine hands it out.

    ``logprob``: its log-probability (``None`` unless the request set ``logprobs``);
    ``top_logprobs``: the ``logprobs`` likeliest tokens at that position, likeliest first (empty
    unless ``logprobs > 0``). The chosen token may or may not be among them, as in OpenAI's API.
    """

    token_id: int
    logprob: float | None = None
    top_logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class DecodeRequest:
    """One completion for the engine: a prompt of token ids and how to sample its continuation.

    The engine's in-flight batch (``InflightBatch.add``) takes these; so does a server's scheduler
    (``intelrt.serving.decode_thread.Completion.request``)."""

    prompt: tuple[int, ...]
    params: SamplingParams
    adapter: str | None = None
    """The LoRA adapter this completion decodes with, by the name it was loaded under
    (``InflightBatch.load_adapter``); ``None``: the base model."""
    prefilled: PrefilledPrompt | None = None
    """The prompt's keys, values and next-token logits computed outside the engine (a
    vision-language model's prefill, ``decoding/prefilled.py``); ``None``: the engine prefills it."""

    def __post_init__(self) -> None:
        prompt = tuple(self.prompt)
        if not prompt:
            raise ValueError("DecodeRequest.prompt is empty: a completion needs at least one prompt token")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in prompt):
            raise ValueError("DecodeRequest.prompt must be token ids (ints >= 0)")
        object.__setattr__(self, "prompt", prompt)
        if not isinstance(self.params, SamplingParams):
            raise ValueError(f"DecodeRequest.params must be a SamplingParams, got {type(self.params).__name__}")
        if self.adapter is not None and (not isinstance(self.adapter, str) or not self.adapter):
            raise ValueError(f"DecodeRequest.adapter must be an adapter's name or None, got {self.adapter!r}")
        if self.prefilled is not None and self.adapter is not None:
            raise ValueError("DecodeRequest.prefilled was computed by the base model; it cannot decode with adapter "
                             f"{self.adapter!r}")

    @property
    def max_new_tokens(self) -> int:
        return self.params.max_new_tokens

    @property
    def greedy(self) -> bool:
        return self.params.greedy
