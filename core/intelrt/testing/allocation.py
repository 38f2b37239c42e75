"""A device that runs out of memory on demand: allocations larger than a limit fail with
``torch.OutOfMemoryError``, as a GPU's caching allocator raises it
(``c10/cuda/CUDACachingAllocator.cpp``: "CUDA out of memory. Tried to allocate …").

The fault is injected at the dispatcher, below every Python function of torch, transformers and
intelrt (a ``TorchDispatchMode``): the code under test runs unmodified and sees the same exception
a full device gives it. Only operations that produce new storage fail (views and in-place updates
allocate nothing, and never fail here), so an operation that "failed" changed nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["AllocationLimit", "allocation_limit"]


class AllocationLimit:
    """What :func:`allocation_limit` did: ``failures`` allocations refused so far, the largest one
    asked for (``largest``)."""

    def __init__(self, limit: int, times: int | None) -> None:
        self.limit, self.times = limit, times
        self.failures = 0
        self.largest = 0


@contextlib.contextmanager
def allocation_limit(limit: int, *, times: int | None = None) -> Iterator[AllocationLimit]:
    """Within the block (on this thread), an operation whose new outputs take more than ``limit``
    bytes raises ``torch.OutOfMemoryError`` — the first ``times`` such operations (``None``: every
    one)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    record = AllocationLimit(limit, times)

    def storages(values: Any) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_flatten(values)[0]
                if isinstance(t, torch.Tensor) and t.device.type != "meta"}

    class Limit(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func._schema.is_mutable or (record.times is not None and record.failures >= record.times):
                return out
            inputs = storages((args, kwargs))
            new = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.device.type != "meta"
                   and t.untyped_storage().data_ptr() not in inputs]
            size = sum(t.untyped_storage().nbytes() for t in new)
            record.largest = max(record.largest, size)
            if size > record.limit:
                record.failures += 1
                raise torch.OutOfMemoryError(
                    f"simulated device out of memory: {func} tried to allocate {size} bytes; the limit is "
                    f"{record.limit} bytes per allocation (intelrt.testing.allocation)")
            return out

    with Limit():
        yield record
