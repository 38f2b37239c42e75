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
    batching,
    collective,
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
from .facts import NAME, PRIORITY, product_line


class XpuBackend(Backend):
    """Intel GPUs (Arc, Data Center GPU Max / Flex) through stock PyTorch's XPU build."""

    name = NAME
    device_type = "xpu"
    priority = PRIORITY
    compiler = "inductor"
    tile_ids = True  # devices="0.1": tile 1 of card 0 in COMPOSITE mode (ZE_AFFINITY_MASK's card.tile)

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

    def graph_capturer(self, kind: str) -> Callable[..., Any] | None:
        return graphs.graph_capturer(kind)

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

    def select_decode(self, s: Situation) -> Decision | None:
        return graphs.select_decode(self, s)

    def select_batching(self, s: Situation) -> Decision | None:
        return batching.select_batching(self, s)

    def select_collective(self, s: Situation) -> Decision:
        return collective.select_collective(self, s)
