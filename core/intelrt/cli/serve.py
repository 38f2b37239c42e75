"""``intelrt serve``: load a model as planned and serve it with the OpenAI API (``intelrt.serving``)."""

from __future__ import annotations

import argparse
from typing import Any

from .arguments import count, positive_number
from .models import (
    announce_download,
    default_model,
    load_planned,
    planned,
    require_generation,
    simulated,
)
from .output import emit, step

TINY_MODEL_ID = "tiny"
"""The id clients send for the embedded tiny model (``intelrt serve`` without MODEL)."""

SERVE_DESCRIPTION = f"""\
Load MODEL as planned (the plan is printed first) and serve it with the OpenAI API on HOST:PORT:
/v1/completions, /v1/chat/completions (streamed with SSE when asked; structured output and tool
calls by grammar), /v1/embeddings (a feature-extraction model), /v1/models, /tokenize,
/detokenize, /version, /health (liveness), /ready (200 once loaded and warmed up, 503 before and
while draining) and /metrics (Prometheus). When it is ready it prints one line, "ready:
http://HOST:PORT/v1 — model 'NAME'" (NAME: --served-model-name; default MODEL as given,
"{TINY_MODEL_ID}" for the embedded tiny model), then an access line per request. Completions join and leave
one running batch between decode steps (in-flight batching) when the plan decodes on the fast
loop; otherwise they run one at a time. SIGTERM or Ctrl-C drains the requests in flight, then
exits with status 0. With --simulate, only the plan and the limits it would serve with are shown
(see docs/serving.md)."""

SERVE_EXAMPLES = """\
examples:
  intelrt serve                                  # the embedded tiny model on 127.0.0.1:8000
  intelrt serve Qwen/Qwen3-0.6B --port 8080 --max-batch 32
  intelrt serve ./my-model --simulate xpu:1      # the limits it would get on an Intel GPU
  INTELRT_API_KEY=secret intelrt serve ./my-model --allowed-origins http://localhost:3000"""

API_KEY_VARIABLE = "INTELRT_API_KEY"
"""The environment variable ``--api-key`` falls back to (a key on the command line is visible to
every user of the machine through ``ps``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..serving.limits import CLIENT_TIMEOUT_S, DRAIN_TIMEOUT_S

    parser.add_argument("model", nargs="?", default=None,
                        help="a directory saved with save_pretrained(), or a hub id (org/name); default: the "
                             "embedded tiny model")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=count(0, 65535), default=8000, help="port to listen on (default %(default)s)")
    parser.add_argument("--served-model-name", default=None, metavar="NAME",
                        help=f"the id clients send as `model` (default: MODEL as given; {TINY_MODEL_ID} for the "
                             "embedded tiny model)")
    parser.add_argument("--max-batch", type=count(), default=None, metavar="N",
                        help="completions decoding at once (default: the plan's batch size, cut to free memory)")
    parser.add_argument("--context-length", type=count(), default=None, metavar="N",
                        help="prompt + max_tokens per request (default: min(4096, max_position_embeddings))")
    parser.add_argument("--max-queue", type=count(0), default=None, metavar="N",
                        help="completions waiting for a row before requests get 429 (default: 4 per row)")
    parser.add_argument("--drain-timeout", type=positive_number(), default=DRAIN_TIMEOUT_S, metavar="SECONDS",
                        help=f"after SIGTERM, seconds in-flight requests get to finish (default {DRAIN_TIMEOUT_S:g})")
    parser.add_argument("--client-timeout", type=positive_number(), default=CLIENT_TIMEOUT_S, metavar="SECONDS",
                        help="seconds a streaming client may take no bytes before its completions are cancelled "
                             f"and its connection closed (default {CLIENT_TIMEOUT_S:g}, nginx's send_timeout)")
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help=f"every /v1 route answers 401 without 'Authorization: Bearer KEY' (default: "
                             f"${API_KEY_VARIABLE}, else none); never logged")
    parser.add_argument("--allowed-origins", nargs="+", default=None, metavar="ORIGIN",
                        help="origins allowed to call the server from a browser (CORS), e.g. http://localhost:3000 "
                             "or '*' (default: none)")
    parser.add_argument("--allowed-methods", nargs="+", default=["*"], metavar="METHOD",
                        help="HTTP methods allowed cross-origin (default: all)")
    parser.add_argument("--allowed-headers", nargs="+", default=["*"], metavar="HEADER",
                        help="request headers allowed cross-origin (default: all)")
    parser.add_argument("--allow-credentials", action="store_true",
                        help="cross-origin requests may carry cookies and Authorization")
    parser.add_argument("--chat-template", default=None, metavar="FILE",
                        help="a Jinja chat template file to render chat requests with, instead of the tokenizer's")
    parser.add_argument("--no-access-log", dest="access_log", action="store_false",
                        help="no line per request")
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=DIR",
                        help="serve the LoRA adapter in DIR as model NAME beside the base model (repeat for more)")
    parser.add_argument("--gpu-memory-utilization", type=positive_number(), default=None, metavar="FRACTION",
                        help="share of the device memory free after loading (less the profiled activations) the KV "
                             "cache takes, in (0, 1] (default 0.9, as vLLM's)")
    parser.add_argument("--max-batch-tokens", type=count(), default=None, metavar="N",
                        help="tokens one engine step computes at most; longer prompts are prefilled in chunks "
                             "(default 2048)")
    parser.add_argument("--no-prefix-caching", action="store_true",
                        help="do not reuse the KV blocks of identical prompt prefixes across requests")
    add_replica_arguments(parser)
    parser.add_argument("--min-replicas", type=count(0), default=None, metavar="N",
                        help="with --max-replicas: Ray Serve adds and removes replicas between the two with the load "
                             "(--replicas to start with)")
    parser.add_argument("--max-replicas", type=count(), default=None, metavar="N", help="see --min-replicas")
    parser.add_argument("--target-ongoing-requests", type=count(), default=None, metavar="N",
                        help="autoscaling: requests per replica Ray Serve aims at (default 32)")
    parser.add_argument("--address", default=None, metavar="RAY_ADDRESS",
                        help="join this Ray cluster (e.g. auto, or HEAD_IP:6379) instead of starting Ray here; run "
                             "it on a node of the cluster")
    parser.add_argument("--proxy-location", choices=("EveryNode", "HeadOnly"), default="EveryNode",
                        help="where Ray Serve's HTTP proxy listens on --host:--port: every node that runs a replica "
                             "(default), or the head node only")


def add_replica_arguments(parser: argparse.ArgumentParser) -> None:
    """``--replicas`` and ``--devices-per-replica`` (``intelrt serve`` and ``intelrt plan``)."""
    parser.add_argument("--replicas", type=count(), default=None, metavar="N",
                        help="serve N replicas on Ray Serve (pip install 'intelrt[ray]'), one per device or device "
                             "group; plan: show each replica's devices, variables and plan")
    parser.add_argument("--devices-per-replica", type=count(), default=None, metavar="K",
                        help="devices each replica takes (default 1: a replica per device); on Gaudi 2 or 4 of a "
                             "supported module set")


def run_serve(args: argparse.Namespace, plan_kwargs: dict[str, Any]) -> int:
    """Serve until SIGTERM/SIGINT (exit 0 after draining); with ``--simulate``, show what would be
    served and exit."""
    model = args.model or default_model()
    limits = {"max_batch": args.max_batch, "context_length": args.context_length, "max_queue": args.max_queue}
    if args.replicas is not None and not args.simulate:
        from ..serving.ray import require_ray_extra

        require_ray_extra()  # before the model is planned: the install line in a second
    replicated = _replication(args)
    if args.simulate:
        if replicated is not None:
            return run_replica_plan(args, model, plan_kwargs)
        return _dry_run(args, model, plan_kwargs, limits)
    from ..serving import require_serve_extra
    from ..serving.adapters import read_adapter

    require_serve_extra()
    served = _served_options(args)
    for name, path in served["lora"]:
        read_adapter(name, path)  # before the model loads: a wrong directory fails in a second
    from ..decoding.tuning import DecodeTuning

    tuning = engine_tuning(args, DecodeTuning())  # checked before the model loads, too
    announce_download(model)
    if replicated is not None:
        return _serve_replicas(args, model, plan_kwargs, replicated, limits, served)
    the_plan = planned(model, **plan_kwargs)
    if the_plan.task != "feature-extraction":
        require_generation(the_plan, "serve")
        _planned_limits(args, the_plan, limits)  # what the plan alone refuses, before loading
    loaded = load_planned(the_plan)
    loaded.decode_tuning = tuning
    from ..serving.server import serve

    print(loaded.plan, flush=True)
    serve(loaded, args.host, args.port, model_name=args.served_model_name or args.model or TINY_MODEL_ID, **limits,
          drain_timeout=args.drain_timeout, client_timeout=args.client_timeout, log_level="info" if args.verbose else "warning", **served)
    return 0


def _replication(args: argparse.Namespace) -> Any:
    """The ``Replication`` the replica options ask for (``None``: one process, no Ray)."""
    replica_only = {"--min-replicas": args.min_replicas, "--max-replicas": args.max_replicas,
                    "--target-ongoing-requests": args.target_ongoing_requests, "--address": args.address,
                    "--devices-per-replica": args.devices_per_replica}
    if args.replicas is None:
        given = [flag for flag, value in replica_only.items() if value is not None]
        if given or args.proxy_location != "EveryNode":
            from ..errors import ConfigurationError

            raise ConfigurationError(f"{', '.join(given) or '--proxy-location'} configures Ray Serve replicas: add "
                                     "--replicas N")
        return None
    from ..serving.ray.layout import TARGET_ONGOING, Replication

    replication = Replication(args.replicas, args.min_replicas, args.max_replicas,
                              args.target_ongoing_requests or TARGET_ONGOING, args.drain_timeout)
    replication.check()
    return replication


def _serve_replicas(args: argparse.Namespace, model: str, plan_kwargs: dict[str, Any], replication: Any,
                    limits: dict[str, Any], served: dict[str, Any]) -> int:
    from ..serving.ray import serve_replicas

    app_options = {"model_name": args.served_model_name or args.model or TINY_MODEL_ID, **limits,
                   "client_timeout": args.client_timeout, **served, **engine_options(args)}
    import sys

    return serve_replicas(model, replication, host=args.host, port=args.port, address=args.address,
                          proxy_location=args.proxy_location, devices_per_replica=args.devices_per_replica,
                          plan_options=plan_kwargs, app_options=app_options,
                          announce=lambda line: print(line, file=sys.stderr, flush=True))


def run_replica_plan(args: argparse.Namespace, model: str, plan_kwargs: dict[str, Any]) -> int:
    """``intelrt plan/serve MODEL --replicas N [--simulate ...]``: each replica's devices, the Ray
    resources it asks for, its variables, and its plan (replica 0's whole; the others' where they differ)."""
    from ..serving.ray import plan_replicas

    machine = f" as on a simulated {args.simulate}" if args.simulate else ""
    with step(f"planning {args.replicas} replica(s) of {model}{machine}"), simulated(args.simulate):
        layout = plan_replicas(model, args.replicas, args.devices_per_replica, **plan_kwargs)
    emit(args, {"layout": layout.to_dict()}, "\n".join([str(layout.replicas[0].plan), "", *layout.lines()]))
    return 0


def _served_options(args: argparse.Namespace) -> dict[str, Any]:
    """The serving options of ``args``, checked (a missing template file, a malformed ``--lora``)."""
    import os
    from pathlib import Path

    from ..errors import ConfigurationError
    from ..serving.adapters import parse_lora_option
    from ..serving.app import CorsOptions

    template = None
    if args.chat_template is not None:
        path = Path(args.chat_template).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"--chat-template {args.chat_template}: no such file (a Jinja template, e.g. "
                                     "the chat_template of a tokenizer_config.json saved as a .jinja file)")
        template = path.read_text(encoding="utf-8")
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_VARIABLE) or None
    if key is not None and not key.strip():
        raise ConfigurationError(f"--api-key is empty (or ${API_KEY_VARIABLE}): give a key, or leave both out")
    cors = CorsOptions(tuple(args.allowed_origins), tuple(args.allowed_methods), tuple(args.allowed_headers),
                       args.allow_credentials) if args.allowed_origins else None
    if cors is None and args.allow_credentials:
        raise ConfigurationError("--allow-credentials needs --allowed-origins (the origins that may send them)")
    return {"api_key": key, "cors": cors, "chat_template": template, "access_log": args.access_log,
            "lora": [parse_lora_option(value) for value in args.lora]}


def engine_tuning(args: argparse.Namespace, tuning: Any) -> Any:
    """``tuning`` (a ``DecodeTuning``) with the engine options given on the command line."""
    from ..decoding.tuning import with_engine_options

    return with_engine_options(tuning, lambda name: f"--{name.replace('_', '-')} ", **engine_options(args))


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine keywords of ``intelrt.load`` / ``engine_app`` the command line gives (``None``: not given)."""
    return {"gpu_memory_utilization": args.gpu_memory_utilization, "max_batch_tokens": args.max_batch_tokens,
            "prefix_caching": False if args.no_prefix_caching else None}


def _planned_limits(args: argparse.Namespace, result: Any, limits: dict[str, Any]) -> Any:
    """The limits the plan ``result`` gives a server before anything is loaded (a ``ServingLimits``;
    ``None`` without the model's config): a context past the model's positions is refused here,
    and so is a ``--max-batch-tokens`` above what the rows could ever hold at once (rows x
    context), which the server would profile a prefill of on the device."""
    from transformers import PretrainedConfig

    from ..backends.sizing import BYTES_PER_PARAM
    from ..decoding.tuning import DecodeTuning
    from ..errors import ConfigurationError
    from ..serving.limits import serving_limits

    config = PretrainedConfig.from_dict(dict(result.model.config)) if result.model is not None else None
    if config is None:
        return None
    size = int(BYTES_PER_PARAM.get(str(result.decided.dtype), 2))
    shape = serving_limits(result, config, size, None, engine_tuning(args, DecodeTuning()), **limits)
    most = shape.rows * shape.context
    if args.max_batch_tokens is not None and args.max_batch_tokens > most:
        raise ConfigurationError(f"--max-batch-tokens {args.max_batch_tokens} is more than {shape.rows} rows of "
                                 f"{shape.context} tokens ever hold at once: pass at most {most}")
    return shape


def _dry_run(args: argparse.Namespace, model: str, plan_kwargs: dict[str, Any], limits: dict[str, Any]) -> int:
    """The plan and the limits it gives a server (free memory unknown: nothing is loaded)."""
    from ..planning.planner import plan

    with step(f"planning {model} as on a simulated {args.simulate}"), simulated(args.simulate):
        result = plan(model, **plan_kwargs)
    decode = result.decided.decode
    engine = ("in-flight batching on the fast decode loop (checked again when the model loads)"
              if decode is not None and decode.fast else
              "one completion at a time: the plan decodes with transformers' generate")
    shape = _planned_limits(args, result, limits)
    if shape is None:
        emit(args, {"plan": result.to_dict(), "engine": engine}, f"{result}\n\nengine: {engine}")
        return 0
    emit(args, {"plan": result.to_dict(), "engine": engine, "rows": shape.rows, "context": shape.context,
                "max_queue": shape.max_queue, "kv_bytes": shape.kv_bytes, "reasons": list(shape.reasons)},
         "\n".join([str(result), "", f"engine: {engine}", *shape.lines()]))
    return 0
