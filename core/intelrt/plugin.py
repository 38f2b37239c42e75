"""The plugin API: everything a plugin may import from intelrt, in one module.

A plugin imports from ``intelrt`` (the public API), ``intelrt.plugin`` (this module) and
``intelrt.testing`` (simulated hardware and the conformance suite) only; the rest of intelrt is
internal and may change in any release. Every name here keeps its meaning and signature across
minor releases; docs/plugin-api.md lists each with its contract.

The names fall into four groups:

* **the hook contract**: ``hookimpl``, :class:`Backend` (a plugin's backend subclasses it) with
  :class:`Situation` and :class:`Endorsement`, the argument and result types of every hook
  (``BackendStatus``, ``DeviceInfo``, ``Decision``, ``EnvVar``, ``Finding``, ``Setting``,
  ``Request``, ``ModelInfo``, ``Decided``, ``Plan``) and the typed decision values (``DecodeChoice`` …);
* **errors** a hook raises to refuse a request (``PlanError``, ``ConfigurationError``) or a device
  it cannot have (``BackendUnavailableError``);
* **facts about the machine**: installed versions, visibility-variable parsing, the hub cache,
  the launch environment;
* **shared decisions** a backend may answer with or delegate to: the generic defaults' sizing
  rules and the device-graph capturers (the decode and batching rules read a backend's facts
  instead: their 0.1 helpers are deprecated, see ``DEPRECATED``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from .backends import decode_rules
from .backends.capture import begin_end, stream_capturer
from .backends.decode_rules import plain_generate
from .backends.generic import attention_fallback, check_training_overrides
from .backends.parallelism import decide_parallelism, rank_placement
from .backends.sizing import (
    BYTES_PER_PARAM,
    DEFAULT_CONTEXT,
    FIT_HEADROOM,
    bytes_per_parameter,
    context_limit,
    fits_one_device,
)
from .errors import BackendUnavailableError, ConfigurationError, IntelrtError, PlanError
from .hooks.backend import Backend, Endorsement, ShardingSupport, Situation
from .hooks.concerns import Decided
from .hooks.markers import PROJECT, hookimpl
from .hooks.model import Architecture, ModelInfo
from .hooks.options import DeviceId
from .hooks.payloads import (
    BatchingChoice,
    Buckets,
    CompileChoice,
    DecisionValue,
    DecodeChoice,
    JSONValue,
    KernelChoice,
    ParallelismChoice,
    Payload,
    Placement,
    QuantizationChoice,
)
from .hooks.plan import Plan, PlannedDecision
from .hooks.quantization import Cell, Column, QuantizationColumns
from .hooks.request import Request
from .hooks.types import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, Setting
from .quantization.methods import core_cell
from .support.distributed import is_distributed_launch, world_size
from .support.hubcache import hub_cache_dir, hub_offline, is_repo_cached
from .support.startup import environment_at_import
from .support.units import format_bytes
from .support.versions import (
    KernelsProblem,
    at_least,
    hub_kernels_problem,
    kernels_problem,
    package_version,
    parse,
    torch_version,
)
from .support.visibility import DeviceList, parse_device_list

__all__ = [
    # the hook contract
    "PROJECT", "hookimpl",
    "Backend", "Situation", "Endorsement", "ShardingSupport", "Decided",
    "BackendStatus", "Decision", "DeviceInfo", "EnvVar", "Finding", "Setting",
    "Request", "DeviceId", "ModelInfo", "Architecture", "Plan", "PlannedDecision",
    "Payload", "DecisionValue", "JSONValue",
    "BatchingChoice", "CompileChoice", "DecodeChoice", "KernelChoice", "QuantizationChoice", "ParallelismChoice",
    "Placement", "Buckets", "QuantizationColumns", "Column", "Cell",
    # errors
    "IntelrtError", "ConfigurationError", "PlanError", "BackendUnavailableError",
    # facts about the machine
    "package_version", "at_least", "parse", "torch_version", "format_bytes", "kernels_problem",
    "hub_kernels_problem", "KernelsProblem",
    "DeviceList", "parse_device_list",
    "hub_cache_dir", "hub_offline", "is_repo_cached",
    "world_size", "is_distributed_launch", "environment_at_import",
    # shared decisions
    "BYTES_PER_PARAM", "FIT_HEADROOM", "DEFAULT_CONTEXT",
    "bytes_per_parameter", "fits_one_device", "context_limit", "check_training_overrides",
    "decide_parallelism", "rank_placement",
    "attention_fallback", "plain_generate", "core_cell",
    "stream_capturer", "begin_end",
]


# -- deprecated names (docs/plugin-api.md, "Deprecated"): importable with a DeprecationWarning for one minor
# release, then removed; none is in __all__.
DECODE_FACTS = ("the decode and batching rules are intelrt's, over the facts a Backend declares (fast_decode, "
                "compact_decode, graph_kind, graphs_default_from, decode_compiler, compiles_quantized, "
                "compile_worker_missing, engine_batching, continuous_graphs, async_batching, kv_sizing …; "
                "graphs_missing, compile_missing, decode_problem, runs_triton for one run): declare them instead of "
                "select_decode / select_batching")
DEPRECATED: dict[str, tuple[Callable[[], object], str]] = {
    "DEVICE_COLLECTIVES": (lambda: {"nccl": "cuda", "xccl": "xpu", "hccl": "hpu"},
                           "Backend.sharding_support: a backend's ShardingSupport(collective=...) declares its "
                           "library, and the collective decision and the ddp_backend check follow it"),
    **{name: ((lambda name=name: getattr(decode_rules, name)), DECODE_FACTS)  # type: ignore[misc]
       for name in ("compact_step", "continuous_batching_blocker", "continuous_blocker", "decode_attention_kernel",
                    "decode_blockers", "decode_compile", "decode_graphs", "decode_warmup", "fast_decode",
                    "fast_decode_planned", "kernel_blocker", "padded_generate_instead", "quantized",
                    "quantized_compact_step", "quantized_step", "triton_installed")},
}
"""Name → (its value, what replaces it): deprecated in intelrt 0.2, gone in 0.3."""


def __getattr__(name: str) -> object:
    if name in DEPRECATED:
        value, instead = DEPRECATED[name]
        warnings.warn(f"intelrt.plugin.{name} is deprecated (intelrt 0.2) and goes in 0.3; instead: {instead}",
                      DeprecationWarning, stacklevel=2)
        return value()
    raise AttributeError(f"module 'intelrt.plugin' has no attribute {name!r}")
