"""Plan decisions for Gaudi: dtype, placement, attention, kernels, quantization, compile,
collective (SPEC H1, H6, H7, H8, H9, H10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from intelrt.plugin import (
    FIT_HEADROOM,
    BackendStatus,
    CompileChoice,
    Decision,
    DecisionValue,
    KernelChoice,
    PlanError,
    QuantizationChoice,
    attention_fallback,
    bitsandbytes_choice,
    bytes_per_parameter,
    fits_one_device,
    format_bytes,
    hookimpl,
    package_version,
    rank_placement,
)

from .facts import (
    BACKEND,
    COMPILE_BACKENDS,
    FIRST_GENERATION,
    GENERATION_NAMES,
    HCCL_REDUCE_OPS,
    KERNELS_DEVICE_TYPES,
    OPTIMUM_HABANA,
    generation,
    owns,
)

if TYPE_CHECKING:
    from intelrt.plugin import ModelInfo, Request

NF4_NOTE = ("bitsandbytes' HPU backend registers only the NF4 4-bit dequantize kernel (quant_type 'nf4', uint8 or "
            "bfloat16 storage; FP4 is refused there); the other bitsandbytes ops run on its generic torch kernels")


def _first_generation(backend: BackendStatus) -> bool:
    return generation(backend) == FIRST_GENERATION


@hookimpl
def intelrt_select_dtype(backend: BackendStatus, request: Request) -> Decision | None:
    """H8: bfloat16 on every Gaudi generation; first-generation Gaudi has no float16."""
    if not owns(backend):
        return None
    if request.is_forced("dtype"):
        if request.dtype == "float16" and _first_generation(backend):
            raise PlanError("dtype='float16': first-generation Gaudi has no float16 support; use dtype='bfloat16' "
                            "(every Gaudi generation supports it) or 'float32'")
        return Decision(request.dtype, "requested by the user")
    return Decision("bfloat16", "every Gaudi generation supports bfloat16", claim="H8")


def _too_big(backend: BackendStatus, model: ModelInfo, per_param: float | None) -> str:
    need = model.parameter_count * per_param if per_param else model.weight_bytes
    memory = min(d.total_memory for d in backend.devices if d.total_memory)
    return f"{format_bytes(need)} of weights (x{FIT_HEADROOM} headroom) do not fit one Gaudi ({format_bytes(memory)})"


@hookimpl
def intelrt_select_placement(backend: BackendStatus, model: ModelInfo, env: Mapping[str, str],
                             decisions: Mapping[str, DecisionValue]) -> Decision | None:
    """H6: ``device_map="hpu"`` (never ``hpu:N``). A process drives one Gaudi, so a model too big
    for one is refused with the ways out, never split with ``device_map="auto"`` across Gaudis;
    weights sharded across launched ranks as they load (tensor parallel) have no ``device_map``."""
    if not owns(backend):
        return None
    ranked = rank_placement(backend, decisions, env, indexed=False)
    if ranked is not None and ranked.value is None:
        return Decision(None, ranked.reason, claim="H6")
    per_param = bytes_per_parameter(decisions)
    if fits_one_device(backend, model, per_param) is False:
        quantized = isinstance(decisions.get("quantization"), QuantizationChoice)
        raise PlanError(
            f"{_too_big(backend, model, per_param)}, and a Gaudi process drives one Gaudi: the stack acquires one "
            "device per process and device_map='auto' across Gaudis is not supported (SPEC H6). Ways out: "
            + ("" if quantized else "quantization='4bit' or '8bit' (bitsandbytes on Gaudi 2 and 3) to shrink the "
                                    "weights; ")
            + "one process per Gaudi with the weights split across them — intelrt launch --nproc N your_script.py "
              "with parallel='tensor' (transformers' tensor parallel over hccl); Optimum for Intel Gaudi has "
              f"Gaudi-tuned DeepSpeed inference ({OPTIMUM_HABANA})")
    return Decision(BACKEND, "device_map='hpu' loads onto the Gaudi this process drives (the device is 'hpu'; an "
                             "index 'hpu:N' is not supported)", claim="H6")


@hookimpl
def intelrt_select_attention(backend: BackendStatus, request: Request, model: ModelInfo) -> Decision | None:
    """FlashAttention packages and hub kernels do not run on Gaudi; SDPA does."""
    if not owns(backend):
        return None
    if request.is_forced("attention"):
        wanted = request.attention
        if wanted.startswith(("flash_attention", "paged|flash_attention")) or "/" in wanted:
            raise PlanError(f"attention={wanted!r} does not run on Gaudi: the FlashAttention packages and hub "
                            f"kernels have no 'hpu' build. Use 'sdpa' (the default) or 'eager'; Optimum for Intel "
                            f"Gaudi ({OPTIMUM_HABANA}) has Gaudi's fused attention")
        return None  # the generic rules check the name
    return attention_fallback(model) or Decision(
        "sdpa", "torch's scaled_dot_product_attention runs on Gaudi with no extra package")


@hookimpl
def intelrt_select_kernels(backend: BackendStatus, request: Request) -> Decision | None:
    """The ``kernels`` package does not accept device type ``hpu``: say so rather than pretend."""
    if not owns(backend):
        return None
    why = (f"the kernels package does not accept device type 'hpu' (it accepts {', '.join(KERNELS_DEVICE_TYPES)}), "
           "so use_kernels would change nothing on Gaudi")
    if request.kernels is True:
        raise PlanError(f"kernels=True: {why}. Leave kernels unset (or off) on Gaudi")
    return Decision(KernelChoice.off(), why)


@hookimpl
def intelrt_select_quantization(backend: BackendStatus, request: Request, decisions: Mapping[str, DecisionValue]
                                ) -> Decision | None:
    """H7: bitsandbytes 4/8-bit on Gaudi 2 and 3; first-generation Gaudi is refused."""
    if not owns(backend) or request.quantization is None:
        return None
    gen = generation(backend)
    if gen == FIRST_GENERATION:
        raise PlanError(f"quantization={request.quantization!r}: bitsandbytes 4-bit and 8-bit run on Gaudi 2 and "
                        "Gaudi 3, not on first-generation Gaudi (Gaudi 1). Load without quantization (bfloat16), "
                        "or run on a Gaudi 2 / Gaudi 3")
    version = package_version("bitsandbytes")
    if version is None:
        raise PlanError(f"quantization={request.quantization!r} uses bitsandbytes, which is not installed: "
                        "pip install 'intelrt[bitsandbytes]'")
    value = bitsandbytes_choice(request.quantization, decisions)
    bits = value.bits
    notes = [NF4_NOTE]
    if bits == 4:
        notes.append("QLoRA: train LoRA adapters with PEFT on the 4-bit model when it does not fit one Gaudi")
    where = GENERATION_NAMES.get(gen or "", "Gaudi")
    return Decision(value, f"bitsandbytes {version} {bits}-bit runs on {where}", claim="H7", notes=tuple(notes))


@hookimpl
def intelrt_select_compile(backend: BackendStatus, request: Request) -> Decision | None:
    """H1/H9: eager by default; compiling uses ``hpu_backend`` (or ``eager``)."""
    if not owns(backend):
        return None
    choice = request.compile
    if choice == "none":
        return Decision(CompileChoice.off(), "turned off by the user")
    if choice == "on":
        return Decision(CompileChoice(True, "hpu_backend"),
                        "requested by the user; Gaudi compiles with torch.compile(backend='hpu_backend')", claim="H9")
    if choice in COMPILE_BACKENDS:
        return Decision(CompileChoice(True, choice), "requested by the user", claim="H9")
    if choice != "auto":
        raise PlanError(f"compile={choice!r}: only 'hpu_backend' and 'eager' run on Gaudi (any other backend is "
                        "switched to 'hpu_backend'); pass compile='on' or compile='hpu_backend'")
    return Decision(CompileChoice.off(),
                    "Gaudi runs PyTorch eagerly by default and models run unchanged; compile='on' captures graphs "
                    "with hpu_backend", claim="H1")


@hookimpl
def intelrt_select_collective(backend: BackendStatus) -> Decision | None:
    """H10: HCCL, one process per Gaudi."""
    if not owns(backend):
        return None
    return Decision("hccl", "HCCL is Gaudi's collective library; transformers and accelerate select it on Gaudi "
                            "(ddp_backend='hccl' explicit also works)", claim="H10",
                    notes=("one process per Gaudi: start them with torchrun or accelerate launch (which defaults "
                           "--num_processes to the number of Gaudis)",
                           f"HCCL reduces with {', '.join(HCCL_REDUCE_OPS)} only and has no int64: reduce int64 "
                           "tensors as int32 or float"))
