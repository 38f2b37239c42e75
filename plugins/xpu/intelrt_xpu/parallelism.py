"""X11: how a run spreads over Intel GPUs — one process per device, joined by ``xccl``.

DDP, FSDP2, DeepSpeed ZeRO and tensor parallel are strategies on top of that one collective
(SPEC X11). accelerate enables FSDP for ``MULTI_XPU`` ranks (``AcceleratorState``) and joins a
``xpu:xccl,cpu:gloo`` group when a full state dict is gathered to the CPU; transformers' tensor
parallel maps ``xpu`` to ``xccl`` (``DISTRIBUTED_BACKEND_MAP``). Without a usable ``xccl`` no
strategy runs, and a forced one is refused with the fix.
"""

from __future__ import annotations

from intelrt.plugin import ShardingSupport

from .collective import LEGACY_CCL, xccl_missing, xccl_usable
from .facts import XCCL_TORCH_FLOOR, Detected, torch_version

#: DeepSpeed's XPU accelerator (``deepspeed/accelerator/xpu_accelerator.py``) imports these two.
DEEPSPEED_XPU = ("pip install deepspeed intel-extension-for-pytorch oneccl_bind_pt (DeepSpeed's XPU accelerator "
                 "imports intel_extension_for_pytorch and oneccl_bindings_for_pytorch)")


def sharding_support(backend: Detected) -> ShardingSupport:
    """What the Intel GPUs of ``backend`` run: every strategy over ``xccl``, or none without it."""
    usable = xccl_usable(backend)
    return ShardingSupport(
        "xccl" if usable else None, collective_missing="" if usable else xccl_missing(backend),
        collective_reason=f"XCCL is torch.distributed's backend for Intel GPUs: this torch ({torch_version(backend)}) "
                          f"has it (torch.distributed.is_xccl_available()), and accelerate picks it from torch "
                          f"{XCCL_TORCH_FLOOR}",
        collective_notes=(LEGACY_CCL, "one process per Intel GPU (torchrun / accelerate launch); DDP, FSDP2, DeepSpeed "
                          "ZeRO and tensor parallel run on top; every rank shares one ZE_AFFINITY_MASK and picks "
                          "xpu:LOCAL_RANK"),
        fsdp_source="accelerate builds FSDP2 from TrainingArguments(fsdp=True, fsdp_config=...) for MULTI_XPU ranks "
                    "over xccl",
        deepspeed_install=DEEPSPEED_XPU, claim="X11",
        notes=("every rank shares one ZE_AFFINITY_MASK and picks xpu:LOCAL_RANK (a per-rank mask hangs XCCL "
               "collectives)",))
