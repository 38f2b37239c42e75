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
from intelrt.quantization.methods import (
    CPU_QUANTIZATION,
    CUDA_QUANTIZATION,
    TABLE,
    checkpoint_method,
)
from intelrt_hpu.quantization import HPU_QUANTIZATION
from intelrt_xpu.quantization import XPU_QUANTIZATION

#: The backends' columns, as each backend class declares them (Backend.quantization_columns).
OWN = {"cpu": CPU_QUANTIZATION, "cuda": CUDA_QUANTIZATION, "xpu": XPU_QUANTIZATION, "hpu": HPU_QUANTIZATION}


def target(kind: str, variant: str | None = None, **facts: Any) -> Target:
    """The target of a ``kind`` backend, with that backend's quantization columns."""
    return Target(kind, variant, columns=OWN[kind], **facts)


COLUMNS_BY_KIND = {"cpu": "CPU", "h200": "CUDA", "a100": "CUDA", "arc": "Intel Arc / client GPU",
                   "max": "Intel Data Center GPU Max", "gaudi1": "Gaudi 1", "gaudi2": "Gaudi 2", "gaudi3": "Gaudi 3"}
CHECKPOINTS = json.loads((Path(__file__).parents[1] / "data" / "quantization_checkpoints.json").read_text())
EVERYTHING = {"torchao": "0.18.0", "bitsandbytes": "0.50.2", "auto-round": "0.16.1", "neural-compressor-pt": "3.10",
              "gptqmodel": "5.6.0", "optimum": "2.0.0", "compressed-tensors": "0.20.1", "hqq": "0.2.8",
              "kernels": "0.18.2", "triton": "3.6.0", "fbgemm-gpu": "1.4.0", "optimum-quanto": "0.2.7"}
TARGETS = {"cpu": target("cpu", packages=EVERYTHING), "h200": target("cuda", capability=(9, 0), packages=EVERYTHING),
           "a100": target("cuda", capability=(8, 0), packages=EVERYTHING),
           "arc": target("xpu", "arc", packages=EVERYTHING), "max": target("xpu", "max", packages=EVERYTHING),
           "gaudi1": target("hpu", "gaudi1", packages=EVERYTHING), "gaudi2": target("hpu", "gaudi2", packages=EVERYTHING),
           "gaudi3": target("hpu", "gaudi3", packages=EVERYTHING)}


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
        without = target("hpu", "gaudi3", packages={**EVERYTHING, "auto-round": None})
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
    with pytest.raises(PlanError, match="runs NF4 checkpoints only, and this checkpoint is fp4"):
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
            decide(request_, None, target("cpu", packages=bare))
    with pytest.raises(PlanError, match=r"intelrt\[inc\]"):
        decide("fp8", None, target("hpu", "gaudi2", packages=bare))
    with pytest.raises(PlanError, match="gptqmodel, which is not installed: pip install 'gptqmodel>=1.4.3'"):
        decide(None, checkpoint("gptq"), target("xpu", "max", packages=bare))


def test_int4_groups_by_what_divides_every_projection() -> None:
    assert decide("int4", None, TARGETS["max"], in_features=(4096, 14336)).choice.group_size == 128  # type: ignore[union-attr]
    assert decide("int4", None, TARGETS["max"], in_features=(64, 192)).choice.group_size == 64  # type: ignore[union-attr]
    with pytest.raises(PlanError, match="quantization='int8'"):
        decide("int4", None, TARGETS["max"], in_features=(100,))


def test_every_cell_of_the_table_has_a_source() -> None:
    for method in TABLE:
        cells = {c.key: columns.cell(method.key, c.key) for columns in OWN.values() for c in columns.columns}
        assert None not in cells.values(), (method.key, [k for k, v in cells.items() if v is None])
        for column, cell in cells.items():
            assert cell is not None
            assert cell.source.strip(), (method.key, column)
            if cell.runs == "no":
                assert cell.note, (method.key, column)


def test_X9_aqlm_and_gguf_are_planned_on_intel_gpus_as_the_overview_marks_them() -> None:
    """transformers' quantization overview marks AQLM and GGUF as running on Intel GPUs; an AQLM
    checkpoint used to get "intelrt does not plan", and GGUF (from_pretrained(gguf_file=...)) was not known."""
    from transformers import AqlmConfig

    saved = json.loads(AqlmConfig().to_json_string())  # what save_pretrained writes into config.json
    aqlm = read_checkpoint_quantization({"model_type": "llama", "quantization_config": saved})
    assert aqlm is not None and (checkpoint_method(aqlm).family, aqlm.bits, aqlm.scheme) == ("aqlm", 2, "1x16")  # 16-bit codes per 8
    installed = {**EVERYTHING, "aqlm": "1.1.7"}
    for variant in ("arc", "max"):
        plan = decide(None, aqlm, target("xpu", variant, packages=installed))
        assert plan.choice and (plan.choice.method, plan.choice.pre_quantized, plan.choice.trainable) == \
            ("aqlm", True, True)
    with pytest.raises(PlanError, match=r"uses aqlm, which is not installed: pip install 'aqlm'"):
        decide(None, aqlm, TARGETS["max"])
    with pytest.raises(PlanError, match=r"AQLM \(additive quantization\) does not run on Gaudi 2"):
        decide(None, aqlm, target("hpu", "gaudi2", packages=installed))
    gguf = read_checkpoint_quantization({"model_type": "llama"}, gguf_file="qwen3-0.6b-q4_k_m.gguf")
    assert gguf is not None and checkpoint_method(gguf).family == "gguf"
    packed = decide(None, gguf, TARGETS["arc"])
    assert packed.choice and packed.choice.method == "gguf" and not packed.choice.dequantized
    unpacked = decide(None, gguf, target("xpu", "max", packages={**EVERYTHING, "kernels": None}))
    assert unpacked.choice and unpacked.choice.dequantized and "no memory saved" in " ".join(unpacked.notes)
    assert decide(None, gguf, TARGETS["gaudi2"]).choice.dequantized  # type: ignore[union-attr]
    with pytest.raises(PlanError, match="contradicts the checkpoint"):
        decide("4bit", gguf, TARGETS["max"])
