"""The ``xpu`` backend (SPEC X1–X11): everything Intel GPUs do differently, one method per concern.

Each method hands its concern to the module that holds its rules (``attention.py``,
``kernels.py`` …), so this class is the table of contents: what an Intel GPU decides for itself;
everything it leaves out, intelrt's generic rules decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from intelrt.plugin import (
    Backend,
    BackendStatus,
    CompileChoice,
    Decision,
    Endorsement,
    EnvVar,
    Finding,
    KernelChoice,
    Plan,
    Setting,
    ShardingSupport,
    Situation,
)

from . import (
    attention,
    compiler,
    detection,
    devices,
    diagnosis,
    graphs,
    kernels,
    parallelism,
    placement,
    training,
)
from .facts import NAME, PRIORITY, XPU_GRAPHS_DEFAULT_TORCH, product_line
from .quantization import XPU_QUANTIZATION


class XpuBackend(Backend):
    """Intel GPUs (Arc, Data Center GPU Max / Flex) through stock PyTorch's XPU build."""

    name = NAME
    device_type = "xpu"
    priority = PRIORITY
    compiler = "inductor"
    # Decoding: intelrt's fast loop, the step (the model's own forward: the compact step and intelrt's Triton
    # kernels are unmeasured on Intel GPUs) compiled with inductor — for work of unknown length by a compile worker
    # while the uncompiled step decodes (decoding/compile_worker.py); XPU graphs by default only
    # from torch 2.14, as upstream (graphs.py); a list through transformers' continuous batching, which decides
    # XPU graphs and async batching itself unless forced (SPEC X7).
    fast_decode = True
    decode_compiler = "inductor"
    compiles_quantized = True  # torchao's and AutoRound's XPU layers inside the compiled forward, as before 0.2
    graph_kind = "xpu"  # torch.xpu.XPUGraph (graphs.py)
    graphs_default_from = XPU_GRAPHS_DEFAULT_TORCH
    decode_source = graphs.UPSTREAM_GRAPHS
    tile_ids = True  # devices="0.1": tile 1 of card 0 in COMPOSITE mode (ZE_AFFINITY_MASK's card.tile)
    # Ray's IntelGPUAcceleratorManager (ray/_private/accelerators/intel_gpu.py) names them GPU and sets
    # ZE_AFFINITY_MASK to the ids it assigns
    ray_resource = "GPU"
    quantization_columns = XPU_QUANTIZATION  # X9: the Intel Arc and Max columns (quantization.py)

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        return detection.detect(env)

    @property
    def sharding_support(self) -> ShardingSupport:
        return parallelism.sharding_support(self)

    @property
    def variant(self) -> str | None:
        return product_line(self)

    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        return devices.run_environment(self, s.request, s.env)

    def launch_environment(self, plan: Plan, nproc: int, env: Mapping[str, str]) -> Sequence[EnvVar | Finding]:
        return devices.launch_environment(self, plan, nproc, env)

    def training_arguments(self, plan: Plan, overrides: Mapping[str, Any]) -> Sequence[Setting]:
        return training.training_arguments(self, plan, overrides)

    def diagnose(self, env: Mapping[str, str], probe: bool) -> Sequence[Finding]:
        return diagnosis.diagnose(self.status, env)

    def graph_capturer(self) -> Callable[..., Any]:
        return graphs.graph_capturer()

    def select_placement(self, s: Situation) -> Decision:
        return placement.select_placement(self, s)

    def select_attention(self, s: Situation) -> Decision:
        return attention.select_attention(self, s)

    def check_attention(self, value: str, s: Situation) -> Endorsement | None:
        return attention.check_attention(self, value, s)

    def select_kernels(self, s: Situation) -> Decision:
        return kernels.select_kernels(self, s)

    def check_kernels(self, value: KernelChoice, s: Situation) -> Endorsement:
        return kernels.check_kernels(self, value, s)

    def select_compile(self, s: Situation) -> Decision:
        return compiler.select_compile(self, s)

    def check_compile(self, value: CompileChoice, s: Situation) -> Endorsement | None:
        return compiler.check_compile(self, value, s)

    def graphs_missing(self, s: Situation) -> str | None:
        return graphs.graphs_missing(self)
