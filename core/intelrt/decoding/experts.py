"""A mixture-of-experts block in the compact decode step (Qwen3-MoE, Mixtral).

transformers' experts forward loops over the experts a batch selected, finding them with
``nonzero`` — a host synchronisation per layer, which no device graph can hold, and a loop the
compiler cannot unroll. Here the router is the same (softmax in float32, top-k, the family's
normalisation) and the experts' own 3-D weights are read in one of three static-shaped ways:

* few tokens (a decode step: tokens × top-k at most the number of experts): each token's
  selected experts' weights are gathered and applied, so only those weights are read — a decode
  step of a large MoE model reads a small share of its parameters;
* up to ``DecodeTuning.experts_dense_max_tokens`` tokens: every expert on every token, weighted
  by the routing (zero for the experts not chosen), which sums the chosen experts in transformers'
  order and keeps the shapes static for graph capture;
* more tokens (a long prompt): the model's own block.
"""

from __future__ import annotations

from typing import Any

from ..backends.families import Unsupported

EXPERT_KINDS = ("qwen3_moe", "mixtral")


class Experts:
    """The router and experts of one sparse block, read from the block's own parameters (no copy)."""

    def __init__(self, block: Any, kind: str, where: str, dense_max_tokens: int) -> None:
        import torch

        router: Any = getattr(block, "gate", None)
        experts: Any = getattr(block, "experts", None)
        weights: list[Any] = [getattr(router, "weight", None), getattr(experts, "gate_up_proj", None),
                   getattr(experts, "down_proj", None)]
        if kind not in EXPERT_KINDS or not all(isinstance(w, torch.nn.Parameter) for w in weights):
            raise Unsupported(f"{where} mlp is a {type(block).__name__}, not a router with 3-D expert weights")
        if [w.dim() for w in weights] != [2, 3, 3] or getattr(experts, "has_bias", False) or \
                getattr(experts, "gate_up_proj_bias", None) is not None:
            raise Unsupported(f"{where} mlp's experts are not laid out as gate_up_proj (E, 2I, H), down_proj (E, H, I)")
        if getattr(experts, "is_transposed", False) or not getattr(experts, "is_concatenated", True):
            raise Unsupported(f"{where} mlp's experts hold transposed or interleaved weights")
        self.block, self.router, self.experts = block, router, experts
        self.top_k = int(router.top_k)
        self.count = int(weights[0].shape[0])
        self.normalise = kind == "mixtral" or bool(getattr(router, "norm_topk_prob", False))
        self.round_weights = kind == "qwen3_moe"
        self.act = experts.act_fn
        self.dense_max_tokens = dense_max_tokens

    def __call__(self, x: Any) -> Any:
        """The block's output for ``x`` (rows, T, hidden), already normed."""
        import torch

        rows, steps, hidden = x.shape
        tokens = rows * steps
        if tokens > self.dense_max_tokens:
            return self.block(x)
        flat = x.reshape(tokens, hidden)
        logits = torch.nn.functional.linear(flat, self.router.weight)
        probs = torch.softmax(logits.float(), dim=-1)
        top, index = torch.topk(probs, self.top_k, dim=-1)
        if self.normalise:
            top = top / top.sum(dim=-1, keepdim=True)
        weights = top.to(logits.dtype) if self.round_weights else top
        if tokens * self.top_k <= self.count:
            out = self._gathered(flat, index, weights)
        else:
            out = self._dense(flat, index, weights)
        return out.reshape(rows, steps, hidden)

    def _gathered(self, flat: Any, index: Any, weights: Any) -> Any:
        """Each token through its own top-k experts: (tokens, k, ...) weights gathered by index."""
        import torch

        gate_up = self.experts.gate_up_proj[index]  # (tokens, k, 2I, H)
        projected = torch.matmul(gate_up, flat[:, None, :, None]).squeeze(-1)
        gate, up = projected.chunk(2, dim=-1)
        down = self.experts.down_proj[index]  # (tokens, k, H, I)
        out = torch.matmul(down, (self.act(gate) * up)[..., None]).squeeze(-1)
        return (out * weights[..., None]).to(flat.dtype).sum(1)

    def _dense(self, flat: Any, index: Any, weights: Any) -> Any:
        """Every expert on every token, weighted by the routing (zero where not chosen)."""
        import torch

        projected = torch.einsum("th,eoh->teo", flat, self.experts.gate_up_proj)
        gate, up = projected.chunk(2, dim=-1)
        out = torch.einsum("tei,ehi->teh", self.act(gate) * up, self.experts.down_proj)
        routing = torch.zeros(flat.shape[0], self.count, dtype=weights.dtype, device=flat.device)
        routing = routing.scatter(1, index, weights)
        return (out * routing[..., None]).to(flat.dtype).sum(1)
