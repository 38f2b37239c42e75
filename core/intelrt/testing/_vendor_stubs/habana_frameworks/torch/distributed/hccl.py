"""Stand-in for ``habana_frameworks.torch.distributed.hccl`` (gaudi-pytorch-bridge 1.19
``torch/distributed/hccl/__init__.py``); ``habana_frameworks.torch`` imports it (l.55).

At import, like the real module:

* it reads the collectives flavour once: eager collectives in eager mode; in lazy mode lazy
  collectives only with ``PT_HPU_ENABLE_LAZY_COLLECTIVES`` ``true``/``1`` (l.11-21) — which
  HPU graphs need for tensor-parallel inference (vllm-gaudi ``docs/configuration/env_variables.md``
  l.81, ``platform.py`` l.432-436); without it an HPU-graph capture inside a multi-rank ``hccl``
  group fails here (on hardware it hangs or miscomputes);
* ``initialize_distributed_hpu()`` (l.80-104) copies Open MPI's rank variables, sets
  ``MASTER_ADDR=localhost`` and ``MASTER_PORT=12345`` when unset unless ``LOCAL_RANK``,
  ``WORLD_SIZE`` and ``RANK`` are all set (l.60-77), writes ``HLS_MODULE_ID`` — the module the
  rank will acquire: ``HABANA_VISIBLE_MODULES``'s entry at ``LOCAL_RANK``, else ``LOCAL_RANK``;
  only for a multi-process run with a local rank (l.27-47) — and ``ID`` for rank logs;
* it registers the ``hccl`` process-group backend (l.111), here as a Gloo group on CPU tensors, so
  ranks of a simulated launch rendezvous for real.

Kinder than the real group, an assumption named here: ``ProcessGroupHCCL`` reduces with MIN, MAX,
SUM and PRODUCT only ("Unsupported ReduceOp for HCCL process group"), takes uint8, int8, float64,
float32, float16, int32, int64 and bfloat16 only ("Input tensor data type is not supported for HCCL
process group"), and moves int64 as pairs of float32 words, so an int64 sum is not a sum
(gaudi-pytorch-bridge ``ProcessGroupHCCL.cpp`` ``hcclOp``,
``hcclDataType``, ``getCountDatatype``; SPEC H10: "HCCL reduces with sum/min/max only and has no
int64", which the plan says). The Gloo group computes all of those right: not simulated.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as _dist

from intelrt.testing.simulation import current as _current

from ..hpu import HABANA_VISIBLE_MODULES_VAR, HLS_MODULE_ID_VAR

_current().record("hccl.import")
_lazy_mode = int(os.environ.get("PT_HPU_LAZY_MODE", _current().machine.stack_default_mode()))
_lazy_collectives_enabled = os.environ.get("PT_HPU_ENABLE_LAZY_COLLECTIVES", "False").lower() in ["true", "1"]
_current().record("hccl.collectives:" + ("eager" if _lazy_mode == 0 else
                                         "lazy" if _lazy_collectives_enabled else "lazy-without-lazy-collectives"))


def lazy_collectives_missing() -> bool:
    """Whether this process runs lazy mode without lazy collectives (what HPU-graph capture checks)."""
    return _lazy_mode != 0 and not _lazy_collectives_enabled


def _setup_module_id(local_rank: int = -1, world_size: int = 1) -> None:
    if HLS_MODULE_ID_VAR in os.environ:
        return
    if local_rank == -1 or world_size == 1:
        return  # the bridge then acquires a device by type
    if HABANA_VISIBLE_MODULES_VAR in os.environ:
        visible_modules = os.environ[HABANA_VISIBLE_MODULES_VAR].split(",")
        assert local_rank < len(visible_modules), (
            f"There is not enough devices available for training. Please verify if {HABANA_VISIBLE_MODULES_VAR} "
            "is set correctly.")
        os.environ[HLS_MODULE_ID_VAR] = visible_modules[local_rank]
        return
    os.environ[HLS_MODULE_ID_VAR] = str(local_rank)


def _setup_environment_from_mpi() -> None:
    mapping = {"OMPI_COMM_WORLD_LOCAL_RANK": "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE": "WORLD_SIZE",
               "OMPI_COMM_WORLD_RANK": "RANK"}
    if all(key in os.environ for key in mapping.values()):
        return
    if all(key in os.environ for key in mapping):
        for mpi_name, name in mapping.items():
            os.environ[name] = os.environ[mpi_name]
    if os.getenv("MASTER_ADDR") is None:
        os.environ["MASTER_ADDR"] = "localhost"
    if os.getenv("MASTER_PORT") is None:
        os.environ["MASTER_PORT"] = "12345"


def initialize_distributed_hpu() -> tuple[int, int, int]:
    _setup_environment_from_mpi()
    world_size = int(os.getenv("WORLD_SIZE", 1))
    rank = int(os.getenv("RANK", -1))
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    _setup_module_id(local_rank=local_rank, world_size=world_size)
    if rank != -1:
        os.environ["ID"] = str(rank)
    return world_size, rank, local_rank


initialize_distributed_hpu()


def _gloo(store: _dist.Store, rank: int, size: int, timeout: timedelta) -> object:
    return _dist.ProcessGroupGloo(store, rank, size, timeout)


if "HCCL" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("hccl", _gloo, devices=["hpu"])
