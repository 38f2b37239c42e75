"""Hook implementations for ``xpu`` (SPEC X1–X11), one module per concern.

The ``intelrt`` entry point registers this module: pluggy picks up every hook implementation
imported here. Each hook answers ``None`` for backends other than ``xpu``.
"""

from __future__ import annotations

from .attention import intelrt_select_attention
from .compiler import intelrt_select_compile
from .detection import intelrt_detect
from .devices import intelrt_launch_env, intelrt_setup_env
from .diagnosis import intelrt_diagnose
from .facts import ACCELERATE_TORCH_FLOOR, PRIORITY, TRANSFORMERS_TORCH_FLOOR
from .kernels import intelrt_select_kernels
from .parallelism import intelrt_select_parallelism
from .placement import intelrt_select_batching, intelrt_select_placement
from .quantization import intelrt_select_quantization
from .training import intelrt_select_collective, intelrt_training_arguments

__all__ = [
    "ACCELERATE_TORCH_FLOOR", "PRIORITY", "TRANSFORMERS_TORCH_FLOOR",
    "intelrt_detect", "intelrt_setup_env", "intelrt_launch_env", "intelrt_select_attention",
    "intelrt_select_kernels", "intelrt_select_compile", "intelrt_select_quantization",
    "intelrt_select_parallelism", "intelrt_select_placement", "intelrt_select_batching", "intelrt_select_collective",
    "intelrt_training_arguments", "intelrt_diagnose",
]
from .graphs import intelrt_decode_graph, intelrt_select_decode  # noqa: F401
