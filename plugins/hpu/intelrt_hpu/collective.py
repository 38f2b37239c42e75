"""H10: HCCL, Gaudi's collective library — one process per Gaudi."""

from __future__ import annotations

from intelrt.plugin import Backend, Decision, Situation

from .facts import HCCL_REDUCE_OPS


def select_collective(backend: Backend, s: Situation) -> Decision:
    return Decision("hccl", "HCCL is Gaudi's collective library; transformers and accelerate select it on Gaudi "
                            "(ddp_backend='hccl' explicit also works)", claim="H10",
                    notes=("one process per Gaudi: start them with torchrun or accelerate launch (which defaults "
                           "--num_processes to the number of Gaudis)",
                           f"HCCL reduces with {', '.join(HCCL_REDUCE_OPS)} only and has no int64: reduce int64 "
                           "tensors as int32 or float"))
