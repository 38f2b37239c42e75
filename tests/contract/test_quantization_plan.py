"""Quantization planning (issue 29): pre-quantized checkpoints read and decided per backend, the
on-the-fly methods of ``quantization=``, and every refusal saying the way out. Pure: no model is
loaded; the checkpoints are the ``quantization_config`` blocks of real hub models
(tests/data/quantization_checkpoints.json). Where the plan follows a transformers quantizer, the
quantizer itself runs on the simulated device and must agree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from intelrt.errors import PlanError
from intelrt.quantization import REQUESTS, Target, decide, read_checkpoint_quantization
from intelrt.quantization.methods import COLUMNS, TABLE

COLUMNS_BY_KIND = {"cpu": "CPU", "h200": "CUDA", "a100": "CUDA", "arc": "Intel Arc / client GPU",
                   "max": "Intel Data Center GPU Max", "gaudi1": "Gaudi 1", "gaudi2": "Gaudi 2", "gaudi3": "Gaudi 3"}
CHECKPOINTS = json.loads((Path(__file__).parents[1] / "data" / "quantization_checkpoints.json").read_text())
EVERYTHING = {"torchao": "0.18.0", "bitsandbytes": "0.50.2", "auto-round": "0.16.1", "neural-compressor-pt": "3.10",
              "gptqmodel": "5.6.0", "optimum": "2.0.0", "compressed-tensors": "0.20.1", "hqq": "0.2.8",
              "kernels": "0.18.2", "triton": "3.6.0", "fbgemm-gpu": "1.4.0", "optimum-quanto": "0.2.7"}
TARGETS = {"cpu": Target("cpu", packages=EVERYTHING), "h200": Target("cuda", capability=(9, 0), packages=EVERYTHING),
           "a100": Target("cuda", capability=(8, 0), packages=EVERYTHING),
           "arc": Target("xpu", "arc", packages=EVERYTHING), "max": Target("xpu", "max", packages=EVERYTHING),
           "gaudi1": Target("hpu", "gaudi1", packages=EVERYTHING), "gaudi2": Target("hpu", "gaudi2", packages=EVERYTHING),
           "gaudi3": Target("hpu", "gaudi3", packages=EVERYTHING)}


def checkpoint(name: str) -> Any:
    return read_checkpoint_quantization({"model_type": "llama", "quantization_config": CHECKPOINTS[name]["quantization_config"]})


@pytest.mark.parametrize("name, method, bits, group, packing", [
    ("awq", "awq", 4, 128, "gemm"), ("gptq", "gptq", 4, 128, "gptq"),
    ("autoround", "auto-round", 4, 128, "auto_round:auto_gptq"),
    ("compressed_tensors_w4a16", "compressed-tensors", 4, 128, "pack-quantized"),
    ("compressed_tensors_fp8", "compressed-tensors", 8, None, "float-quantized"),
    ("torchao_int4", "torchao", 4, 128, "tile_packed_to_4d"), ("fbgemm_fp8", "fbgemm_fp8", 8, None, None),
    ("finegrained_fp8", "fp8", 8, None, None), ("mxfp4", "mxfp4", 4, None, None), ("hqq", "hqq", 4, 64, None),
    ("bnb_nf4", "bitsandbytes_4bit", 4, None, None),
])
def test_a_checkpoints_quantization_is_read_from_its_config(name: str, method: str, bits: int, group: int | None,
                                                            packing: str | None) -> None:
    found = checkpoint(name)
    assert (found.method, found.bits, found.group_size, found.packing) == (method, bits, group, packing)
    assert found.seen_by_transformers and found.where == "config.json quantization_config"


def test_the_reader_follows_transformers_to_the_text_config_and_reports_separate_files(tmp_path: Path) -> None:
    nested = read_checkpoint_quantization({"model_type": "llava", "text_config": {
        "quantization_config": CHECKPOINTS["awq"]["quantization_config"]}})
    assert nested is not None and nested.method == "awq" and "text_config" in nested.where
    assert read_checkpoint_quantization({"model_type": "llama"}, tmp_path) is None
    (tmp_path / "quantization_config.json").write_text(json.dumps(CHECKPOINTS["autoround"]["quantization_config"]))
    separate = read_checkpoint_quantization({"model_type": "llama"}, tmp_path)
    assert separate is not None and not separate.seen_by_transformers
    with pytest.raises(PlanError, match="transformers does not read.*config.json"):
        decide(None, separate, TARGETS["cpu"])


def test_awq_is_planned_in_float16_where_transformers_casts_it() -> None:
    awq = checkpoint("awq")
    plans = {name: decide(None, awq, TARGETS[name]) for name in ("cpu", "h200", "arc", "max")}
    assert {n: p.choice.dtype for n, p in plans.items() if p.choice} == {"cpu": None, "h200": "float16",
                                                                          "arc": "float16", "max": "float16"}
    assert all(p.choice and p.choice.pre_quantized and p.choice.package == "gptqmodel" for p in plans.values())
    assert plans["arc"].claim == "T4"


def test_awq_and_gptq_on_gaudi_load_through_auto_round_or_say_which_extra() -> None:
    for name in ("awq", "gptq"):
        plan = decide(None, checkpoint(name), TARGETS["gaudi2"])
        assert plan.choice and plan.choice.details["loader"] == "auto-round" and plan.choice.dtype == "bfloat16"
        without = Target("hpu", "gaudi3", packages={**EVERYTHING, "auto-round": None})
        with pytest.raises(PlanError, match=r"auto-round, which is not installed: pip install 'intelrt\[autoround\]'"):
            decide(None, checkpoint(name), without)


def test_a_request_contradicting_the_checkpoint_is_refused_and_a_matching_one_is_noted() -> None:
    with pytest.raises(PlanError, match="contradicts the checkpoint.*awq.*drop quantization="):
        decide("4bit", checkpoint("awq"), TARGETS["arc"])
    with pytest.raises(PlanError, match="contradicts the checkpoint"):
        decide("int8", checkpoint("torchao_int4"), TARGETS["h200"])
    same = decide("4bit", checkpoint("bnb_nf4"), TARGETS["max"])
    assert same.choice and same.choice.source == "checkpoint" and any("own quantization" in n for n in same.notes)


def test_fp8_checkpoints_dequantize_where_transformers_dequantizes_them() -> None:
    fine = checkpoint("finegrained_fp8")
    assert decide(None, fine, TARGETS["max"]).choice.dequantized is False  # type: ignore[union-attr]
    for name in ("cpu", "gaudi2", "gaudi3"):
        plan = decide(None, fine, TARGETS[name])
        assert plan.choice and plan.choice.dequantized and "no memory saved" in " ".join(plan.notes)
    with pytest.raises(PlanError, match="compute capability >= 8.9.*this one is 8.0"):
        decide("fp8", None, TARGETS["a100"])
    with pytest.raises(PlanError, match=r"FBGEMM FP8 does not run on Gaudi 2.*quantization='fp8' \(Intel Neural"):
        decide(None, checkpoint("fbgemm_fp8"), TARGETS["gaudi2"])


def test_bitsandbytes_fp4_checkpoints_are_refused_on_gaudi_and_nf4_runs() -> None:
    with pytest.raises(PlanError, match="NF4 only.*fp4"):
        decide(None, checkpoint("bnb_fp4"), TARGETS["gaudi2"])
    plan = decide(None, checkpoint("bnb_nf4"), TARGETS["gaudi2"])
    assert plan.choice and (plan.choice.quant_type, plan.choice.compute_dtype) == ("nf4", "bfloat16")
    with pytest.raises(PlanError, match="Gaudi 1"):
        decide("4bit", None, TARGETS["gaudi1"])


def test_a_torchao_int4_checkpoint_runs_only_where_its_layout_does() -> None:
    int4 = checkpoint("torchao_int4")  # tinygemm's tile_packed_to_4d, made on CUDA
    assert decide(None, int4, TARGETS["h200"]).choice is not None
    with pytest.raises(PlanError, match="tile_packed_to_4d.*plain_int32.*quantization='int4'"):
        decide(None, int4, TARGETS["arc"])


@pytest.mark.parametrize("request_", REQUESTS)
@pytest.mark.parametrize("target", list(TARGETS))
def test_every_request_on_every_backend_is_planned_or_refused_with_the_way_out(request_: str, target: str) -> None:
    try:
        plan = decide(request_, None, TARGETS[target], in_features=(4096, 14336))
    except PlanError as refused:
        assert "Instead" in str(refused) or "compute capability" in str(refused)
        return
    assert plan.choice is not None and plan.choice.source == "request" and plan.choice.requested == request_
    assert f" on {COLUMNS_BY_KIND[target]}" in plan.reason
    assert plan.choice.package and plan.choice.extra and plan.choice.extra.startswith("intelrt[")


def test_on_the_fly_fp8_is_inc_on_gaudi_and_torchao_on_cuda() -> None:
    gaudi = decide("fp8", None, TARGETS["gaudi3"]).choice
    assert gaudi and gaudi.method == "inc" and gaudi.details["measure"]["mode"] == "MEASURE"  # type: ignore[index]
    assert gaudi.details["quantize"]["scale_method"] == "maxabs_hw"  # type: ignore[index]
    cuda = decide("fp8", None, TARGETS["h200"]).choice
    assert cuda and cuda.method == "torchao" and cuda.details["config"] == "Float8DynamicActivationFloat8WeightConfig"


def test_a_missing_library_names_the_extra_that_installs_it() -> None:
    bare = {name: None for name in EVERYTHING}
    for request_, extra in (("int4", "intelrt[torchao]"), ("autoround", "intelrt[autoround]"),
                            ("4bit", "intelrt[bitsandbytes]")):
        with pytest.raises(PlanError, match="not installed: pip install '" + re.escape(extra) + "'"):
            decide(request_, None, Target("cpu", packages=bare))
    with pytest.raises(PlanError, match=r"intelrt\[inc\]"):
        decide("fp8", None, Target("hpu", "gaudi2", packages=bare))
    with pytest.raises(PlanError, match="gptqmodel, which is not installed: pip install 'gptqmodel>=1.4.3'"):
        decide(None, checkpoint("gptq"), Target("xpu", "max", packages=bare))


def test_int4_groups_by_what_divides_every_projection() -> None:
    assert decide("int4", None, TARGETS["max"], in_features=(4096, 14336)).choice.group_size == 128  # type: ignore[union-attr]
    assert decide("int4", None, TARGETS["max"], in_features=(64, 192)).choice.group_size == 64  # type: ignore[union-attr]
    with pytest.raises(PlanError, match="quantization='int8'"):
        decide("int4", None, TARGETS["max"], in_features=(100,))


def test_every_cell_of_the_table_has_a_source() -> None:
    for method in TABLE:
        assert set(method.cells) == {c.key for c in COLUMNS}, method.key
        for column, cell in method.cells.items():
            assert cell.source.strip(), (method.key, column)
            if cell.runs == "no":
                assert cell.note, (method.key, column)
