"""The example of the ``intelrt_select_parallelism`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import ShardingSupport, Situation, decide_parallelism, hookimpl

# A site whose CPU ranks may not use FSDP (its tests compare DDP runs only).
CPU_DDP_ONLY = ShardingSupport(
    "gloo", fsdp=None, fsdp_missing="this site runs CPU ranks with DDP only; pass sharding='ddp'",
    deepspeed_missing="this site runs no DeepSpeed on CPU ranks")


@hookimpl(tryfirst=True)
def intelrt_select_parallelism(backend, request, model, env, decided):
    if backend.name != "cpu":
        return None
    return decide_parallelism(backend, Situation(request, model, env, decided), CPU_DDP_ONLY)
