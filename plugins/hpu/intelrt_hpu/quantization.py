"""H7: bitsandbytes 4-bit / 8-bit on Gaudi 2 and 3; first-generation Gaudi is refused."""

from __future__ import annotations

from intelrt.plugin import (
    Backend,
    Endorsement,
    PlanError,
    QuantizationChoice,
    Situation,
    package_version,
)

from .facts import FIRST_GENERATION, GENERATION_NAMES, generation

NF4_NOTE = ("bitsandbytes' HPU backend registers only the NF4 4-bit dequantize kernel (quant_type 'nf4', uint8 or "
            "bfloat16 storage; FP4 is refused there); the other bitsandbytes ops run on its generic torch kernels")


def check_quantization(backend: Backend, value: QuantizationChoice, s: Situation) -> Endorsement:
    wanted = s.request.quantization
    gen = generation(backend)
    if gen == FIRST_GENERATION:
        raise PlanError(f"quantization={wanted!r}: bitsandbytes 4-bit and 8-bit run on Gaudi 2 and "
                        "Gaudi 3, not on first-generation Gaudi (Gaudi 1). Load without quantization (bfloat16), "
                        "or run on a Gaudi 2 / Gaudi 3")
    version = package_version("bitsandbytes")
    if version is None:
        raise PlanError(f"quantization={wanted!r} uses bitsandbytes, which is not installed: "
                        "pip install 'intelrt[bitsandbytes]'")
    notes = [NF4_NOTE]
    if value.bits == 4:
        notes.append("QLoRA: train LoRA adapters with PEFT on the 4-bit model when it does not fit one Gaudi")
    where = GENERATION_NAMES.get(gen or "", "Gaudi")
    return Endorsement(f"bitsandbytes {version} {value.bits}-bit runs on {where}", claim="H7", notes=tuple(notes))
