"""X11: how a run spreads over Intel GPUs — one process per device, joined by ``xccl``.

DDP, FSDP2, DeepSpeed ZeRO and tensor parallel are strategies on top of that one collective
(SPEC X11). accelerate enables FSDP for ``MULTI_XPU`` ranks (``AcceleratorState``) and joins a
``xpu:xccl,cpu:gloo`` group when a full state dict is gathered to the CPU; transformers' tensor
parallel maps ``xpu`` to ``xccl`` (``DISTRIBUTED_BACKEND_MAP``). Without a usable ``xccl`` no
strategy runs, and a forced one is refused with the fix.
"""

from __future__ import annotations

from intelrt.plugin import ShardingSupport

from .collective import xccl_missing, xccl_usable
from .facts import Detected

#: DeepSpeed's XPU accelerator (``deepspeed/accelerator/xpu_accelerator.py``) imports these two.
DEEPSPEED_XPU = ("pip install deepspeed intel-extension-for-pytorch oneccl_bind_pt (DeepSpeed's XPU accelerator "
                 "imports intel_extension_for_pytorch and oneccl_bindings_for_pytorch)")


def sharding_support(backend: Detected) -> ShardingSupport:
    """What the Intel GPUs of ``backend`` run: every strategy over ``xccl``, or none without it."""
    usable = xccl_usable(backend)
    return ShardingSupport(
        "xccl" if usable else None, collective_missing="" if usable else xccl_missing(backend),
        fsdp_source="accelerate builds FSDP2 from TrainingArguments(fsdp=True, fsdp_config=...) for MULTI_XPU ranks "
                    "over xccl",
        deepspeed_install=DEEPSPEED_XPU, claim="X11",
        notes=("every rank shares one ZE_AFFINITY_MASK and picks xpu:LOCAL_RANK (a per-rank mask hangs XCCL "
               "collectives)",))
