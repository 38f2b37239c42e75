"""The quantization decision through ``intelrt.plan`` on simulated Intel GPUs (Arc, Max) and Gaudis
(1, 2, 3), issue 29: every ``quantization=`` value and every pre-quantized checkpoint (the
``quantization_config`` blocks of real hub models, tests/data/quantization_checkpoints.json,
written into a copy of the tiny model's config.json) is planned as the method × backend table
says, or refused with the way out; the dtype a checkpoint loads in is what transformers' own
quantizer (its ``update_dtype``, run unmodified on the simulated machine) casts to, and it shows in
the dtype decision; the value is what transformers' config classes take."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import PlanError
from intelrt.hooks.options import QUANTIZATIONS
from intelrt.hooks.quantization import Cell
from intelrt.hooks.request import Request
from intelrt.planning.planner import make_plan
from intelrt.quantization.methods import TABLE, Method, Target, cell_of, request_method
from intelrt_hpu.quantization import HPU_QUANTIZATION
from intelrt_xpu.quantization import XPU_QUANTIZATION

OWN = {"xpu": XPU_QUANTIZATION, "hpu": HPU_QUANTIZATION}
COLUMN = {c.key: c for columns in OWN.values() for c in columns.columns}


def cell(method: Method, column: str) -> Cell:
    """``method``'s cell in a column of the Intel plugins (their ``quantization_columns``)."""
    kind = COLUMN[column].kind
    return cell_of(method, COLUMN[column], OWN[kind])


def target(kind: str) -> Target:
    return Target(kind, columns=OWN[kind])

CHECKPOINTS = json.loads((Path(__file__).parents[1] / "data" / "quantization_checkpoints.json").read_text())
INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
#: Every package a method needs, as installed (the simulator writes stand-ins for those that are not);
#: not hqq: transformers' modeling code imports hqq.core once it sees hqq installed.
EVERYTHING = {"torchao": "0.18.0", "bitsandbytes": "0.50.2", "auto-round": "0.16.1", "neural-compressor-pt": "3.10",
              "gptqmodel": "5.6.0", "optimum": "2.0.0", "compressed-tensors": "0.20.1",
              "kernels": "0.18.2", "triton": "3.6.0", "optimum-quanto": "0.2.7"}
MACHINES = {"arc": ("xpu", {"product": "arc-a770"}, "xpu-arc"), "max": ("xpu", {"product": "max1550"}, "xpu-max"),
            "gaudi1": ("hpu", {"generation": "gaudi1", "env": INT64}, "gaudi1"),
            "gaudi2": ("hpu", {"generation": "gaudi2", "env": INT64}, "gaudi2"),
            "gaudi3": ("hpu", {"generation": "gaudi3", "env": INT64}, "gaudi3")}
#: Checkpoints whose transformers quantizer can be built here (GPTQ needs optimum.gptq, HQQ hqq.core).
QUANTIZER_BUILDS = ("awq", "autoround", "compressed_tensors_w4a16", "compressed_tensors_fp8", "torchao_int4",
                    "fbgemm_fp8", "finegrained_fp8", "mxfp4", "bnb_nf4", "bnb_fp4")


def on(simulate: Callable[..., Any], machine: str, **packages: str | None) -> str:
    kind, facts, column = MACHINES[machine]
    simulate(kind, 1 if kind == "xpu" else 8, packages={**EVERYTHING, **packages}, **facts)
    return column


@pytest.fixture(scope="module")
def quantized_copies(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model with each checkpoint's quantization_config in its config.json (planning reads
    the config only; the weights stay the unquantized ones)."""
    made = {}
    for name, entry in CHECKPOINTS.items():
        if name.startswith("_"):
            continue
        folder = tmp_path_factory.mktemp(name)
        shutil.copytree(tiny_model, folder, dirs_exist_ok=True)
        config = json.loads((folder / "config.json").read_text())
        config["quantization_config"] = entry["quantization_config"]
        (folder / "config.json").write_text(json.dumps(config))
        made[name] = folder
    return made


@pytest.mark.parametrize("machine", list(MACHINES))
@pytest.mark.parametrize("request_", QUANTIZATIONS)
def test_each_request_on_each_simulated_device_is_planned_as_the_table_says(
        simulate: Callable[..., Any], tiny_model: Path, machine: str, request_: str) -> None:
    column = on(simulate, machine)
    kind = MACHINES[machine][0]
    method = request_method(request_, target(kind))
    found = cell(method, column)
    if found.runs == "no":
        with pytest.raises(PlanError, match=re.escape(f"quantization='{request_}': {method.title} does not run on "
                                                      f"{COLUMN[column].title} (") + ".*Instead"):
            intelrt.plan(tiny_model, quantization=request_)
        return
    plan = intelrt.plan(tiny_model, quantization=request_)
    decision = plan.decisions["quantization"]
    choice = decision.value
    assert decision.forced and decision.reason.startswith(f"requested by the user; {method.title} runs on "
                                                          f"{COLUMN[column].title} ({found.package} ")
    assert (choice.method, choice.requested, choice.source, choice.package, choice.extra) == (
        method.family, request_, "request", found.package, method.extra)
    assert decision.claim == {"xpu": "X9", "hpu": "H7"}[kind]
    assert plan.decided.dtype == (choice.dtype or "bfloat16")  # XPU and Gaudi default to bfloat16


@pytest.mark.parametrize("machine", ["arc", "max"])
@pytest.mark.parametrize("request_", ["int4", "int8", "int8-dynamic"])
def test_torchao_on_intel_gpus_builds_what_transformers_takes_and_decodes_on_the_fast_loop(
        simulate: Callable[..., Any], tiny_model: Path, machine: str, request_: str) -> None:
    pytest.importorskip("torchao")
    from transformers import TorchAoConfig

    from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs

    on(simulate, machine)
    plan = intelrt.plan(tiny_model, quantization=request_)
    config = from_pretrained_kwargs(plan)["quantization_config"]
    assert isinstance(config, TorchAoConfig)
    wanted = {"int4": "Int4WeightOnlyConfig", "int8": "Int8WeightOnlyConfig",
              "int8-dynamic": "Int8DynamicActivationInt8WeightConfig"}[request_]
    assert type(config.quant_type).__name__ == wanted
    if request_ == "int4":  # torchao's XPU layout (int4_plain_int32_tensor.py), grouped by what divides the tiny model
        assert str(config.quant_type.int4_packing_format).endswith("plain_int32")
        assert config.quant_type.group_size == plan.decided.quantization.group_size
    decode = plan.decisions["decode"]
    assert (decode.value.method, decode.value.step) == ("fast", "model") and "torchao" in decode.reason


@pytest.mark.parametrize("machine", ["arc", "max", "gaudi2"])
def test_bitsandbytes_8bit_stays_on_generate_and_4bit_on_intel_devices_too(simulate: Callable[..., Any],
                                                                          tiny_model: Path, machine: str) -> None:
    on(simulate, machine)
    for request_ in ("4bit", "8bit"):
        decode = intelrt.plan(tiny_model, quantization=request_).decisions["decode"]
        assert decode.value.method == "generate" and f"bitsandbytes {request_[0]}-bit weights" in decode.reason


@pytest.mark.parametrize("machine", ["arc", "max", "gaudi2", "gaudi3"])
@pytest.mark.parametrize("name", QUANTIZER_BUILDS)
def test_a_checkpoint_is_planned_unasked_in_the_dtype_transformers_quantizer_casts_to(
        simulate: Callable[..., Any], quantized_copies: dict[str, Path], machine: str, name: str) -> None:
    import torch
    from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING, AutoQuantizationConfig

    column = on(simulate, machine)
    config = CHECKPOINTS[name]["quantization_config"]
    key = "bitsandbytes_4bit" if config.get("load_in_4bit") else config["quant_method"]
    quantizer = AUTO_QUANTIZER_MAPPING[key](AutoQuantizationConfig.from_dict(config), pre_quantized=True)
    cast = str(quantizer.update_dtype(torch.bfloat16)).removeprefix("torch.")
    method = next(m for m in TABLE if m.checkpoint and m.family == {"bitsandbytes_4bit": "bitsandbytes",
                                                                   "auto-round": "auto-round"}.get(key, key)
                  and (m.family != "bitsandbytes" or m.bits == 4)
                  and (m.family != "torchao" or m.key == "torchao-int4"))
    found = cell(method, column)
    refused = found.runs == "no" or (name == "bnb_fp4" and column.startswith("gaudi")) or \
        (name == "torchao_int4" and column.startswith("xpu"))  # tinygemm's CUDA layout; the XPU's is plain_int32
    if refused:
        with pytest.raises(PlanError, match="Instead|NF4 checkpoints only|Quantize the unquantized checkpoint"):
            intelrt.plan(quantized_copies[name])
        return
    plan = intelrt.plan(quantized_copies[name])
    decision = plan.decisions["quantization"]
    assert not decision.forced and decision.reason.startswith("the checkpoint is quantized: ")
    assert decision.value.source == "checkpoint" and decision.value.requested is None and decision.claim == "T4"
    assert plan.decided.dtype == (found.dtype or cast), (name, machine)
    if plan.decided.dtype != "bfloat16":  # the method's cast replaces the backend's choice, saying so
        dtype = plan.decisions["dtype"]
        assert dtype.reason.startswith("quantization: the checkpoint is quantized: ") and "bfloat16 was chosen" in \
            dtype.reason


def test_awq_on_an_intel_gpu_refuses_a_forced_bfloat16_and_a_second_quantization(
        simulate: Callable[..., Any], quantized_copies: dict[str, Path]) -> None:
    on(simulate, "max")
    awq = quantized_copies["awq"]
    assert intelrt.plan(awq, dtype="float16").decided.dtype == "float16"
    with pytest.raises(PlanError, match=r"dtype='bfloat16', but the checkpoint is quantized: AWQ runs on Intel Data "
                                        r"Center GPU Max .*Pass dtype='float16'"):
        intelrt.plan(awq, dtype="bfloat16")
    with pytest.raises(PlanError, match=r"quantization='4bit' \(bitsandbytes 4-bit\) contradicts the checkpoint"):
        intelrt.plan(awq, quantization="4bit")


def test_a_missing_package_is_refused_naming_the_extra_on_a_simulated_device(
        simulate: Callable[..., Any], tiny_model: Path, quantized_copies: dict[str, Path]) -> None:
    on(simulate, "gaudi2", **{"neural-compressor-pt": None, "auto-round": None})
    with pytest.raises(PlanError, match=r"Intel Neural Compressor FP8 .*|neural-compressor-pt, which is not "
                                        r"installed: pip install 'intelrt\[inc\]'"):
        intelrt.plan(tiny_model, quantization="fp8")
    with pytest.raises(PlanError, match=r"auto-round, which is not installed: pip install 'intelrt\[autoround\]'"):
        intelrt.plan(quantized_copies["gptq"])  # GPTQ on Gaudi loads through auto-round's Gaudi kernels


def test_an_old_torch_refuses_bitsandbytes_on_intel_gpus(simulate: Callable[..., Any], tiny_model: Path) -> None:
    simulate("xpu", 1, torch_version="2.5.1+xpu", packages=EVERYTHING)
    with pytest.raises(PlanError, match=r"needs torch >= 2.6 .*this is torch 2.5.1"):
        intelrt.plan(tiny_model, quantization="4bit")


def test_fp8_on_gaudi_is_intel_neural_compressors_two_stages_as_quant_config_names_them(
        simulate: Callable[..., Any], tiny_model: Path, tmp_path: Path) -> None:
    """Optimum Habana (examples/text-generation utils.py setup_quantization) and vLLM-Gaudi read the
    stage from the JSON file QUANT_CONFIG names: MEASURE, then QUANTIZE with the statistics."""
    quantize = {"method": "HOOKS", "mode": "QUANTIZE", "observer": "maxabs", "scale_method": "maxabs_hw",
                "dump_stats_path": str(tmp_path / "stats" / "measure")}
    (tmp_path / "maxabs_quant.json").write_text(json.dumps(quantize))
    on(simulate, "gaudi3")
    first = intelrt.plan(tiny_model, quantization="fp8").decisions["quantization"]
    assert first.value.method == "inc" and first.value.details["stage"] == "measure"
    assert first.value.details["measure"]["mode"] == "MEASURE" and "lm_head" in str(first.value.details["measure"])
    assert any("INC stage measure" in n and "QUANT_CONFIG=DIR/inc_fp8_quantize.json" in n for n in first.notes)
    env = {**os.environ, "QUANT_CONFIG": str(tmp_path / "maxabs_quant.json")}  # the environment the plan is for
    quantized = make_plan(Request.build(tiny_model, quantization="fp8"), env=env).decided.quantization
    assert quantized.details["stage"] == "quantize" and quantized.details["quantize"] == quantize
    (tmp_path / "broken.json").write_text("{}")
    with pytest.raises(PlanError, match="\"mode\" is MEASURE or QUANTIZE"):
        make_plan(Request.build(tiny_model, quantization="fp8"), env={**env, "QUANT_CONFIG": str(tmp_path / "broken.json")})


def test_every_request_value_is_a_row_of_the_table() -> None:
    assert sorted({m.request for m in TABLE if m.request}) == sorted(QUANTIZATIONS)


@pytest.mark.parametrize("machine, request_, kernel", [
    ("max", "int4", "aten._weight_int4pack_mm_with_scales_and_zeros"),
    ("arc", "autoround", "ark (auto_round_kernel_xpu"),
    ("gaudi3", "fp8", "INC's PatchedLinear"),
])
def test_the_decode_decision_names_the_kernel_of_the_quantized_projections(
        simulate: Callable[..., Any], tiny_model: Path, machine: str, request_: str, kernel: str) -> None:
    """Issue 42: the kernel each backend runs a quantized projection with is a fact of the plan,
    named in the decode decision's reason (Intel GPUs and Gaudi step through the model's own forward)."""
    column = on(simulate, machine)
    plan = intelrt.plan(tiny_model, quantization=request_)
    method = request_method(request_, target(MACHINES[machine][0]))
    found = cell(method, column)
    assert kernel in str(found.kernel)
    assert plan.decisions["quantization"].value.details["kernel"] == found.kernel
    assert f"the kernel: {found.kernel}" in plan.decisions["decode"].reason


@pytest.mark.claim("X9")
@pytest.mark.parametrize("machine", ["arc", "max"])
def test_X9_an_aqlm_checkpoint_and_a_gguf_file_are_planned_on_a_simulated_intel_gpu(
        simulate: Callable[..., Any], tiny_model: Path, quantized_copies: dict[str, Path], machine: str) -> None:
    """The two methods of the overview's Intel GPU column intelrt did not plan: an AQLM checkpoint was
    refused ("intelrt does not plan"), a GGUF file (from_pretrained(gguf_file=...)) went unnoticed."""
    on(simulate, machine, aqlm="1.1.7")
    aqlm = intelrt.plan(quantized_copies["aqlm"]).decisions["quantization"]
    assert (aqlm.value.method, aqlm.value.bits, aqlm.value.source, aqlm.claim) == ("aqlm", 2, "checkpoint", "T4")
    assert aqlm.reason.startswith("the checkpoint is quantized: AQLM (additive quantization) runs on Intel")
    gguf = intelrt.plan(tiny_model, gguf_file="tiny.Q4_K_M.gguf").decisions["quantization"]
    assert (gguf.value.method, gguf.value.dequantized, gguf.value.trainable) == ("gguf", False, False)
    assert "ggml-org/ggml-quantization" in " ".join(gguf.notes)
