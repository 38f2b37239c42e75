"""The forward the engine runs over its paged KV cache (``paged.py``): intelrt's compact step, or the
model's own forward.

Both give ``decode(input_ids, positions, write_slots, table)`` — the next-token logits of
one new token per row — and ``prefill(input_ids, positions, write_slots, segments)`` — the logits
after the last token of each of several requests' prompt chunks, packed end to end.

``CompactForward``: the compact step (``compact.py``), compiled or not. ``ModelForward``: the
model's own forward (any decoder-only model transformers runs with SDPA or eager attention), fed a
:class:`PagedModelCache` — a transformers ``Cache`` whose layers write each new key and value at
its slot of the paged cache and hand the attention the rows' contexts gathered from their blocks —
and a 4D attention mask built from the rows' lengths, which transformers' mask code passes through
unchanged (``masking_utils._preprocess_mask_arguments``). transformers' own continuous batching runs
the model's forward over its paged cache the same way (``generation/continuous_batching/cache.py``,
``PagedAttentionCache.update``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..backends.decode_rules import ENGINE_LAYER_TYPES as LAYER_KINDS
from ..backends.families import layer_windows as windows_of
from . import paged
from .compact import CompactModel, Segment
from .paged import PagedCache

if TYPE_CHECKING:
    from .lora import EngineAdapters

#: Attention implementations whose masks ``ModelForward`` builds (bool for SDPA, additive for eager).
MASKED_ATTENTION = ("sdpa", "eager")


class CompactForward:
    """The compact step over ``cache``; ``decode_fn`` is ``compact.decode`` or its compiled form;
    ``fused_attention``: decode steps run the one-kernel attention (the plan's ``attention_kernel``,
    where the model fits the kernel); ``gemv``: a compiled step of few rows writes its projections
    as multiply-and-sum; ``unified``: the plan's attention kernel runs on this device (a step's
    prompt chunks and decoding rows attend through ``unified_attention``, whether or not an adaptive
    plan has compiled the decode step yet)."""

    def __init__(self, compact: CompactModel, cache: PagedCache, decode_fn: Callable[..., Any], *, gemv: bool,
                 fused_attention: bool, unified: bool = False, flat_fn: Callable[..., Any] | None = None) -> None:
        self.compact, self.cache, self.decode_fn = compact, cache, decode_fn
        self.flat_fn = flat_fn
        """``compact.flat_step`` compiled once for every token count (``FastDecoder.compiled_flat``), or
        ``None`` where the step is not compiled so."""
        self.gemv = gemv
        self.fused_attention = fused_attention and compact.attention_kernel_fits()
        self.planned_kernel = unified
        """The plan runs intelrt's attention kernels on this device (``unified_attention``)."""

    def blocker(self) -> str | None:
        return None

    def decode(self, input_ids: Any, positions: Any, write_slots: Any, table: Any) -> Any:
        return self.decode_fn(input_ids, positions, write_slots, table, self.cache.keys, self.cache.values, self.gemv,
                              self.fused_attention)

    def prefill(self, input_ids: Any, positions: Any, write_slots: Any, segments: Sequence[Segment],
                tables: Any = None, last: Sequence[int] | None = None) -> Any:
        """``CompactModel.prefill`` over this forward's cache (``last``: the token whose logits each
        segment gives, when not its last: a padded segment's)."""
        return self.compact.prefill(input_ids, positions, write_slots, segments, self.cache.keys, self.cache.values,
                                    self.unified_attention, tables, last)

    def flat(self, input_ids: Any, positions: Any, write_slots: Any, cu_q: Any, lengths: Any, table: Any, last: Any,
             compiled: bool = False) -> Any:
        """``CompactModel.flat_step`` over this forward's cache (``compiled``: its compiled form, where
        there is one)."""
        step, keys, values = self.compact.flat_step, self.cache.keys, self.cache.values
        if compiled and self.flat_fn is not None:
            import torch

            # Symbolic: the token count, so that one graph serves every step size, and the cache's
            # blocks, so that the graph compiled in the memory profile over its cache of two blocks
            # (where its peak is counted, and only a server's start waits for it) serves the
            # engine's. Nothing else: with every size symbolic,
            # inductor's CPU code generation spends minutes simplifying. The pools are marked through
            # views of this call's: a mark stays on its tensor, and the compiled decode step, which
            # reads the pools themselves, would compile again on finding one.
            step, keys, values = self.flat_fn, [pool[:] for pool in keys], [pool[:] for pool in values]
            marks = [(input_ids, 1), (positions, 1), (write_slots, 0), *((pool, 0) for pool in (*keys, *values))]
            for tensor, dim in marks:
                torch._dynamo.mark_dynamic(tensor, dim)
        return step(input_ids, positions, write_slots, cu_q, lengths, table, last, keys, values)

    @property
    def compiles_flat(self) -> bool:
        """:meth:`flat` has a compiled form."""
        return self.flat_fn is not None

    def tune_attention(self, tokens: int, rows: int, context: int) -> None:
        """Tune the step attention kernel on a busy step's shape (``CompactModel.tune_step_attention``),
        where steps attend through it."""
        if self.unified_attention:
            self.compact.tune_step_attention(self.cache.keys, tokens, rows, context)

    @property
    def flat_fits(self) -> bool:
        """Steps over padded token counts can be captured (``CompactModel.flat_fits``, with the plan's
        step attention)."""
        return self.unified_attention and self.compact.flat_fits()

    @property
    def unified_attention(self) -> bool:
        """A step's attention runs as one Triton kernel per layer (``unified_attention.py``): the plan's
        attention kernel, on a model whose layers fit it."""
        return self.planned_kernel and self.compact.unified_fits()


def layer_kinds(config: Any) -> list[str]:
    """Each layer's attention kind (transformers' ``config.layer_types``; without it, every layer
    sliding when the config has a ``sliding_window``, as transformers' continuous batching reads it:
    ``continuous_batching/cache.py``, ``group_layers_by_attn_type``)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = getattr(text, "layer_types", None)
    if kinds is None:
        window = getattr(text, "sliding_window", None)
        kinds = ["sliding_attention" if window else "full_attention"] * int(text.num_hidden_layers)
    return [str(kind) for kind in kinds]


def layer_windows(config: Any) -> list[int | None]:
    """Each layer's sliding window (``None``: full attention), as transformers' masks apply it."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return windows_of({"sliding_window": getattr(text, "sliding_window", None), "layer_types": layer_kinds(config)},
                      int(text.num_hidden_layers))


class _PagedLayer:
    """One layer of :class:`PagedModelCache` (transformers calls ``update`` from the attention)."""

    is_sliding = False
    is_compileable = False
    is_initialized = True

    def __init__(self, cache: PagedModelCache, index: int) -> None:
        self.owner, self.index = cache, index

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return self.owner.store(self.index, key_states, value_states)

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:  # pragma: no cover - masks come 4D
        raise NotImplementedError("the paged cache's masks are built by intelrt, never by transformers")

    def reset(self) -> None:
        """Nothing to reset: the engine owns the blocks."""


class PagedModelCache:
    """A transformers ``Cache`` over the engine's paged cache, for the model's own forward (made by
    :func:`paged_model_cache`, a subclass of transformers' ``Cache``).

    ``bind(write_slots, table)`` before a forward: ``write_slots`` (rows, T) where each new token's
    key and value go; ``table`` (rows, width) the blocks whose slots ``update`` returns, in order,
    as the layer's keys and values (rows, kv_heads, width * block_size, head_dim)."""

    paged: PagedCache
    write_slots: Any = None
    table: Any = None

    def bind(self, write_slots: Any, table: Any) -> None:
        self.write_slots, self.table = write_slots, table

    def store(self, index: int, key_states: Any, value_states: Any) -> tuple[Any, Any]:
        keys, values = self.paged.keys[index], self.paged.values[index]
        if key_states.shape[1] != keys.shape[2] or key_states.shape[3] != keys.shape[3]:
            raise ValueError(f"layer {index} has {key_states.shape[1]} key/value heads of {key_states.shape[3]} "
                             f"features; the paged cache was sized for {keys.shape[2]} of {keys.shape[3]}")
        slots = self.write_slots.reshape(-1)
        paged.write(keys, slots, key_states.transpose(1, 2).reshape(-1, keys.shape[2], keys.shape[3]))
        paged.write(values, slots, value_states.transpose(1, 2).reshape(-1, keys.shape[2], keys.shape[3]))
        dtype = key_states.dtype
        return paged.gather(keys, self.table).to(dtype), paged.gather(values, self.table).to(dtype)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


@functools.cache
def _cache_class() -> type:
    from transformers.cache_utils import Cache

    return type("PagedModelCache", (PagedModelCache, Cache), {})


def paged_model_cache(cache: PagedCache, layers: int) -> PagedModelCache:
    """A :class:`PagedModelCache` of ``layers`` layers over ``cache``."""
    from transformers.cache_utils import Cache

    made: PagedModelCache = object.__new__(_cache_class())
    layer_list: Any = [_PagedLayer(made, i) for i in range(layers)]
    Cache.__init__(made, layers=layer_list)  # type: ignore[arg-type]
    made.paged = cache
    return made


class ModelForward:
    """The model's own forward (``forward``: the model or its compiled form) over ``cache``."""

    def __init__(self, model: Any, cache: PagedCache, forward: Callable[..., Any], cache_kwarg: str,
                 keep_logits: bool, adapters: EngineAdapters | None = None) -> None:
        self.model, self.cache, self.forward = model, cache, forward
        self.adapters = adapters
        """The model's LoRA adapters: ``decode``/``prefill`` given ``adapter_keys`` apply them per row."""
        self.cache_kwarg, self.keep_logits = cache_kwarg, keep_logits
        self.fused_attention = False
        config = model.config
        self.attention = str(getattr(config, "_attn_implementation", None) or "eager")
        self.kinds = layer_kinds(config)
        self.windows = layer_windows(config)
        self.sliding = sorted({w for w in self.windows if w is not None})
        self.model_cache = paged_model_cache(cache, len(self.windows))

    def blocker(self) -> str | None:
        """Why the model's forward cannot run over the paged cache, or ``None``."""
        if self.attention not in MASKED_ATTENTION:
            return (f"the model runs {self.attention} attention, which takes no 4D mask over gathered context; the "
                    f"engine runs the model's own forward with {' or '.join(MASKED_ATTENTION)} attention")
        odd = sorted(set(self.kinds) - set(LAYER_KINDS))
        if odd:
            return (f"the model has {', '.join(odd)} layers; the engine masks the model's own forward for "
                    f"{' and '.join(LAYER_KINDS)} layers only")
        if len(self.sliding) > 1:
            return f"the model's layers slide over windows of {', '.join(map(str, self.sliding))}: one window at most"
        return None

    def tune_attention(self, tokens: int, rows: int, context: int) -> None:
        """Nothing to tune: the model's own attention runs."""

    def _mask(self, allowed: Any) -> Any:
        """``allowed`` (rows, T, L) as the attention implementation wants it: bool for SDPA, 0 / the
        dtype's lowest number for eager (transformers' ``sdpa_mask`` and ``eager_mask``)."""
        import torch

        mask = allowed[:, None]
        if self.attention == "eager":
            dtype = self.model.dtype
            return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask,
                                                                                      torch.finfo(dtype).min)
        return mask

    def _masks(self, allowed: Any, positions: Any, key_positions: Any) -> Any:
        if not self.sliding:
            return self._mask(allowed)
        window = self.sliding[0]
        return {"full_attention": self._mask(allowed),
                "sliding_attention": self._mask(allowed & (key_positions > positions[..., None] - window))}

    def _inputs(self, input_ids: Any, positions: Any, masks: Any) -> dict[str, Any]:
        inputs = {"input_ids": input_ids, "attention_mask": masks, "position_ids": positions,
                  self.cache_kwarg: self.model_cache, "use_cache": True}
        if self.keep_logits:
            inputs["logits_to_keep"] = 1
        return inputs

    def _run(self, inputs: dict[str, Any], adapter_keys: Sequence[str] | None, forward: Callable[..., Any]) -> Any:
        """``forward(**inputs)``; with ``adapter_keys``, the eager model inside PEFT's mixed-batch
        hooks (row ``i`` under adapter ``adapter_keys[i]``: the hooks are Python, never compiled or captured)."""
        if adapter_keys is None:
            return forward(**inputs)
        if self.adapters is None:
            raise RuntimeError("this forward was made without the model's LoRA adapters")
        with self.adapters.rows(adapter_keys):
            return self.model(**inputs)

    def decode(self, input_ids: Any, positions: Any, write_slots: Any, table: Any,
               adapter_keys: Sequence[str] | None = None, eager: bool = False) -> Any:
        """Next-token logits of one new token per row (``eager``: the model's forward as it is, not
        the compiled one, whose shapes a mixed step's rows would not match)."""
        import torch

        self.model_cache.bind(write_slots[:, None], table)
        key_positions = torch.arange(table.shape[1] * self.cache.block_size, device=input_ids.device)[None, None, :]
        allowed = key_positions <= positions[..., None]
        masks = self._masks(allowed, positions, key_positions)
        forward = self.model if eager else self.forward
        return self._run(self._inputs(input_ids, positions, masks), adapter_keys, forward).logits[:, -1, :]

    def prefill(self, input_ids: Any, positions: Any, write_slots: Any, segments: Sequence[Segment],
                adapter_keys: Sequence[str] | None = None, tables: Any = None,
                last: Sequence[int] | None = None) -> Any:
        """The logits of every segment's last token, in order (``adapter_keys``: each segment's
        adapter): the leading one-token segments (a mixed step's decoding rows) as one batched
        ``decode``, then one forward per segment (the model's forward attends one row's context at
        a time). ``last``: the token whose logits each segment gives, when not its last (a padded
        segment's)."""
        import torch

        rows: list[Any] = []
        singles = 0 if last is not None else paged.leading_single_tokens(segments)
        if singles > 1:
            table = paged.singles_table(segments[:singles], self.cache.block_size)
            keys = None if adapter_keys is None else list(adapter_keys[:singles])
            rows.append(self.decode(input_ids[0, :singles, None], positions[0, :singles, None],
                                    write_slots[:singles], table, keys, eager=True))
            segments = segments[singles:]
            adapter_keys = None if adapter_keys is None else adapter_keys[singles:]
        done = len(rows)
        for seg in segments:
            blocks = seg.width or -(-seg.context // self.cache.block_size)
            table = seg.table[:, :blocks]
            self.model_cache.bind(write_slots[None, seg.start:seg.end], table)
            chunk = positions[:, seg.start:seg.end]
            key_positions = torch.arange(blocks * self.cache.block_size, device=input_ids.device)[None, None, :]
            allowed = (key_positions <= chunk[..., None]) & (key_positions < seg.context)
            masks = self._masks(allowed, chunk, key_positions)
            keys = None if adapter_keys is None else [adapter_keys[len(rows) - done]]
            inputs = self._inputs(input_ids[:, seg.start:seg.end], chunk, masks)
            index = -1
            if last is not None:  # a padded segment: the logits of its last real token
                index = last[len(rows) - done] - seg.start
                if self.keep_logits:
                    inputs["logits_to_keep"] = torch.tensor([index], device=input_ids.device)
                    index = -1
            out = self._run(inputs, keys, self.model)
            rows.append(out.logits[:, index, :])
        return torch.cat(rows)


StepForward = CompactForward | ModelForward
