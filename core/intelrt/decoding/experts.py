"""A mixture-of-experts block in the compact decode step (Qwen3-MoE, Mixtral, GPT-OSS, DeepSeek-V2/V3).

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

EXPERT_KINDS = ("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v2", "deepseek_v3")
"""How a family routes: the router of ``Experts._route`` and the expert weights' layout."""
TRANSPOSED = ("gpt_oss",)
"""Kinds whose experts store (E, in, out) weights with biases, gate and up interleaved, and a clamped
SwiGLU (``GptOssExperts``); the others store (E, out, in), gate then up, no biases."""
SHARED = ("deepseek_v2", "deepseek_v3")
"""Kinds whose block adds shared experts (an MLP every token runs) to the routed ones."""


class Experts:
    """The router and experts of one sparse block, read from the block's own parameters (no copy)."""

    def __init__(self, block: Any, kind: str, where: str, dense_max_tokens: int) -> None:
        import torch

        router: Any = getattr(block, "router" if kind == "gpt_oss" else "gate", None)
        experts: Any = getattr(block, "experts", None)
        weights: list[Any] = [getattr(router, "weight", None), getattr(experts, "gate_up_proj", None),
                   getattr(experts, "down_proj", None)]
        if kind not in EXPERT_KINDS or not all(isinstance(w, torch.nn.Parameter) for w in weights):
            raise Unsupported(f"{where} mlp is a {type(block).__name__}, not a router with 3-D expert weights")
        transposed = kind in TRANSPOSED
        biases = [getattr(experts, "gate_up_proj_bias", None), getattr(experts, "down_proj_bias", None)]
        if transposed:
            if [w.dim() for w in weights] != [2, 3, 3] or not all(isinstance(b, torch.nn.Parameter) for b in biases) \
                    or not getattr(experts, "is_transposed", False) or getattr(experts, "is_concatenated", True):
                raise Unsupported(f"{where} mlp's experts are not laid out as GPT-OSS's: gate_up_proj (E, H, 2I) "
                                  "interleaved, down_proj (E, I, H), with biases")
        else:
            if [w.dim() for w in weights] != [2, 3, 3] or getattr(experts, "has_bias", False) or \
                    biases[0] is not None:
                raise Unsupported(f"{where} mlp's experts are not laid out as gate_up_proj (E, 2I, H), "
                                  "down_proj (E, H, I)")
            if getattr(experts, "is_transposed", False) or not getattr(experts, "is_concatenated", True):
                raise Unsupported(f"{where} mlp's experts hold transposed or interleaved weights")
        self.shared: Any = getattr(block, "shared_experts", None) if kind in SHARED else None
        if kind in SHARED and self.shared is None:
            raise Unsupported(f"{where} mlp has no shared experts")
        self.block, self.router, self.experts, self.kind = block, router, experts, kind
        self.transposed = transposed
        self.top_k = int(router.top_k)
        self.count = int(weights[0].shape[0])
        self.normalise = kind == "mixtral" or bool(getattr(router, "norm_topk_prob", False))
        self.round_weights = kind == "qwen3_moe"
        self.act: Any = getattr(experts, "act_fn", None)
        self.dense_max_tokens = dense_max_tokens

    def __call__(self, x: Any) -> Any:
        """The block's output for ``x`` (rows, T, hidden), already normed."""
        rows, steps, hidden = x.shape
        tokens = rows * steps
        if tokens > self.dense_max_tokens:
            out = self.block(x)
            return out[0] if isinstance(out, tuple) else out  # GPT-OSS's block also returns its routing
        flat = x.reshape(tokens, hidden)
        index, weights = self._route(flat)
        if tokens * self.top_k <= self.count:
            out = self._gathered(flat, index, weights)
        else:
            out = self._dense(flat, index, weights)
        out = out.reshape(rows, steps, hidden)
        return out if self.shared is None else out + self.shared(x)

    def _route(self, flat: Any) -> tuple[Any, Any]:
        """(expert indices, routing weights), each (tokens, top_k), as the family's router computes them:
        ``Qwen3MoeTopKRouter`` / ``MixtralTopKRouter`` (softmax, top-k, normalised), ``GptOssTopKRouter``
        (top-k of the biased logits, softmax over those), ``DeepseekV2TopkRouter`` (float32 softmax,
        greedy or group-limited top-k, scaled), ``DeepseekV3TopkRouter`` (sigmoid, bias-corrected
        choice within the best groups, normalised and scaled)."""
        import torch

        router = self.router
        if self.kind == "gpt_oss":
            logits = torch.nn.functional.linear(flat, router.weight, router.bias)
            top, index = torch.topk(logits, self.top_k, dim=-1)
            return index, torch.softmax(top, dim=1, dtype=top.dtype)
        if self.kind in SHARED:
            return self._grouped_route(flat)
        logits = torch.nn.functional.linear(flat, router.weight)
        probs = torch.softmax(logits.float(), dim=-1)
        top, index = torch.topk(probs, self.top_k, dim=-1)
        if self.normalise:
            top = top / top.sum(dim=-1, keepdim=True)
        return index, top.to(logits.dtype) if self.round_weights else top

    def _grouped_route(self, flat: Any) -> tuple[Any, Any]:
        """DeepSeek-V2/V3's routers (``DeepseekV2TopkRouter.forward``, ``DeepseekV3TopkRouter.forward``)."""
        import torch

        router, count = self.router, self.count
        logits = torch.nn.functional.linear(flat.type(torch.float32), router.weight.type(torch.float32))
        groups = router.num_group
        if self.kind == "deepseek_v2":
            scores = logits.softmax(dim=-1, dtype=torch.float32)
            if router.topk_method == "group_limited_greedy":
                group_scores = scores.view(-1, groups, count // groups).max(dim=-1).values
                scores = scores.masked_fill(~self._group_mask(group_scores, router.topk_group, groups), 0.0)
            weights, index = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
            return index, weights * router.routed_scaling_factor
        scores = logits.sigmoid()
        choice = scores + router.e_score_correction_bias
        group_scores = choice.view(-1, groups, count // groups).topk(2, dim=-1)[0].sum(dim=-1)
        choice = choice.masked_fill(~self._group_mask(group_scores, router.topk_group, groups), float("-inf"))
        index = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, index)
        if router.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return index, weights * router.routed_scaling_factor

    def _group_mask(self, group_scores: Any, chosen: int, groups: int) -> Any:
        """(tokens, experts): True for the experts of each token's ``chosen`` best groups."""
        import torch

        group_index = torch.topk(group_scores, k=chosen, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, group_index, 1)
        return mask.unsqueeze(-1).expand(-1, groups, self.count // groups).reshape(-1, self.count).bool()

    def _gated(self, gate_up: Any) -> Any:
        """The experts' activation of their gate/up output: the model's own ``_apply_gate`` for
        GPT-OSS (interleaved, clamped SwiGLU), else ``act(gate) * up`` of its two halves."""
        if self.transposed:
            return self.experts._apply_gate(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act(gate) * up

    def _gathered(self, flat: Any, index: Any, weights: Any) -> Any:
        """Each token through its own top-k experts: (tokens, k, ...) weights gathered by index."""
        import torch

        gate_up = self.experts.gate_up_proj[index]  # (tokens, k, 2I, H), transposed: (tokens, k, H, 2I)
        down = self.experts.down_proj[index]  # (tokens, k, H, I), transposed: (tokens, k, I, H)
        if self.transposed:
            projected = torch.matmul(flat[:, None, None, :], gate_up).squeeze(-2) + \
                self.experts.gate_up_proj_bias[index]
            out = torch.matmul(self._gated(projected)[..., None, :], down).squeeze(-2) + \
                self.experts.down_proj_bias[index]
        else:
            projected = torch.matmul(gate_up, flat[:, None, :, None]).squeeze(-1)
            out = torch.matmul(down, self._gated(projected)[..., None]).squeeze(-1)
        return (out * weights[..., None]).to(flat.dtype).sum(1)

    def _dense(self, flat: Any, index: Any, weights: Any) -> Any:
        """Every expert on every token, weighted by the routing (zero where not chosen)."""
        import torch

        if self.transposed:
            projected = torch.einsum("th,eho->teo", flat, self.experts.gate_up_proj) + self.experts.gate_up_proj_bias
            out = torch.einsum("tei,eih->teh", self._gated(projected), self.experts.down_proj) + \
                self.experts.down_proj_bias
        else:
            projected = torch.einsum("th,eoh->teo", flat, self.experts.gate_up_proj)
            out = torch.einsum("tei,ehi->teh", self._gated(projected), self.experts.down_proj)
        routing = torch.zeros(flat.shape[0], self.count, dtype=weights.dtype, device=flat.device)
        routing = routing.scatter(1, index, weights)
        return (out * routing[..., None]).to(flat.dtype).sum(1)
