"""``intelrt serve``: load a model as planned and serve it with the OpenAI API (``intelrt.serving``)."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import count, positive_number
from .models import announce_download, default_model, load_planned, require_generation, simulated
from .output import emit

SERVE_DESCRIPTION = """\
Load MODEL as planned (the plan is printed first) and serve it with the OpenAI API on HOST:PORT:
/v1/completions, /v1/chat/completions (streamed with SSE when asked), /v1/models, /health and
/metrics. Completions join and leave one running batch between decode steps (in-flight batching)
when the plan decodes on the fast loop; otherwise they run one at a time. SIGTERM or Ctrl-C drains
the requests in flight, then exits with status 0. With --simulate, only the plan and the limits it
would serve with are shown (see docs/serving.md)."""

SERVE_EXAMPLES = """\
examples:
  intelrt serve                                  # the embedded tiny model on 127.0.0.1:8000
  intelrt serve Qwen/Qwen3-0.6B --port 8080 --max-batch 32
  intelrt serve ./my-model --simulate xpu:1      # the limits it would get on an Intel GPU"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..serving.limits import DRAIN_TIMEOUT_S

    parser.add_argument("model", nargs="?", default=None,
                        help="a directory saved with save_pretrained(), or a hub id (org/name); default: the "
                             "embedded tiny model")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=count(0, 65535), default=8000, help="port to listen on (default %(default)s)")
    parser.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the id clients send as `model` (default: MODEL as given)")
    parser.add_argument("--max-batch", type=count(), default=None, metavar="N",
                        help="completions decoding at once (default: the plan's batch size, cut to free memory)")
    parser.add_argument("--context-length", type=count(), default=None, metavar="N",
                        help="prompt + max_tokens per request (default: min(4096, max_position_embeddings))")
    parser.add_argument("--max-queue", type=count(0), default=None, metavar="N",
                        help="completions waiting for a row before requests get 429 (default: 4 per row)")
    parser.add_argument("--drain-timeout", type=positive_number(), default=DRAIN_TIMEOUT_S, metavar="SECONDS",
                        help=f"after SIGTERM, seconds in-flight requests get to finish (default {DRAIN_TIMEOUT_S:g})")
    parser.add_argument("--gpu-memory-utilization", type=positive_number(), default=None, metavar="FRACTION",
                        help="share of the device memory free after loading (less the profiled activations) the KV "
                             "cache takes, in (0, 1] (default 0.9, as vLLM's)")
    parser.add_argument("--max-batch-tokens", type=count(), default=None, metavar="N",
                        help="tokens one engine step computes at most; longer prompts are prefilled in chunks "
                             "(default 2048)")
    parser.add_argument("--no-prefix-caching", action="store_true",
                        help="do not reuse the KV blocks of identical prompt prefixes across requests")


def run_serve(args: argparse.Namespace, plan_kwargs: dict[str, Any]) -> int:
    """Serve until SIGTERM/SIGINT (exit 0 after draining); with ``--simulate``, show what would be
    served and exit."""
    model = args.model or default_model()
    limits = {"max_batch": args.max_batch, "context_length": args.context_length, "max_queue": args.max_queue}
    if args.simulate:
        return _dry_run(args, model, plan_kwargs, limits)
    from ..runtime.loading import plan_for_load
    from ..serving import require_serve_extra

    require_serve_extra()
    announce_download(model)
    planned = plan_for_load(model, **plan_kwargs)
    require_generation(planned, "serve")
    loaded = load_planned(planned)
    loaded.decode_tuning = engine_tuning(args, loaded.decode_tuning)
    from ..serving.server import serve

    print(loaded.plan, flush=True)
    serve(loaded, args.host, args.port, model_name=args.served_model_name or args.model or "tiny", **limits,
          drain_timeout=args.drain_timeout, log_level="info" if args.verbose else "warning",
          announce=lambda line: print(line, flush=True))
    return 0


def engine_tuning(args: argparse.Namespace, tuning: Any) -> Any:
    """``tuning`` (a ``DecodeTuning``) with the engine options given on the command line."""
    from dataclasses import replace

    from ..errors import ConfigurationError

    changes: dict[str, Any] = {}
    if args.gpu_memory_utilization is not None:
        if not 0 < args.gpu_memory_utilization <= 1:
            raise ConfigurationError(f"--gpu-memory-utilization {args.gpu_memory_utilization:g} must be in (0, 1] "
                                     "(e.g. 0.9: 90 % of the free device memory)")
        changes["memory_utilization"] = args.gpu_memory_utilization
    if args.max_batch_tokens is not None:
        changes["max_batch_tokens"] = args.max_batch_tokens
    if args.no_prefix_caching:
        changes["prefix_caching"] = False
    try:
        return replace(tuning, **changes) if changes else tuning
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _dry_run(args: argparse.Namespace, model: str, plan_kwargs: dict[str, Any], limits: dict[str, Any]) -> int:
    """The plan and the limits it gives a server (free memory unknown: nothing is loaded)."""
    from transformers import PretrainedConfig

    from ..backends.sizing import BYTES_PER_PARAM
    from ..decoding.tuning import DecodeTuning
    from ..planning.planner import plan
    from ..serving.limits import serving_limits

    with simulated(args.simulate):
        result = plan(model, **plan_kwargs)
    decode = result.decode_choice
    engine = ("in-flight batching on the fast decode loop (checked again when the model loads)"
              if decode is not None and decode.fast else
              "one completion at a time: the plan decodes with transformers' generate")
    size = int(BYTES_PER_PARAM.get(str(result.value("dtype")), 2))
    config = PretrainedConfig.from_dict(dict(result.model.config)) if result.model is not None else None
    if config is None:
        emit(args, {"plan": result.to_dict(), "engine": engine}, f"{result}\n\nengine: {engine}")
        return 0
    shape = serving_limits(result, config, size, None, engine_tuning(args, DecodeTuning()), **limits)
    emit(args, {"plan": result.to_dict(), "engine": engine, "rows": shape.rows, "context": shape.context,
                "max_queue": shape.max_queue, "kv_bytes": shape.kv_bytes, "reasons": list(shape.reasons)},
         "\n".join([str(result), "", f"engine: {engine}", *shape.lines()]))
    return 0
