"""The decode engine's memory budget and its one sizing function (``decoding/memory.py``, issue
27): the device's own memory query, asked through the plan's backend (an Intel GPU under
simulation: ``torch.xpu.mem_get_info`` through the simulated Level Zero runtime), a configured
budget on the CPU, blocks within the budget, and refusals that name the largest value that fits."""

from __future__ import annotations

import pytest

from intelrt.decoding.memory import (
    GIB,
    KVShape,
    MemoryBudget,
    memory_budget,
    size_engine,
)
from intelrt.decoding.tuning import DecodeTuning
from intelrt.errors import ConfigurationError
from intelrt.hooks.backend import Backend
from intelrt.host.manager import get_host
from intelrt.testing.simulation import simulate

#: Qwen3-0.6B's KV: 28 layers x 8 key/value heads x 128 features, bfloat16 (114,688 bytes a token).
QWEN3 = KVShape(28, 8, 128, 2)


def detected(name: str) -> Backend:
    """The backend ``name`` as this process detects it (the one a plan on it holds)."""
    return next(b for b in get_host().detect({}) if b.name == name)


def test_the_budget_on_an_intel_gpu_comes_from_its_runtime() -> None:
    import torch

    with simulate("xpu", 1, memory_gib=64) as sim:
        xpu = detected("xpu")
        free, total = xpu.memory_info(torch.device("xpu", 0))  # type: ignore[misc]
        budget = memory_budget(xpu, torch.device("xpu", 0), DecodeTuning(), activation_bytes=2 * GIB,
                               graph_bytes=GIB)
    assert "xpu.mem_get_info" in sim.calls and total == 64 * GIB
    assert budget.kv_bytes == int(0.9 * free) - 3 * GIB
    assert "0.9 x 64.00 GiB free on xpu:0" in budget.how and budget.ceiling == (total - free) + int(0.9 * free)


def test_the_utilization_scales_the_budget_and_is_checked() -> None:
    import torch

    with simulate("xpu", 1, memory_gib=64):
        xpu = detected("xpu")
        full = memory_budget(xpu, torch.device("xpu", 0), DecodeTuning())
        half = memory_budget(xpu, torch.device("xpu", 0), DecodeTuning(memory_utilization=0.45))
        with pytest.raises(ConfigurationError, match=r"must be in \(0, 1\]"):
            memory_budget(xpu, torch.device("xpu", 0), DecodeTuning(), utilization=1.5)
    assert half.kv_bytes * 2 == pytest.approx(full.kv_bytes, rel=1e-6)
    with pytest.raises(ValueError, match="memory_utilization must be in"):
        DecodeTuning(memory_utilization=0)


def test_the_cpu_budget_is_the_configured_one() -> None:
    import torch

    budget = memory_budget(detected("cpu"), torch.device("cpu"), DecodeTuning(cpu_kv_cache_bytes=3 * 2**20))
    assert budget.kv_bytes == 3 * 2**20 and "configured for the CPU" in budget.how and budget.ceiling is None


def test_blocks_fill_the_budget_and_never_more_than_every_row_at_its_longest() -> None:
    tuning = DecodeTuning()
    per_block = 16 * QWEN3.bytes_per_token
    size = size_engine(QWEN3, MemoryBudget(1000 * per_block + 5, "test"), tuning, rows=256, context=4096)
    assert size.blocks == 1001 and size.rows == 256 and size.max_blocks_per_row == 256  # the null block too
    capped = size_engine(QWEN3, MemoryBudget(10**6 * per_block, "test"), tuning, rows=2, context=4096)
    assert capped.blocks - 1 == 2 * 256 and any("capped" in r for r in capped.reasons)
    offline = size_engine(QWEN3, MemoryBudget(10**6 * per_block, "test"), tuning, rows=4, context=64,
                          needed_tokens=100)
    assert offline.blocks - 1 == 7  # what the call's prompts and new tokens need


def test_a_budget_too_small_for_one_request_names_the_context_that_fits() -> None:
    per_block = 16 * QWEN3.bytes_per_token
    with pytest.raises(ConfigurationError, match="cannot hold one completion of 4096 tokens: at most 1600 fit"):
        size_engine(QWEN3, MemoryBudget(100 * per_block, "test"), DecodeTuning(), rows=8, context=4096)
    with pytest.raises(ConfigurationError, match="holds no block"):
        size_engine(QWEN3, MemoryBudget(per_block - 1, "test"), DecodeTuning(), rows=8, context=16)


def test_rows_beyond_the_blocks_are_cut_or_refused_when_asked_for() -> None:
    per_block = 16 * QWEN3.bytes_per_token
    budget = MemoryBudget(8 * per_block, "test")
    cut = size_engine(QWEN3, budget, DecodeTuning(), rows=64, context=32)
    assert cut.rows == 8 and any("rows cut from 64 to 8" in r for r in cut.reasons)
    with pytest.raises(ConfigurationError, match="pass at most 8 rows"):
        size_engine(QWEN3, budget, DecodeTuning(), rows=64, context=32, rows_asked=True)
