"""The parallelism decision (issue 20): which strategy each backend plans, what transformers
receives for it, and what is refused with the way out — plan level, CPU and the simulated
XPU / Gaudi runtimes. The real multi-process runs are in test_sharded_training.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import ConfigurationError, PlanError
from intelrt.hooks.payloads import ParallelismChoice
from intelrt.hooks.request import Request
from intelrt.host.manager import get_host
from intelrt.planning.planner import make_plan

LAUNCHED = {"WORLD_SIZE": "2", "LOCAL_RANK": "0", "RANK": "0"}
FSDP2 = {"version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
         "state_dict_type": "SHARDED_STATE_DICT"}


def _cpu_plan(model: Path, env: dict[str, str] | None = None, **options: Any) -> Any:
    return make_plan(Request.build(model, backend="cpu", dtype="float32", **options), env=env or {})


def _choice(plan: Any) -> ParallelismChoice:
    value = plan.decided.parallelism
    assert isinstance(value, ParallelismChoice)
    return value


def test_hook_select_parallelism_one_process_plans_nothing_sharded(tiny_model: Path) -> None:
    plan = _cpu_plan(tiny_model)
    decision = plan.decisions["parallelism"]
    assert (decision.value, decision.plugin, decision.forced) == (ParallelismChoice.single(), "defaults", False)
    assert plan.decided.placement.device_map == "cpu"
    assert "parallelism" in str(plan)


def test_cpu_fsdp_shards_the_weights_as_they_load_over_gloo(tiny_model: Path) -> None:
    """accelerate builds no FSDP for CPU ranks, so the CPU's FSDP2 is transformers' own."""
    plan = _cpu_plan(tiny_model, LAUNCHED, sharding="fsdp")
    choice = _choice(plan)
    assert (choice.training, choice.world_size, choice.fsdp_config) == ("fsdp", 2, None)
    assert choice.distributed_config == {"fsdp_size": 2} and choice.launch is None
    assert plan.decisions["parallelism"].forced
    assert plan.decided.placement.device_map is None, "transformers places each rank's shard: no device_map"
    assert plan.decided.collective == "gloo"
    assert plan.decided.decode is not None and not plan.decided.decode.fast  # collectives every step: generate()
    assert "AcceleratorState enables it for accelerator ranks only" in plan.decisions["parallelism"].reason


def test_outside_a_launch_a_forced_strategy_names_the_launch_command(tiny_model: Path) -> None:
    plan = _cpu_plan(tiny_model, sharding="ddp")
    choice = _choice(plan)
    assert (choice.training, choice.world_size) == ("ddp", 2)
    assert choice.launch == "intelrt launch --nproc 2 --backend cpu your_script.py"
    assert f"start the ranks with: {choice.launch}" in plan.decisions["parallelism"].notes
    # a sharded load in a process that is not a rank is refused, with the same command
    with pytest.raises(ConfigurationError, match=r"not one of them .* start it with intelrt launch --nproc 2"):
        intelrt.load(tiny_model, backend="cpu", sharding="fsdp")
    with pytest.raises(ConfigurationError, match=r"sharding='ddp' across 2 processes, and this process is not one "
                                                 r"of them .* Start it with intelrt launch --nproc 2"):
        intelrt.training_arguments("/tmp/unused", backend="cpu", sharding="ddp")


def test_unsupported_combinations_are_refused_with_the_way_out(tiny_model: Path) -> None:
    with pytest.raises(PlanError, match=r"accelerate runs DeepSpeed only on accelerators .* use sharding='fsdp' "
                                        r"or 'ddp' on the CPU"):
        _cpu_plan(tiny_model, LAUNCHED, sharding="deepspeed")
    with pytest.raises(PlanError, match=r"sharding='none' trains in one process, but this process is one of 2 "
                                        r"launched ranks .* pass sharding='ddp'"):
        _cpu_plan(tiny_model, LAUNCHED, sharding="none")
    with pytest.raises(PlanError, match=r"parallel='tensor' splits the weights across processes, and this run has 1: "
                                        r"start it with intelrt launch --nproc N"):
        _cpu_plan(tiny_model, {"WORLD_SIZE": "1", "LOCAL_RANK": "0"}, parallel="tensor")
    with pytest.raises(PlanError, match=r"parallel='tensor' loads the weights split for inference, and "
                                        r"sharding='fsdp' trains"):
        _cpu_plan(tiny_model, LAUNCHED, parallel="tensor", sharding="fsdp")
    with pytest.raises(PlanError, match=r"num_attention_heads=4 is not divisible by 3 ranks"):
        _cpu_plan(tiny_model, {"WORLD_SIZE": "3", "LOCAL_RANK": "0"}, parallel="tensor")


def test_tensor_parallel_under_a_launch_hands_transformers_its_tp_plan(tiny_model: Path) -> None:
    plan = _cpu_plan(tiny_model, LAUNCHED, parallel="tensor")
    choice = _choice(plan)
    assert (choice.training, choice.inference) == ("none", "tensor")
    assert choice.distributed_config == {"tp_plan": "auto", "tp_size": 2}
    assert plan.decided.placement.device_map is None
    assert plan.decided.batching is not None and plan.decided.batching.method == "padded"
    assert "Qwen3ForCausalLM" in plan.model.architecture.name and plan.model.architecture.tensor_parallel


def test_xpu_auto_shards_a_training_state_too_big_for_one_device(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    """The tiny model's weights fit 0.5 MB, its AdamW training state (4x) does not: FSDP2 by accelerate."""
    simulate("xpu", count=1, memory_gib=0.0005, env=LAUNCHED)
    plan = intelrt.plan(tiny_model)
    decision = plan.decisions["parallelism"]
    assert (decision.value.training, decision.value.fsdp_config, decision.plugin, decision.claim) == (
        "fsdp", FSDP2, "defaults", "X11")
    assert "does not fit one device, so it is sharded across the 2 launched rank(s)" in decision.reason
    assert plan.decided.placement.device_map == "xpu:0" and plan.decided.collective == "xccl"
    assert "fsdp_config={'version':" in str(plan)  # the generated config is shown (wrapped to the terminal)
    settings = {s.name: s.value for _, s in get_host().training_arguments(
        backend=plan.backend, plan=plan, overrides={})}
    assert settings["fsdp"] is True and settings["fsdp_config"] == FSDP2
    with pytest.raises(PlanError, match=r"deepspeed= configures sharding='deepspeed', and the plan trains with "
                                        r"sharding='fsdp'"):
        get_host().training_arguments(backend=plan.backend, plan=plan, overrides={"deepspeed": {"a": 1}})


def test_xpu_auto_is_ddp_when_the_training_state_fits(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, env=LAUNCHED)
    decision = intelrt.plan(tiny_model).decisions["parallelism"]
    assert decision.value.training == "ddp" and "it fits one device" in decision.reason


def test_xpu_without_xccl_refuses_every_strategy(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=2, xccl=False, env=LAUNCHED)
    with pytest.raises(PlanError, match=r"sharding='fsdp' runs one process per device, joined by a collective "
                                        r"library, and this xpu run has none"):
        intelrt.plan(tiny_model, sharding="fsdp")


def test_deepspeed_without_deepspeed_names_the_install(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, env=LAUNCHED, packages={"deepspeed": None})
    with pytest.raises(PlanError, match=r"needs DeepSpeed, which is not installed: pip install deepspeed "
                                        r"intel-extension-for-pytorch oneccl_bind_pt"):
        intelrt.plan(tiny_model, sharding="deepspeed")


def test_deepspeed_plans_zero_with_transformers_auto_values(simulate, tiny_model: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deepspeed").mkdir()  # an installed DeepSpeed (the vendor package) as find_spec sees it
    (tmp_path / "deepspeed" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    simulate("hpu", count=1, env=LAUNCHED, packages={"deepspeed": "0.16.0"})
    plan = intelrt.plan(tiny_model, sharding="deepspeed")
    choice = _choice(plan)
    assert choice.training == "deepspeed" and choice.deepspeed is not None
    assert choice.deepspeed["zero_optimization"]["stage"] == 2  # the weights and gradients fit: ZeRO-2
    assert choice.deepspeed["train_micro_batch_size_per_gpu"] == "auto"
    assert plan.decisions["parallelism"].claim == "H10"


@pytest.mark.claim("H10")
def test_gaudi_rules(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", count=1, generation="gaudi1", env=LAUNCHED)
    with pytest.raises(PlanError, match=r"Habana documents PyTorch FSDP from Gaudi 2 .* first-generation Gaudi; use "
                                        r"sharding='deepspeed'"):
        intelrt.plan(tiny_model, sharding="fsdp")


@pytest.mark.claim("H10")
def test_gaudi2_fsdp_and_habana_deepspeed_hint(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", count=1, env=LAUNCHED, packages={"deepspeed": None})
    plan = intelrt.plan(tiny_model, sharding="fsdp")
    assert _choice(plan).fsdp_config == FSDP2 and plan.decided.placement.device_map == "hpu"
    with pytest.raises(PlanError, match=r"pip install git\+https://github.com/HabanaAI/DeepSpeed.git@"):
        intelrt.plan(tiny_model, sharding="deepspeed")


def test_fsdp_with_bitsandbytes_is_refused(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, env=LAUNCHED, packages={"bitsandbytes": "0.49.0"})
    with pytest.raises(PlanError, match=r"sharding='fsdp' with bitsandbytes 4-bit weights: PEFT documents FSDP with QLoRA "
                                        r"for FSDP1 only"):
        intelrt.plan(tiny_model, sharding="fsdp", quantization="4bit")


def test_the_generated_fsdp_config_is_what_transformers_parses_for_fsdp2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's own path: TrainingArguments turns the plan's fsdp_config into accelerate's FSDP2
    plugin arguments (fsdp_version 2)."""
    from transformers import TrainingArguments

    from intelrt.backends.parallelism import fsdp2_config

    for name in [n for n in os.environ if n.startswith(("FSDP_", "ACCELERATE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "false")  # TrainingArguments sets it; restored after
    args = TrainingArguments("/tmp/unused", fsdp=True, fsdp_config=fsdp2_config(), use_cpu=True, report_to="none")
    assert args.fsdp_plugin_args["fsdp_version"] == 2
    assert args.fsdp_plugin_args["state_dict_type"] == "SHARDED_STATE_DICT"
    assert args.fsdp_plugin_args["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"


def test_train_with_another_strategy_than_the_load_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    loaded = intelrt.load(tiny_model, backend="cpu", dtype="float32")
    with pytest.raises(ConfigurationError, match=r"sharding='fsdp' on cpu shards the weights as they load .* load it "
                                                 r"with intelrt.load\(..., sharding='fsdp'\) in every rank"):
        loaded.train(["hello world"] * 8, output_dir=tmp_path / "out", sharding="fsdp")
    assert not (tmp_path / "out").exists()


def test_training_arguments_refuse_a_layout_the_model_was_not_loaded_with(tiny_model: Path) -> None:
    """FSDP2 that shards the weights as they load cannot be switched on for a model loaded whole or
    built by hand: Trainer would quietly run DDP instead."""
    with pytest.raises(ConfigurationError, match=r"sharding='fsdp' on cpu shards the weights as they load .* a model "
                                                 r"you built yourself was not: load it with intelrt.load\(model, "
                                                 r"sharding='fsdp'\)"):
        intelrt.training_arguments("/tmp/unused", backend="cpu", sharding="fsdp")
    plan = _cpu_plan(tiny_model, LAUNCHED)
    with pytest.raises(ConfigurationError, match=r"and this model was loaded whole: load it with "
                                                 r"intelrt.load\(..., sharding='fsdp'\) in every rank"):
        intelrt.training_arguments("/tmp/unused", plan=plan, sharding="fsdp")
    tensor = _cpu_plan(tiny_model, LAUNCHED, parallel="tensor")
    with pytest.raises(ConfigurationError, match=r"loaded tensor-parallel \(parallel='tensor'\), for inference"):
        intelrt.training_arguments("/tmp/unused", plan=tensor)
