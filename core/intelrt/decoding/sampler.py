"""The decode engine's one sampler: per-row :class:`~intelrt.decoding.sampling.SamplingParams` held in
device buffers, applied to a step's logits on the device with no host sync (so the step it is part
of can be captured in a device graph and replayed).

Rows that sample draw with an exponential race (Gumbel-max in another form: the argmax of
``p / E`` with ``E`` standard exponential samples like the categorical distribution ``p``),
whose noise ``E`` is a hash of the row's seed, the position and the token id — so a token's
draw depends on nothing else in the batch, and only the candidates left after top-k need noise.

What a step computes is the *kind* of its rows (:class:`SamplerKind`): an all-greedy batch runs
an argmax only; penalties, logit biases, constraint masks and log-probabilities cost only when a
row asks for them. Each kind is its own captured step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .sampling import MAX_LOGPROBS, SamplingParams

TOP_K_CANDIDATES = 64
"""When every sampling row has ``1 <= top_k <= TOP_K_CANDIDATES``, the sampler keeps that many
candidates (``torch.topk``) instead of sorting the vocabulary."""
_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class SamplerKind:
    """What the sampler computes for a set of rows (the union of what each asks)."""

    sample: bool = False
    """Some row samples (else every row takes the argmax)."""
    filter: str = "none"
    """Sampling rows' candidates: ``none`` (the whole vocabulary: no top-k, top-p or min-p),
    ``topk`` (every sampling row's ``top_k`` is at most ``TOP_K_CANDIDATES``) or ``sort``."""
    penalty: bool = False
    bias: bool = False
    mask: bool = False
    logprobs: bool = False

    @classmethod
    def of(cls, params: Sequence[SamplingParams]) -> SamplerKind:
        sampling = [p for p in params if not p.greedy]
        if not sampling:
            filter_ = "none"
        elif all(1 <= p.top_k <= TOP_K_CANDIDATES for p in sampling):
            filter_ = "topk"
        elif all(p.top_k == 0 and p.top_p == 1 and p.min_p == 0 for p in sampling):
            filter_ = "none"
        else:
            filter_ = "sort"
        return cls(sample=bool(sampling), filter=filter_, penalty=any(p.penalized for p in params),
                   bias=any(p.logit_bias for p in params), mask=any(p.constraint is not None for p in params),
                   logprobs=any(p.logprobs is not None for p in params))

    @property
    def name(self) -> str:
        parts = [f"sample-{self.filter}" if self.sample else "greedy"]
        parts += [n for n in ("penalty", "bias", "mask", "logprobs") if getattr(self, n)]
        return "+".join(parts)


GREEDY = SamplerKind()
"""An all-greedy batch's kind (the one every engine warms up)."""
SAMPLING = SamplerKind(sample=True, filter="sort")
"""A batch with rows that sample with top-p (the other kind warmed up)."""


class Sampler:
    """Sampling state of ``rows`` rows over a ``vocab``-token vocabulary on ``device``. Buffers for
    penalties, biases and masks are allocated when a row first needs them (``vocab`` values per
    row each)."""

    def __init__(self, rows: int, vocab: int, device: Any) -> None:
        import torch

        self.rows, self.vocab, self.device = rows, vocab, device
        f32 = {"dtype": torch.float32, "device": device}
        self.greedy = torch.ones((rows,), dtype=torch.bool, device=device)
        self.temperature = torch.ones((rows, 1), **f32)
        self.top_p = torch.ones((rows, 1), **f32)
        self.top_k = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.min_p = torch.zeros((rows, 1), **f32)
        self.seed = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.repetition: Any = None
        self.presence: Any = None
        self.frequency: Any = None
        self.counts: Any = None
        """(rows, vocab) int32: how often each token is in the row's completion so far."""
        self.seen: Any = None
        """(rows, vocab) bool: the token is in the row's prompt or completion."""
        self.bias: Any = None
        self.allowed: Any = None

    # -- per-row state (host side) -----------------------------------------------------------------
    def _ensure(self, kind: SamplerKind) -> None:
        import torch

        rows, vocab, device = self.rows, self.vocab, self.device
        if kind.penalty and self.counts is None:
            self.repetition = torch.ones((rows, 1), dtype=torch.float32, device=device)
            self.presence = torch.zeros((rows, 1), dtype=torch.float32, device=device)
            self.frequency = torch.zeros((rows, 1), dtype=torch.float32, device=device)
            self.counts = torch.zeros((rows, vocab), dtype=torch.int32, device=device)
            self.seen = torch.zeros((rows, vocab), dtype=torch.bool, device=device)
        if kind.bias and self.bias is None:
            self.bias = torch.zeros((rows, vocab), dtype=torch.float32, device=device)
        if kind.mask and self.allowed is None:
            self.allowed = torch.ones((rows, vocab), dtype=torch.bool, device=device)

    def prepare(self, kind: SamplerKind) -> None:
        """Allocate what ``kind`` reads (before a step of that kind is captured or run)."""
        self._ensure(kind)

    def set_row(self, row: int, params: SamplingParams, seed: int, prompt: Sequence[int],
                generated: Sequence[int]) -> None:
        """Row ``row`` now samples with ``params`` (``seed``: its noise seed), its prompt and the
        tokens it already generated (a recomputed row) counted for the penalties."""
        import torch

        self._ensure(SamplerKind.of([params]))
        self.greedy[row] = params.greedy
        self.temperature[row] = params.temperature if params.temperature > 0 else 1.0
        self.top_p[row] = params.top_p
        self.top_k[row] = params.top_k
        self.min_p[row] = params.min_p
        self.seed[row] = seed & (2**63 - 1)
        if self.counts is not None:
            self.repetition[row] = params.repetition_penalty
            self.presence[row] = params.presence_penalty
            self.frequency[row] = params.frequency_penalty
            self.counts[row].zero_()
            self.seen[row].zero_()
            if params.penalized:
                if generated:
                    out = torch.tensor(list(generated), dtype=torch.long, device=self.device)
                    self.counts[row].scatter_add_(0, out, torch.ones_like(out, dtype=torch.int32))
                ids = torch.tensor([*prompt, *generated], dtype=torch.long, device=self.device)
                self.seen[row].index_fill_(0, ids, True)
        if self.bias is not None:
            self.bias[row].zero_()
            if params.logit_bias:
                ids = torch.tensor(list(params.logit_bias), dtype=torch.long, device=self.device)
                values = torch.tensor(list(params.logit_bias.values()), dtype=torch.float32, device=self.device)
                self.bias[row].index_copy_(0, ids, values)
        if self.allowed is not None:
            self.allowed[row].fill_(True)

    def set_allowed(self, row: int, mask: Any) -> None:
        """The tokens row ``row`` may take next (a constraint's mask; ``None``: any)."""
        self._ensure(SamplerKind(mask=True))
        if mask is None:
            self.allowed[row].fill_(True)
        else:
            self.allowed[row].copy_(mask.to(device=self.device, dtype=self.allowed.dtype), non_blocking=True)

    def clear_row(self, row: int) -> None:
        """Row ``row`` is idle: greedy, nothing counted (what an idle row computes is never used)."""
        self.greedy[row] = True
        for tensor in (self.counts, self.seen, self.bias):
            if tensor is not None:
                tensor[row].zero_()
        if self.allowed is not None:
            self.allowed[row].fill_(True)

    def buffers(self) -> list[Any]:
        """Every per-row buffer (row on dim 0): what moves when a row moves."""
        return [t for t in (self.greedy, self.temperature, self.top_p, self.top_k, self.min_p, self.seed,
                            self.repetition, self.presence, self.frequency, self.counts, self.seen, self.bias,
                            self.allowed) if t is not None]

    # -- the device work -------------------------------------------------------------------------------
    def choose(self, logits: Any, first: int, rows: int, position: Any, kind: SamplerKind
               ) -> tuple[Any, Any, Any, Any]:
        """The next token of rows ``first .. first + rows`` for ``logits`` (rows, vocab) at
        ``position`` (rows, 1): (tokens, their log-probabilities, the top log-probabilities' ids and
        values) — the last three ``None`` unless ``kind.logprobs``. Updates the penalty counts with
        the chosen tokens. Device work only."""
        import torch

        span = slice(first, first + rows)

        raw = logits.float()
        chosen_logprob = top_ids = top_values = None
        log_probs = raw.log_softmax(-1) if kind.logprobs else None
        scores = raw
        if kind.mask:
            scores = scores.masked_fill(~self.allowed[span], float("-inf"))
        if kind.bias:
            scores = scores + self.bias[span]
        if kind.penalty:
            seen, counts = self.seen[span], self.counts[span]
            repetition = self.repetition[span]
            penalized = torch.where(scores > 0, scores / repetition, scores * repetition)
            scores = torch.where(seen, penalized, scores)
            scores = scores - self.presence[span] * (counts > 0) - self.frequency[span] * counts
        token = scores.argmax(-1)
        if kind.sample:
            sampled = self._sample(scores, span, position, kind.filter)
            token = torch.where(self.greedy[span], token, sampled)
        if kind.penalty:
            self.counts[span].scatter_add_(1, token[:, None], torch.ones_like(token[:, None], dtype=torch.int32))
            self.seen[span].scatter_(1, token[:, None], True)
        if log_probs is not None:
            chosen_logprob = log_probs.gather(1, token[:, None])[:, 0]
            top_values, top_ids = log_probs.topk(min(MAX_LOGPROBS, log_probs.shape[-1]), dim=-1)
        return token, chosen_logprob, top_ids, top_values

    def _sample(self, scores: Any, span: slice, position: Any, filter_: str) -> Any:
        """Sampled tokens: temperature, then top-k, top-p and min-p in transformers' order, then the
        seeded exponential race among what is left."""
        import torch

        scaled = scores / self.temperature[span]
        if filter_ == "none":
            ids = torch.arange(scaled.shape[-1], device=scaled.device)[None, :].expand(scores.shape[0], -1)
            values = scaled
        else:
            if filter_ == "topk":
                values, ids = scaled.topk(min(TOP_K_CANDIDATES, scaled.shape[-1]), dim=-1)
            else:
                values, ids = scaled.sort(dim=-1, descending=True)
            rank = torch.arange(values.shape[-1], device=values.device)[None, :]
            top_k = self.top_k[span]
            values = values.masked_fill((top_k > 0) & (rank >= top_k), float("-inf"))
            # top-p (TopPLogitsWarper): drop a token when the likelier ones already reach top_p.
            probs = values.softmax(-1)
            before = probs.cumsum(-1) - probs
            values = values.masked_fill(before >= self.top_p[span], float("-inf"))
            # min-p (MinPLogitsWarper): drop tokens below min_p times the likeliest one's probability.
            probs = values.softmax(-1)
            values = values.masked_fill(probs < self.min_p[span] * probs[:, :1], float("-inf"))
        weights = (values - values.amax(-1, keepdim=True)).exp()
        pick = (weights / exponential_noise(self.seed[span], position, ids)).argmax(-1)
        return ids.gather(1, pick[:, None])[:, 0]


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (xor-shift-multiply) of every element of ``x`` (int64, values < 2**32);
    the multipliers stay below 2**31, so no product overflows int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x5BD1E995) & _MASK32
    return x ^ (x >> 16)


def exponential_noise(seed: Any, position: Any, ids: Any) -> Any:
    """Standard exponential noise for tokens ``ids`` (rows, n), a function of each row's ``seed``
    and ``position`` ((rows, 1) int64) and the token id only."""
    import torch

    key = _mix32((seed & _MASK32) ^ _mix32(((seed >> 32) & _MASK32) ^ _mix32(position & _MASK32)))
    bits = _mix32(key ^ ((ids * 0x61C88647) & _MASK32))
    uniform = ((bits >> 8).float() + 0.5) / float(1 << 24)
    return -torch.log(uniform)
