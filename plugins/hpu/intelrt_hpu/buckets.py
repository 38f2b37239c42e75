"""Shape buckets on Gaudi: a few prompt and decode shapes, warmed up at load (vLLM-Gaudi's bucketing).

Gaudi compiles a graph per input shape — lazy mode's graphs, HPU graphs, ``hpu_backend`` compiles
(``dynamic=False``) — so vLLM-Gaudi pads every batch to one of a few buckets and runs each bucket at
start, "so serving never compiles" (vllm-gaudi ``docs/features/bucketing_mechanism.md``;
vllm-gaudi#129, vllm-fork#201). Its default strategy since Gaudi software 1.22 is exponential
(``VLLM_BUCKETING_STRATEGY=exp``, ``vllm_gaudi/extension/bucketing/exponential.py``): each dimension
is a ``(min, step, max, limit)`` range whose ``limit`` sizes are spaced exponentially from ``min``
to ``max``, rounded up to ``step``, repeats dropped (``warmup_range_with_limit``), with
``limit = ceil(log2(max)) + 1`` (``get_prompt_buckets``, ``get_decode_buckets``):

* prompt lengths ``(block_size, block_size, longest prompt, …)``;
* prompt and decode batch sizes ``(1, 1, rows, …)`` — vLLM-Gaudi steps batch sizes by 2, which
  drops the batch of one; intelrt keeps it, the one-shot case;
* decode context blocks ``(1, 1, rows × blocks per row, …)``.

``block_size`` is 128, vLLM-Gaudi's default on Gaudi ("smaller sizes still work, but very
inefficiently", ``vllm_gaudi/platform.py`` ``check_and_update_config``). The warm-up runs every
bucket at load for a server or a batch workload (vLLM-Gaudi ``warmup_model``);
``VLLM_SKIP_WARMUP=true`` turns it off, as in vLLM-Gaudi, where it is "for development only"
(``docs/configuration/performance_tuning.md``).
"""

from __future__ import annotations

import math

from intelrt.plugin import Backend, Buckets, Decision, Situation, context_limit

from .facts import execution_mode

BLOCK_SIZE = 128
SKIP_WARMUP_VAR = "VLLM_SKIP_WARMUP"
WARMED_WORKLOADS = ("server", "batch")
VLLM_GAUDI_BUCKETS = ("vllm-gaudi's exponential bucketing (vllm_gaudi/extension/bucketing/exponential.py; "
                      "docs/features/bucketing_mechanism.md)")


def exponential_sizes(minimum: int, step: int, maximum: int, limit: int | None = None) -> tuple[int, ...]:
    """``limit`` (default ``ceil(log2(maximum)) + 1``) sizes spaced exponentially from ``minimum`` to
    ``maximum``, each rounded up to a multiple of ``step`` (never past ``maximum``), repeats dropped."""
    maximum = max(maximum, minimum)
    if limit is None:
        limit = math.ceil(math.log2(maximum)) + 1 if maximum > 1 else 1
    if limit == 1 or maximum == minimum:
        return (maximum,)
    sizes = set()
    for i in range(limit):
        raw = minimum * (maximum / minimum) ** (i / (limit - 1))
        sizes.add(min(maximum, step * math.ceil(raw / step - 1e-9)))  # 1e-9: float error must not add a step
    return tuple(sorted(sizes))


PROMPT_PASSES = 2
"""A prompt pass holds at most this many full-context prompts' tokens (intelrt's token budget, in the
role of vLLM's ``max_num_batched_tokens``): the largest prompt buckets' activations must fit too."""


def gaudi_buckets(rows: int, context: int, warmup: bool) -> Buckets:
    """The buckets of an engine with ``rows`` rows of ``context`` tokens each."""
    blocks_per_row = math.ceil(context / BLOCK_SIZE)
    batch = exponential_sizes(1, 1, rows)
    return Buckets("exponential", prompt_batch_sizes=batch,
                   prompt_lengths=exponential_sizes(min(BLOCK_SIZE, context), min(BLOCK_SIZE, context), context),
                   decode_batch_sizes=batch, decode_blocks=exponential_sizes(1, 1, rows * blocks_per_row),
                   block_size=BLOCK_SIZE, prompt_tokens=PROMPT_PASSES * context, warmup=warmup)


def select_buckets(backend: Backend, s: Situation) -> Decision | None:
    """Buckets where decode compiles or captures a graph per shape (the plan's decode decision), for
    the engine's rows and context; warm-up at load for ``workload="server"`` / ``"batch"``."""
    request, decided = s.request, s.decided
    if request.buckets == "off":
        return Decision(None, "turned off by the user: prompts and batches run at their own shapes, and every new "
                              "shape compiles a graph mid-run", claim="H1")
    decode = decided.decode
    compiled = decode is not None and decode.fast and bool(decode.graphs or decode.compile)
    if not compiled and request.buckets == "auto":
        return None  # nothing compiles per shape: nothing to pad
    lazy, mode = execution_mode(backend, s.env)
    batching = decided.batching
    rows = batching.max_batch if batching is not None and batching.max_batch else backend.max_padded_batch
    context = context_limit(s.model)
    skip = s.env.get(SKIP_WARMUP_VAR, "").lower() in ("1", "true")
    warm = request.workload in WARMED_WORKLOADS and not skip
    value = gaudi_buckets(rows, context, warm)
    graphs = ("one HPU graph per decode bucket" if decode is not None and decode.graphs else
              "one hpu_backend compile per bucket (dynamic=False)")
    reason = (f"Gaudi compiles a graph per input shape ({'lazy' if lazy else 'eager'} mode, {mode}: {graphs}); "
              f"prompts and decode batches are padded to {VLLM_GAUDI_BUCKETS}, for {rows} rows of {context} tokens "
              f"in KV-cache blocks of {BLOCK_SIZE} (vllm-gaudi's Gaudi default, vllm_gaudi/platform.py), at most "
              f"{value.prompt_tokens} tokens per prompt pass")
    if warm:
        reason += (f"; every bucket is warmed up at load, largest first, so a {request.workload} workload compiles "
                   "nothing once it runs (vllm-gaudi warmup_model)")
    elif skip:
        reason += f"; no warm-up: {SKIP_WARMUP_VAR}={s.env[SKIP_WARMUP_VAR]} (vllm-gaudi: for development only)"
    else:
        reason += (f"; no warm-up for workload={request.workload!r}: each bucket compiles at its first use "
                   "(workload='server' or 'batch' warms them at load)")
    notes = (f"{len(value.prompt_shapes())} prompt buckets and {len(value.decode_shapes())} decode buckets; a batch "
             "beyond the largest runs unpadded and compiles mid-run; buckets='off' turns padding off",)
    return Decision(value, reason, claim="H1", notes=notes)
