"""``intelrt serve``: load a model as planned and serve it with the OpenAI API (``intelrt.serving``)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

SERVE_HELP = "serve MODEL (default: the embedded tiny model) with the OpenAI API: in-flight batching, SSE, /metrics"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..serving.server import DRAIN_TIMEOUT_S

    parser.add_argument("model", nargs="?", default=None, help="a hub id or a local directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the id clients send as `model` (default: MODEL as given)")
    parser.add_argument("--max-batch", type=int, default=None, metavar="N",
                        help="completions decoding at once (default: the plan's batch size, cut to free memory)")
    parser.add_argument("--context-length", type=int, default=None, metavar="N",
                        help="prompt + max_tokens per request (default: min(4096, max_position_embeddings))")
    parser.add_argument("--max-queue", type=int, default=None, metavar="N",
                        help="completions waiting for a row before requests get 429 (default: 4 per row)")
    parser.add_argument("--drain-timeout", type=float, default=DRAIN_TIMEOUT_S, metavar="SECONDS",
                        help=f"after SIGTERM, seconds in-flight requests get to finish (default {DRAIN_TIMEOUT_S:g})")
    parser.add_argument("--json", action="store_true", help="with --simulate: the dry plan as JSON")


def run_serve(args: argparse.Namespace, plan_kwargs: dict[str, Any],
              simulate: Callable[[str | None], contextlib.AbstractContextManager[None]],
              emit: Callable[[argparse.Namespace, Any, str], None]) -> int:
    """Serve until SIGTERM/SIGINT (exit 0 after draining); with ``--simulate``, show what would be
    served and exit."""
    from ..serving import require_serve_extra
    from ..tiny import default_model_path

    model = args.model or str(default_model_path())
    limits = {"max_batch": args.max_batch, "context_length": args.context_length, "max_queue": args.max_queue}
    if args.simulate:
        return _dry_run(args, model, plan_kwargs, limits, simulate, emit)
    require_serve_extra()
    from ..runtime.loading import load
    from ..serving.server import serve

    loaded = load(model, **plan_kwargs)
    print(loaded.plan, flush=True)
    serve(loaded, args.host, args.port, model_name=args.served_model_name or args.model or "tiny", **limits,
          drain_timeout=args.drain_timeout, log_level="info" if args.verbose else "warning",
          announce=lambda line: print(line, flush=True))
    return 0


def _dry_run(args: argparse.Namespace, model: str, plan_kwargs: dict[str, Any], limits: dict[str, Any],
             simulate: Callable[[str | None], contextlib.AbstractContextManager[None]],
             emit: Callable[[argparse.Namespace, Any, str], None]) -> int:
    """The plan and the limits it gives a server (free memory unknown: nothing is loaded)."""
    from transformers import PretrainedConfig

    from ..backends.defaults import BYTES_PER_PARAM
    from ..decoding.tuning import DecodeTuning
    from ..planning.planner import plan
    from ..serving.limits import serving_limits

    with simulate(args.simulate):
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
    shape = serving_limits(result, config, size, None, DecodeTuning(), **limits)
    emit(args, {"plan": result.to_dict(), "engine": engine, "rows": shape.rows, "context": shape.context,
                "max_queue": shape.max_queue, "kv_bytes": shape.kv_bytes, "reasons": list(shape.reasons)},
         "\n".join([str(result), "", f"engine: {engine}", *shape.lines()]))
    return 0
