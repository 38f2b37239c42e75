"""Hook implementations for ``hpu`` (SPEC H1–H11), one concern per module, registered together
through the ``intelrt`` entry point ``hpu = intelrt_hpu.plugin``."""

from __future__ import annotations

from .compile_wrap import intelrt_wrap_compile
from .decisions import (
    intelrt_select_attention,
    intelrt_select_collective,
    intelrt_select_compile,
    intelrt_select_dtype,
    intelrt_select_kernels,
    intelrt_select_placement,
    intelrt_select_quantization,
)
from .detection import intelrt_detect
from .diagnosis import intelrt_diagnose
from .environment import intelrt_launch_env, intelrt_setup_env
from .parallelism import intelrt_select_parallelism
from .training import intelrt_training_arguments

__all__ = [
    "intelrt_detect", "intelrt_diagnose", "intelrt_launch_env", "intelrt_select_attention",
    "intelrt_select_collective", "intelrt_select_compile", "intelrt_select_dtype", "intelrt_select_kernels",
    "intelrt_select_parallelism",
    "intelrt_select_placement", "intelrt_select_quantization", "intelrt_setup_env", "intelrt_training_arguments",
    "intelrt_wrap_compile",
]
from .graphs import intelrt_decode_graph, intelrt_select_decode  # noqa: F401
