"""How close a quantized model's next-token distributions are to the unquantized model's.

Measured, not assumed (issue 42): on the same token sequences, teacher-forced, the share of
positions whose most likely next token agrees (top-1 agreement) and the Kullback-Leibler
divergence of the quantized distribution from the reference one, KL(reference || quantized) in
nats, averaged over every position (and its largest value). :func:`step_logits` gets a model's
distributions through intelrt's compact step itself — the decode steps the fast loop runs, over
the paged KV cache — so what is measured is what intelrt computes, not only what the quantized
weights would give under another forward. ``benchmarks/bench_quantization.py`` prints these numbers
for intelrt and for torchao's own path (plain transformers with the same ``TorchAoConfig``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Fidelity:
    """Next-token agreement of a model with a reference over ``positions`` positions."""

    positions: int
    top1: float
    """Share of positions whose argmax equals the reference's."""
    kl_mean: float
    """Mean KL(reference || this) per position, in nats."""
    kl_max: float

    def within(self, reference: Fidelity, *, top1_slack: float = 0.02, kl_factor: float = 1.25,
               kl_floor: float = 1e-4) -> bool:
        """At least as close as ``reference`` (another path's fidelity to the same model), up to
        ``top1_slack`` fewer agreeing positions and ``kl_factor`` times its mean KL (``kl_floor``
        absorbs rounding when both are near zero)."""
        return self.top1 >= reference.top1 - top1_slack and self.kl_mean <= reference.kl_mean * kl_factor + kl_floor

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(reference: Any, logits: Any) -> Fidelity:
    """The fidelity of ``logits`` to ``reference`` (both (..., vocab), the same positions)."""
    import torch

    if reference.shape != logits.shape:
        raise ValueError(f"the logits differ in shape: reference {tuple(reference.shape)}, {tuple(logits.shape)}")
    ref = reference.reshape(-1, reference.shape[-1]).float()
    got = logits.reshape(-1, logits.shape[-1]).float()
    ref_log, got_log = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
    kl = (ref_log.exp() * (ref_log - got_log)).sum(-1).clamp_min(0)
    top1 = (ref.argmax(-1) == got.argmax(-1)).float().mean()
    return Fidelity(int(ref.shape[0]), float(top1), float(kl.mean()), float(kl.max()))


def model_logits(model: Any, ids: Any) -> Any:
    """The model's own forward over ``ids`` (rows, T): next-token logits (rows, T, vocab)."""
    import torch

    with torch.inference_mode():
        return model(input_ids=ids).logits


def step_logits(model: Any, ids: Any, *, gemv: bool = False, block_size: int = 16) -> Any:
    """Next-token logits (rows, T, vocab) of ``ids`` (rows, T) through intelrt's compact decode
    step, one token per step over a paged KV cache (each row its own blocks), teacher-forced:
    step ``t`` reads token ``t`` and gives the distribution of token ``t + 1``. ``gemv``: the
    projections as the compiled few-row step writes them (multiply-and-sum, run eagerly here).
    ``Unsupported`` when the compact step does not serve the model."""
    import torch

    from .compact import CompactModel

    step = CompactModel(model)
    rows, steps = ids.shape
    width = -(-steps // block_size)
    cache = step.new_cache(rows * width, block_size, ids.device, prefix_caching=False)
    table = torch.arange(rows * width, device=ids.device).view(rows, width)
    out = []
    with torch.inference_mode():
        for t in range(steps):
            positions = torch.full((rows, 1), t, device=ids.device)
            slots = table[:, t // block_size] * block_size + t % block_size
            out.append(step.decode(ids[:, t:t + 1], positions, slots, table, cache.keys, cache.values, gemv=gemv))
    return torch.stack(out, dim=1)
