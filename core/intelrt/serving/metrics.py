"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own per app, so two
servers in one process (tests, an embedding framework) never share counts."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of ``GET /metrics`` (Prometheus' text format)."""

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_GAP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServerMetrics:
    """Requests, tokens, queue depth, rows in flight, time to first token, inter-token latency, and
    the decode engine's own: KV blocks (all, in use), preemptions, out-of-memory retries, prefix-cache
    lookups and hits (in prompt tokens; their ratio is the hit rate)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("intelrt_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "code"], registry=r)
        self.prompt_tokens = Counter("intelrt_prompt_tokens", "Prompt tokens of accepted requests", registry=r)
        self.generated_tokens = Counter("intelrt_generated_tokens", "Tokens generated for clients", registry=r)
        self.queue_depth = Gauge("intelrt_queue_depth", "Completions waiting for a row", registry=r)
        self.rows_in_flight = Gauge("intelrt_rows_in_flight", "Completions decoding now", registry=r)
        self.ready = Gauge("intelrt_ready", "1 once the model is loaded and warmed up, 0 before and while draining",
                           registry=r)
        self.time_to_first_token = Histogram("intelrt_time_to_first_token_seconds",
                                             "From a request's arrival to its first generated text",
                                             buckets=LATENCY_BUCKETS, registry=r)
        self.inter_token_latency = Histogram("intelrt_inter_token_latency_seconds",
                                             "Time between a completion's tokens (one observation per token)",
                                             buckets=TOKEN_GAP_BUCKETS, registry=r)
        self.kv_blocks = Gauge("intelrt_kv_cache_blocks", "Blocks of the paged KV cache", registry=r)
        self.kv_blocks_used = Gauge("intelrt_kv_cache_blocks_used", "KV cache blocks held by requests", registry=r)
        self.preemptions = Counter("intelrt_preemptions", "Completions whose KV blocks were taken back to let others "
                                   "go on (recomputed later)", registry=r)
        self.oom_retries = Counter("intelrt_oom_retries", "Engine steps that ran out of device memory and were retried "
                                   "with fewer rows or tokens", registry=r)
        self.prefix_queried_tokens = Counter("intelrt_prefix_cache_queried_tokens",
                                             "Prompt tokens of admitted completions, looked up in the prefix cache",
                                             registry=r)
        self.prefix_hit_tokens = Counter("intelrt_prefix_cache_hit_tokens",
                                         "Prompt tokens found in the prefix cache (not prefilled again)", registry=r)
        self.engine_steps = Counter("intelrt_engine_steps", "Engine steps run (a forward over every decoding row's next "
                                    "token, and any prompt chunks)", registry=r)
        self.engine_mixed_steps = Counter("intelrt_engine_mixed_steps", "Engine steps that carried decoding rows and "
                                          "prompt chunks in one forward", registry=r)
        self.engine_prefill_tokens = Counter("intelrt_engine_prefill_tokens", "Prompt tokens the engine computed "
                                             "(prefix-cache hits not included)", registry=r)
        self.engine_looks = Counter("intelrt_engine_looks", "The engine's turns on the host: schedule, run one or more "
                                    "steps, hand out their tokens", registry=r)
        self.engine_look_seconds = Counter("intelrt_engine_look_seconds", "Wall time of the engine's looks", registry=r)
        self.engine_wait_seconds = Counter("intelrt_engine_wait_seconds", "Of the looks' time, the host waiting for the "
                                           "device's results (the rest is host work)", registry=r)
        self.engine_mixed_device_seconds = Counter("intelrt_engine_mixed_device_seconds", "Device time of the steps "
                                                   "that carried prompt chunks", registry=r)
        self.engine_decode_device_seconds = Counter("intelrt_engine_decode_device_seconds", "Device time of the "
                                                    "decode-only steps", registry=r)
        self.engine_compiles_after_warmup = Counter("intelrt_engine_compiles_after_warmup", "Frames compiled while "
                                                    "serving, after the warm-up (a shape it did not run)", registry=r)
        self.request_latency = Histogram("intelrt_request_latency_seconds",
                                         "From a request's arrival to its last byte of output", buckets=LATENCY_BUCKETS,
                                         registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
