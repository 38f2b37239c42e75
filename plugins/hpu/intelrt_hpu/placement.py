"""H6: where the weights go on Gaudi — ``device_map="hpu"`` (never ``hpu:N``), one Gaudi per process."""

from __future__ import annotations

from intelrt.plugin import (
    FIT_HEADROOM,
    Backend,
    Decision,
    ModelInfo,
    Placement,
    PlanError,
    Situation,
    bytes_per_parameter,
    fits_one_device,
    format_bytes,
    rank_placement,
)

from .facts import BACKEND, FIRST_GENERATION, OPTIMUM_HABANA, generation


def _too_big(backend: Backend, model: ModelInfo, per_param: float | None) -> str:
    need = model.parameter_count * per_param if per_param else model.weight_bytes
    memory = min(d.total_memory for d in backend.devices if d.total_memory)
    return f"{format_bytes(need)} of weights (x{FIT_HEADROOM} headroom) do not fit one Gaudi ({format_bytes(memory)})"


def select_placement(backend: Backend, s: Situation) -> Decision:
    """H6: ``device_map="hpu"``. A process drives one Gaudi, so a model too big for one is refused
    with the ways out, never split with ``device_map="auto"`` across Gaudis; weights sharded across
    launched ranks as they load (tensor parallel) have no ``device_map``."""
    ranked = rank_placement(backend, s.decided, s.env)
    if ranked is not None and isinstance(ranked.value, Placement) and ranked.value.device_map is None:
        return Decision(ranked.value, ranked.reason, claim="H6")
    per_param = bytes_per_parameter(s.decided)
    if fits_one_device(backend, s.model, per_param) is False:
        quantized = s.decided.quantization is not None
        raise PlanError(
            f"{_too_big(backend, s.model, per_param)}, and a Gaudi process drives one Gaudi: the stack acquires one "
            "device per process and device_map='auto' across Gaudis is not supported (SPEC H6). Ways out: "
            + ("" if quantized or generation(backend) == FIRST_GENERATION else
               "quantization='4bit' or '8bit' (bitsandbytes on Gaudi 2 and 3) to shrink the weights; ")
            + "one process per Gaudi with the weights split across them — intelrt launch --nproc N your_script.py "
              "with parallel='tensor' (transformers' tensor parallel over hccl); Optimum for Intel Gaudi has "
              f"Gaudi-tuned DeepSpeed inference ({OPTIMUM_HABANA})")
    return Decision(Placement(BACKEND), "device_map='hpu' loads onto the Gaudi this process drives (the device is "
                                        "'hpu'; an index 'hpu:N' is not supported)", claim="H6")
