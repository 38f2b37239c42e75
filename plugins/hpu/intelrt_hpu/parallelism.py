"""H6, H10: how a run spreads over Gaudis — one process per Gaudi, joined by ``hccl`` (HCCL, Gaudi's
collective library: the plan's collective decision comes from :func:`sharding_support`).

A Gaudi process drives one Gaudi, so a model too big for one is run by several processes
(SPEC H6). Habana documents DeepSpeed for large-model training on Gaudi (its own fork,
``HabanaAI/DeepSpeed``, matching the Gaudi software version; ZeRO-1/2/3 validated in Habana's
DeepSpeed User Guide, used by Optimum for Intel Gaudi): ``auto`` picks it when it is installed.
Habana also documents PyTorch FSDP on Gaudi 2 and later ("Using Fully Sharded Data Parallel
(FSDP) with Intel Gaudi"); accelerate enables FSDP for ``MULTI_HPU`` ranks. transformers' tensor
parallel maps ``hpu`` to ``hccl`` (``DISTRIBUTED_BACKEND_MAP``).
"""

from __future__ import annotations

from intelrt.plugin import ShardingSupport

from .facts import (
    FIRST_GENERATION,
    HCCL_REDUCE_OPS,
    OPTIMUM_HABANA,
    Detected,
    generation,
    stack_version,
)

HABANA_DEEPSPEED = "https://github.com/HabanaAI/DeepSpeed"
HABANA_FSDP = "https://docs.habana.ai/en/latest/PyTorch/PyTorch_FSDP/Pytorch_FSDP.html"


def deepspeed_install(backend: Detected) -> str:
    """Habana's DeepSpeed fork at the Gaudi software release (its tags are the release numbers)."""
    stack = stack_version(backend)
    release = ".".join(stack.split(".")[:3]) if stack else "<your Gaudi software release, e.g. 1.22.0>"
    return (f"pip install git+{HABANA_DEEPSPEED}.git@{release} (Habana's DeepSpeed fork, matching the Gaudi "
            "software; upstream DeepSpeed has no Gaudi build)")


def sharding_support(backend: Detected) -> ShardingSupport:
    first = generation(backend) == FIRST_GENERATION
    return ShardingSupport(
        "hccl", collective_reason="HCCL is Gaudi's collective library; transformers and accelerate select it on "
                                  "Gaudi (ddp_backend='hccl' explicit also works)",
        collective_notes=("one process per Gaudi: start them with torchrun or accelerate launch (which defaults "
                          "--num_processes to the number of Gaudis)",
                          f"HCCL reduces with {', '.join(HCCL_REDUCE_OPS)} only and has no int64: reduce int64 "
                          "tensors as int32 or float"),
        fsdp=None if first else "accelerate",
        fsdp_missing=(f"Habana documents PyTorch FSDP from Gaudi 2 ({HABANA_FSDP}), and this is first-generation "
                      "Gaudi; use sharding='deepspeed' (Habana's DeepSpeed ZeRO) or 'ddp'") if first else "",
        fsdp_source=f"accelerate builds FSDP2 for MULTI_HPU ranks over hccl (Habana documents FSDP on Gaudi 2 and "
                    f"later: {HABANA_FSDP})",
        deepspeed_install=deepspeed_install(backend), prefer_deepspeed=True, claim="H10",
        notes=("one process per Gaudi (SPEC H6): intelrt launch starts them, each acquiring one Gaudi",
               f"HCCL reduces with {', '.join(HCCL_REDUCE_OPS)} only: the sums of DDP, FSDP and tensor parallel run; "
               f"Optimum for Intel Gaudi ({OPTIMUM_HABANA}) has Gaudi-tuned DeepSpeed recipes"))
