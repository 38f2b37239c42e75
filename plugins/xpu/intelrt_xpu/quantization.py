"""X9: quantization on Intel GPUs — bitsandbytes 4-bit / 8-bit, and the QLoRA recipe."""

from __future__ import annotations

from intelrt.plugin import (
    Backend,
    Endorsement,
    PlanError,
    QuantizationChoice,
    Situation,
    at_least,
    package_version,
)

from .facts import BITSANDBYTES_FLOOR, TRANSFORMERS_TORCH_FLOOR, torch_at_least, torch_version

_OTHER_METHODS = ("other methods of the Intel GPU column of transformers' quantization overview are loaded "
                  "with their own quantization_config; intelrt plans bitsandbytes")


def check_quantization(backend: Backend, value: QuantizationChoice, s: Situation) -> Endorsement:
    """X9: bitsandbytes 4-bit (NF4) or 8-bit on XPU (bitsandbytes >= 0.47, torch >= 2.6); a 4-bit
    model is the base of QLoRA (LoRA adapters trained with PEFT)."""
    wanted = s.request.quantization
    installed = package_version("bitsandbytes")
    if installed is None:
        raise PlanError(f"quantization={wanted!r} uses bitsandbytes, which is not installed: "
                        f"pip install 'bitsandbytes>={BITSANDBYTES_FLOOR}' (intelrt[bitsandbytes])")
    if not at_least(installed, BITSANDBYTES_FLOOR):
        raise PlanError(f"quantization={wanted!r}: bitsandbytes {installed} has no Intel GPU support; "
                        f"it runs on XPU from {BITSANDBYTES_FLOOR}: pip install 'bitsandbytes>={BITSANDBYTES_FLOOR}'")
    if not torch_at_least(backend, TRANSFORMERS_TORCH_FLOOR):
        raise PlanError(f"quantization={wanted!r}: bitsandbytes on Intel GPUs needs torch >= "
                        f"{TRANSFORMERS_TORCH_FLOOR} (this is torch {torch_version(backend)}); install a newer torch "
                        "from the XPU index")
    notes = [_OTHER_METHODS]
    if value.bits == 4:
        peft = package_version("peft")
        notes.insert(0, "QLoRA: to fine-tune a model too big for the GPU, train LoRA adapters with PEFT on this "
                        "4-bit base (Loaded.train(..., lora=True))"
                        + ("" if peft else "; PEFT is not installed: pip install peft"))
    return Endorsement(f"bitsandbytes {installed} {value.bits}-bit runs on Intel GPUs (>= {BITSANDBYTES_FLOOR}, "
                       f"torch {torch_version(backend)})", claim="X9", notes=tuple(notes))
