"""The ``hpu`` backend (SPEC H1–H11): everything Intel Gaudi does differently, one method per concern.

Each method hands its concern to the module that holds its rules; everything the class leaves out,
intelrt's generic rules decide. Never ``hpu:N``: the device is ``hpu`` (H5), one per process (H6).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from intelrt.plugin import (
    Backend,
    BackendStatus,
    CompileChoice,
    Decision,
    DecodeChoice,
    DeviceId,
    Endorsement,
    EnvVar,
    Finding,
    Plan,
    Setting,
    ShardingSupport,
    Situation,
)

from . import (
    acquisition,
    attention,
    buckets,
    compile_wrap,
    compiler,
    detection,
    diagnosis,
    environment,
    graphs,
    kernels,
    parallelism,
    placement,
    precision,
    training,
)
from .facts import BACKEND, PRIORITY, generation
from .quantization import HPU_QUANTIZATION


class HpuBackend(Backend):
    """Intel Gaudi (Gaudi 1, 2, 3) through the Gaudi software stack (``habana_frameworks``)."""

    name = BACKEND
    device_type = BACKEND
    priority = PRIORITY
    compiler = "hpu_backend"
    indexed_devices = False
    # Decoding: intelrt's fast loop over the model's own forward (no Triton on Gaudi), captured in HPU graphs in
    # lazy mode; in eager mode compiled with hpu_backend — work of unknown length once that pays, in this process (no
    # compile worker beside the one process a Gaudi allows) — as vLLM's Gaudi plugin does (graphs.py).
    fast_decode = True
    decode_compiler = "hpu_backend"
    compiles_quantized = True  # INC FP8 and AutoRound layers under hpu_backend, as vLLM's Gaudi plugin runs them
    graph_kind = "hpu"  # HPUGraph, lazy mode only (graphs.py)
    decode_source = graphs.VLLM_GAUDI
    compile_worker_missing = graphs.ONE_PROCESS
    # Ray's HPUAcceleratorManager (ray/_private/accelerators/hpu.py) names them HPU and sets
    # HABANA_VISIBLE_MODULES to the ids it assigns
    ray_resource = "HPU"
    quantization_columns = HPU_QUANTIZATION  # H7: the Gaudi 1, 2, 3 columns (quantization.py)

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        return detection.detect(env)

    @property
    def sharding_support(self) -> ShardingSupport:
        return parallelism.sharding_support(self)

    @property
    def variant(self) -> str | None:
        return generation(self)

    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding]:
        return environment.run_environment(self, s.request, s.env)

    def launch_environment(self, plan: Plan, nproc: int, env: Mapping[str, str]) -> Sequence[EnvVar | Finding]:
        return environment.launch_environment(self, plan, nproc, env)

    def device_group_problem(self, devices: Sequence[DeviceId]) -> str | None:
        return environment.group_problem(devices)

    def written_by_stack(self, env: Mapping[str, str]) -> Collection[str]:
        return environment.written_by_stack(env)

    def training_arguments(self, plan: Plan, overrides: Mapping[str, Any]) -> Sequence[Setting]:
        return training.training_arguments(self, plan, overrides)

    def diagnose(self, env: Mapping[str, str], probe: bool) -> Sequence[Finding]:
        return diagnosis.diagnose(self.status, env, probe)

    def acquire_device(self, plan: Plan) -> None:
        acquisition.acquire_device(plan)

    def compile_wrapper(self, compile_fn: Callable[..., Any]) -> Callable[..., Any]:
        return compile_wrap.compile_wrapper(compile_fn)

    def attention_implementation(self, name: str) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        return attention.attention_implementation(name)

    def graph_capturer(self) -> Callable[..., Any]:
        return graphs.graph_capturer()

    def select_dtype(self, s: Situation) -> Decision:
        return precision.select_dtype(self, s)

    def check_dtype(self, value: str, s: Situation) -> Endorsement | None:
        return precision.check_dtype(self, value, s)

    def select_placement(self, s: Situation) -> Decision:
        return placement.select_placement(self, s)

    def select_attention(self, s: Situation) -> Decision:
        return attention.select_attention(self, s)

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        return attention.check_attention(self, value, s)

    def select_kernels(self, s: Situation) -> Decision:
        return kernels.select_kernels(self, s)

    def select_compile(self, s: Situation) -> Decision:
        return compiler.select_compile(self, s)

    def check_compile(self, value: CompileChoice, s: Situation) -> Endorsement | None:
        return compiler.check_compile(self, value, s)

    def graphs_missing(self, s: Situation) -> str | None:
        return graphs.graphs_missing(self, s)

    def compile_missing(self, s: Situation) -> str | None:
        return graphs.compile_missing(self, s)

    def decode_claim(self, choice: DecodeChoice) -> str | None:
        return graphs.decode_claim(choice)

    def select_buckets(self, s: Situation) -> Decision | None:
        return buckets.select_buckets(self, s)
