"""X11: the collective backend of Intel GPUs, ``xccl`` (the plan's collective decision comes from
``parallelism.sharding_support``).

``xccl`` is chosen as accelerate chooses it: torch >= 2.7 *and* a build with XCCL
(``torch.distributed.is_xccl_available()``); without it accelerate picks no collective for the
ranks and torch.distributed fails to start their process group, deep inside TrainingArguments.
"""

from __future__ import annotations

from .detection import XPU_INDEX
from .facts import (
    XCCL_TORCH_FLOOR,
    XCCL_WHEELS_TORCH,
    Detected,
    torch_at_least,
    torch_version,
    xccl_built,
)

#: ``TrainingArguments.ddp_backend`` choices in transformers 5 (``ccl`` is gone).
DDP_CHOICES = ("nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl")
LEGACY_CCL = ("the legacy 'ccl' backend (oneCCL bindings for PyTorch) is not among transformers 5 ddp_backend "
               f"choices ({' '.join(DDP_CHOICES)})")


def xccl_usable(backend: Detected) -> bool:
    """Whether accelerate would pick ``xccl``: torch >= 2.7 and a build with XCCL."""
    return torch_at_least(backend, XCCL_TORCH_FLOOR) and xccl_built(backend)


def xccl_missing(backend: Detected) -> str:
    """Why this torch has no usable ``xccl``, naming the version or the build, and the fix."""
    install = f"install torch >= {XCCL_WHEELS_TORCH} from the XPU index (pip install torch --index-url {XPU_INDEX})"
    if not torch_at_least(backend, XCCL_TORCH_FLOOR):
        return (f"torch {torch_version(backend)} has no xccl collective backend for accelerate (it asks for xccl from "
                f"torch {XCCL_TORCH_FLOOR}); {LEGACY_CCL}. {install[0].upper()}{install[1:]}")
    return (f"this torch build ({torch_version(backend)}) has no XCCL: torch.distributed.is_xccl_available() is False "
            "(built without USE_XCCL), so accelerate finds no collective for the Intel GPU (distributed_type NO) and "
            "torch.distributed stops every rank with \"Distributed package doesn't have XCCL built in\"; "
            f"{install} — Intel's XPU wheels include XCCL from {XCCL_WHEELS_TORCH}")
