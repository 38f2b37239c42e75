"""X6, X7: where the weights go (``device_map``) and how a list of prompts is generated."""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import (
    FIT_HEADROOM,
    BackendStatus,
    BatchingChoice,
    Decision,
    DecisionValue,
    ModelInfo,
    Request,
    bytes_per_parameter,
    fast_decode_planned,
    fits_one_device,
    hookimpl,
    padded_generate_instead,
)

from .facts import mine, size

_PIPELINE = "pipeline() without device= also picks the Intel GPU (transformers' default device order)"


@hookimpl
def intelrt_select_placement(backend: BackendStatus, request: Request, model: ModelInfo,
                             decisions: Mapping[str, DecisionValue]) -> Decision | None:
    """X6: ``device_map="xpu"`` when the weights fit one Intel GPU, ``"auto"`` (accelerate splits
    them) when they do not and the run has several."""
    if not mine(backend):
        return None
    per_param = bytes_per_parameter(decisions)
    need = model.parameter_count * per_param if per_param else model.weight_bytes
    memories = [d.total_memory for d in backend.devices if d.total_memory]
    room = (f"{size(need)} of weights, x{FIT_HEADROOM} headroom, vs {size(min(memories))} per device"
            if memories else "")
    count = len(request.devices) if request.devices else backend.device_count
    fits = fits_one_device(backend, model, per_param)
    if fits is False and count > 1:
        return Decision("auto", f"the weights do not fit one Intel GPU ({room}); accelerate splits them across the "
                                f"{count} devices of the run", claim="X6", notes=(_PIPELINE,))
    if fits is False:
        return Decision("xpu", f"the run has one Intel GPU and the weights may not fit it ({room})", claim="X6",
                        notes=("quantization='4bit' (bitsandbytes) shrinks them about 4x (SPEC X9)", _PIPELINE))
    why = f"the weights fit one Intel GPU ({room})" if fits else "device memory is unknown; one Intel GPU"
    return Decision("xpu", why, claim="X6", notes=(_PIPELINE,))


@hookimpl
def intelrt_select_batching(backend: BackendStatus, request: Request, model: ModelInfo,
                            decisions: Mapping[str, DecisionValue]) -> Decision | None:
    """X7: a list of prompts goes through transformers' continuous batching, which supports XPU
    graphs and async batching and decides itself whether to use them (``None``) unless forced."""
    if not mine(backend) or request.batching == "padded":
        return None  # padded batches are not XPU-specific: the generic decision applies
    fallback = padded_generate_instead(request, model, decisions)
    if fallback is not None:
        return fallback
    graphs = {"on": True, "off": False}.get(request.graphs)
    attention = str(decisions.get("attention") or "sdpa")
    flash = "flash" in attention
    if graphs is None:
        auto = ("on: flash attention needs no attention mask" if flash else
                f"off: attention={attention} needs an attention mask, which graphs would pad")
        notes: tuple[str, ...] = (f"XPU graphs and async batching left to transformers' auto, which turns them {auto}",)
    else:
        notes = (f"XPU graphs forced {request.graphs} (ContinuousBatchingConfig.use_cuda_graph={graphs}); async "
                 "batching left to transformers' auto",)
    if fast_decode_planned(decisions) and request.batching == "auto":
        notes += ("batching='padded' sends a list through the fast decode loop instead",)
    reason = "requested by the user" if request.batching == "continuous" else (
        "transformers' continuous batching (generate_batch) runs on Intel GPUs, with XPUGraph and async batching")
    return Decision(BatchingChoice.continuous(use_graphs=graphs), reason, claim="X7", notes=notes)
