"""Gaudi's speed features as plan decisions: FusedSDPA for attention, shape buckets with a warm-up,
lazy collectives for multi-card lazy launches, static shapes in training (docs/backends/gaudi-performance.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import PlanError
from intelrt.hooks.payloads import Buckets
from intelrt.training.launching import launch_command
from intelrt_hpu.buckets import exponential_sizes

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
RANK_SCRIPT = Path(__file__).parents[1] / "scripts" / "simulated_rank.py"


def test_exponential_sizes_give_vllm_gaudis_documented_example() -> None:
    """vllm-gaudi's warmup_range_with_limit docstring: (min 128, step 128, max 2048, 10 buckets) gives
    128, 256, 384, 512, 640, 896, 1152, 1536, 2048 (one duplicate 256 dropped)."""
    assert exponential_sizes(128, 128, 2048, 10) == (128, 256, 384, 512, 640, 896, 1152, 1536, 2048)
    assert exponential_sizes(1, 1, 64) == (1, 2, 4, 8, 16, 32, 64)
    assert exponential_sizes(1, 1, 1) == (1,)
    assert exponential_sizes(128, 128, 96) == (128,)  # a context shorter than a block: one bucket


def test_buckets_pad_to_the_smallest_bucket_that_holds_the_batch() -> None:
    buckets = Buckets("exponential", (1, 2, 4), (128, 256, 512), (1, 2, 4), (1, 2, 4, 8, 16), 128, 1024, True)
    assert buckets.prompt_bucket(3, 200) == (4, 256)
    assert buckets.prompt_bucket(1, 513) is None  # longer than every bucket: unpadded, compiles mid-run
    assert buckets.prompt_bucket(4, 512) is None  # beyond the token budget of a prompt pass
    assert buckets.prompt_shapes()[:2] == [(2, 512), (4, 256)] and (4, 512) not in buckets.prompt_shapes()
    assert buckets.decode_bucket(3, 5) == (4, 8) and buckets.decode_bucket(1, 1) == (1, 1)
    assert all(b <= x <= b * 4 for b, x in buckets.decode_shapes())  # a row holds 1..4 blocks (16 / 4 rows)
    assert Buckets.from_dict(buckets.to_dict()) == buckets
    with pytest.raises(TypeError, match="must ascend without repeats"):
        Buckets("exponential", (2, 1), (128,), (1,), (1,), 128, 1024, True)


@pytest.mark.claim("H11")
@pytest.mark.parametrize(("workload", "warm"), [("server", True), ("batch", True), ("auto", False)])
def test_gaudi2_buckets_are_warmed_for_server_and_batch_workloads(simulate: Any, tiny_model: Path, workload: str,
                                                                  warm: bool) -> None:
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    decision = intelrt.plan(tiny_model, workload=workload).decisions["buckets"]
    assert isinstance(decision.value, Buckets) and decision.value.warmup is warm and decision.plugin == "hpu"
    assert decision.value.decode_batch_sizes[-1] == 64 and decision.value.block_size == 128
    assert "vllm-gaudi" in decision.reason and ("warmed up at load" in decision.reason) is warm


def test_one_shot_work_on_eager_gaudi_runs_the_step_eagerly_and_pads_no_shapes(simulate: Any, tiny_model: Path) -> None:
    """One short generate does not pay for a compile on Gaudi either (the decode rule weighs the workload on
    every backend): the step runs eagerly, nothing compiles per shape, and no buckets are planned."""
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    plan = intelrt.plan(tiny_model, workload="one-shot")
    decode = plan.decisions["decode"]
    assert (decode.value.compile, decode.value.graphs, decode.value.warmup) == (None, None, "eager")
    assert "one-shot work" in decode.reason and "buckets" not in plan.decisions
    compiled = intelrt.plan(tiny_model, workload="one-shot", compile="on").decisions["buckets"]
    assert compiled.value is not None and compiled.value.warmup is False  # compile= asked: buckets, not warmed


@pytest.mark.claim("H11")
def test_gaudi_one_shot_work_runs_eagerly_with_nothing_to_pad(simulate: Any, tiny_model: Path) -> None:
    """One-shot work is not worth a compile (issue 39: nothing compiles where the user waits): the
    eager-mode step runs uncompiled, so no shape compiles and nothing is padded to buckets."""
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    decisions = intelrt.plan(tiny_model, workload="one-shot").decisions
    assert "buckets" not in decisions
    assert (decisions["decode"].value.prepared, decisions["decode"].value.compile) == ("eager", None)
    assert "one-shot work" in decisions["decode"].reason


@pytest.mark.claim("H11")
def test_vllm_skip_warmup_and_buckets_off_are_honoured(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, env={**INT64, "VLLM_SKIP_WARMUP": "true"})
    skipped = intelrt.plan(tiny_model, workload="server").decisions["buckets"]
    assert skipped.value.warmup is False and "VLLM_SKIP_WARMUP=true" in skipped.reason
    off = intelrt.plan(tiny_model, workload="server", buckets="off").decisions["buckets"]
    assert off.value is None and off.forced and "every new shape compiles" in off.reason


@pytest.mark.claim("H1")
def test_lazy_mode_buckets_are_hpu_graphs_per_decode_bucket(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, mode="lazy", torch_fork=True, env=INT64)
    decision = intelrt.plan(tiny_model, workload="server").decisions["buckets"]
    assert "one HPU graph per decode bucket" in decision.reason and decision.value.warmup


def test_backends_without_per_shape_graphs_plan_no_buckets(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model, backend="cpu", workload="server")
    assert "buckets" not in plan.decisions and "buckets" not in str(plan)
    with pytest.raises(PlanError, match="buckets='on': the cpu backend compiles no graph per input shape"):
        intelrt.plan(tiny_model, backend="cpu", buckets="on")


@pytest.mark.claim("H11")
def test_fused_sdpa_is_gaudis_attention_and_can_be_switched(simulate: Any, tiny_model: Path) -> None:
    simulate("hpu", 8, env=INT64)
    assert intelrt.plan(tiny_model).decided.attention == "intelrt_hpu_fused_sdpa"
    fast = intelrt.plan(tiny_model, attention="intelrt_hpu_fused_sdpa_fast_softmax").decisions["attention"]
    assert fast.forced and "softmax_mode='fast'" in fast.reason
    assert intelrt.plan(tiny_model, attention="sdpa").decided.attention == "sdpa"
    with pytest.raises(PlanError, match="Gaudi's fused SDPA, the default where the stack has it"):
        intelrt.plan(tiny_model, attention="flash_attention_2")


@pytest.mark.claim("H11")
def test_a_stack_without_the_fused_kernel_keeps_sdpa(simulate: Any, tiny_model: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import intelrt_hpu.fused_sdpa as fused

    simulate("hpu", 8, env=INT64)
    monkeypatch.setattr(fused, "_KERNEL_FILE", Path("torch", "hpex", "kernels", "NoSuchKernel.py"))  # an older stack
    decision = intelrt.plan(tiny_model).decisions["attention"]
    assert decision.value == "sdpa" and "no fused SDPA kernel" in decision.reason
    with pytest.raises(PlanError, match="which this Gaudi software stack does not ship"):
        intelrt.plan(tiny_model, attention="intelrt_hpu_fused_sdpa")


@pytest.mark.claim("H10")
@pytest.mark.parametrize(("mode", "fork", "expected"), [("lazy", True, "true"), ("eager", False, None)])
def test_lazy_multi_card_launches_get_lazy_collectives(simulate: Any, mode: str, fork: bool,
                                                       expected: str | None) -> None:
    simulate("hpu", 8, mode=mode, torch_fork=fork, env=INT64)
    env = launch_command(str(RANK_SCRIPT), nproc=2, devices=[0, 1]).environment({})
    assert env.get("PT_HPU_ENABLE_LAZY_COLLECTIVES") == expected
    single = launch_command(str(RANK_SCRIPT), nproc=1, devices=[0]).environment({})
    assert "PT_HPU_ENABLE_LAZY_COLLECTIVES" not in single


@pytest.mark.claim("H10")
def test_lazy_collectives_turned_off_by_the_user_is_kept_with_a_warning(simulate: Any) -> None:
    simulate("hpu", 8, mode="lazy", torch_fork=True, env={**INT64, "PT_HPU_ENABLE_LAZY_COLLECTIVES": "false"})
    command = launch_command(str(RANK_SCRIPT), nproc=2, devices=[0, 1])
    assert command.environment()["PT_HPU_ENABLE_LAZY_COLLECTIVES"] == "false"
    assert [f for f in command.findings if f.severity == "warning" and "LAZY_COLLECTIVES" in f.title]


@pytest.mark.claim("H8")
@pytest.mark.parametrize(("mode", "fork", "overrides", "drops"), [
    ("lazy", True, {}, True), ("eager", False, {}, False), ("eager", False, {"torch_compile": True}, True),
    ("lazy", True, {"dataloader_drop_last": False}, False)])
def test_training_on_gaudi_keeps_batch_shapes_static(simulate: Any, mode: str, fork: bool, overrides: dict[str, Any],
                                                      drops: bool) -> None:
    from intelrt.host.manager import PluginHost

    simulate("hpu", 2, mode=mode, torch_fork=fork, env=INT64)
    from intelrt.planning.planner import plan_backend

    plan = plan_backend()
    settings = {s.name: s for _, s in PluginHost().training_arguments(backend=plan.backend, plan=plan,
                                                                      overrides=overrides)}
    assert ("dataloader_drop_last" in settings) is drops
    if drops:
        assert settings["dataloader_drop_last"].value is True and "compiles a graph per input shape" in \
            settings["dataloader_drop_last"].reason
