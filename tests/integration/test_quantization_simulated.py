"""The quantization plan on simulated Intel GPUs (Arc, Max) and Gaudis (2, 3), checked against
transformers' own quantizers run unmodified on the same simulated machine (issue 29): where the
plan says float16, dequantized or refused, the quantizer does the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from intelrt.errors import PlanError
from intelrt.quantization import Target, decide, read_checkpoint_quantization

CHECKPOINTS = json.loads((Path(__file__).parents[1] / "data" / "quantization_checkpoints.json").read_text())
#: gptqmodel (AWQ's kernels) is not installed here: the plan is asked as if it were; the simulated
#: machine still says which device it is.
WITH_GPTQMODEL = {"gptqmodel": "5.6.0", "optimum": "2.0.0"}
MACHINES = {"arc": ("xpu", {"product": "arc-a770"}), "max": ("xpu", {"product": "max1550"}),
            "gaudi2": ("hpu", {"generation": "gaudi2"}), "gaudi3": ("hpu", {"generation": "gaudi3"})}


def checkpoint(name: str) -> Any:
    return read_checkpoint_quantization({"quantization_config": CHECKPOINTS[name]["quantization_config"]})


def target_on(simulate: Callable[..., Any], machine: str, **packages: str | None) -> Target:
    from intelrt.planning.detection import detect

    kind, facts = MACHINES[machine]
    simulate(kind, **facts)
    chosen = detect(kind).chosen
    return Target.from_backend(chosen, packages={**_installed(), **packages} if packages else None)


def _installed() -> dict[str, str | None]:
    from intelrt.support.versions import package_version

    return {name: package_version(name, module) for name, module in
            (("torchao", None), ("bitsandbytes", None), ("auto-round", "auto_round"), ("kernels", None),
             ("triton", None), ("neural-compressor-pt", "neural_compressor"), ("compressed-tensors", None))}


@pytest.mark.parametrize("machine, variant", [("arc", "arc"), ("max", "max"), ("gaudi2", "gaudi2"),
                                              ("gaudi3", "gaudi3")])
def test_the_target_is_read_from_the_detected_backend(simulate: Callable[..., Any], machine: str,
                                                      variant: str) -> None:
    target = target_on(simulate, machine)
    assert (target.kind, target.variant) == (MACHINES[machine][0], variant)


@pytest.mark.parametrize("machine", list(MACHINES))
def test_awq_dtype_is_what_transformers_awq_quantizer_casts_to(simulate: Callable[..., Any], machine: str) -> None:
    import torch
    from transformers.quantizers.quantizer_awq import AwqQuantizer
    from transformers.utils.quantization_config import AwqConfig

    target = target_on(simulate, machine, **WITH_GPTQMODEL, **{"auto-round": "0.16.1"})
    plan = decide(None, checkpoint("awq"), target)
    cast = AwqQuantizer(AwqConfig(bits=4)).update_dtype(torch.bfloat16)
    assert plan.choice is not None
    assert (plan.choice.dtype or "bfloat16") == str(cast).removeprefix("torch.")


@pytest.mark.parametrize("machine", list(MACHINES))
def test_fp8_and_mxfp4_are_dequantized_exactly_where_transformers_dequantizes_them(simulate: Callable[..., Any],
                                                                                 machine: str) -> None:
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    from transformers.quantizers.quantizer_mxfp4 import Mxfp4HfQuantizer
    from transformers.utils.quantization_config import FineGrainedFP8Config, Mxfp4Config

    target = target_on(simulate, machine)
    for name, quantizer in (("finegrained_fp8", FineGrainedFP8HfQuantizer(FineGrainedFP8Config(), pre_quantized=True)),
                            ("mxfp4", Mxfp4HfQuantizer(Mxfp4Config(), pre_quantized=True))):
        quantizer.validate_environment(device_map=None)
        try:
            plan = decide(None, checkpoint(name), target)
        except PlanError as refused:
            # kernels 0.17 here: fine-grained FP8's matmul is a hub kernel that needs kernels >= 0.18.2
            # (integrations/finegrained_fp8.py raises at the first matmul); the plan says so at once
            assert name == "finegrained_fp8" and not quantizer.quantization_config.dequantize
            assert "kernels >= 0.18.2" in str(refused)
            continue
        assert plan.choice is not None and plan.choice.dequantized == quantizer.quantization_config.dequantize, name


@pytest.mark.parametrize("machine", list(MACHINES))
def test_fbgemm_fp8_is_refused_where_transformers_refuses_it(simulate: Callable[..., Any], machine: str) -> None:
    from transformers.quantizers.quantizer_fbgemm_fp8 import FbgemmFp8HfQuantizer
    from transformers.utils.quantization_config import FbgemmFp8Config

    target = target_on(simulate, machine)  # kernels 0.17 here: below transformers' floor (0.18.2)
    with pytest.raises(PlanError) as refused:
        decide(None, checkpoint("fbgemm_fp8"), target)
    with pytest.raises(ImportError):
        FbgemmFp8HfQuantizer(FbgemmFp8Config(), pre_quantized=True).validate_environment(device_map=None)
    assert ("kernels" in str(refused.value)) == (MACHINES[machine][0] == "xpu")


def test_on_a_simulated_gaudi_fp8_is_intel_neural_compressors_flow(simulate: Callable[..., Any]) -> None:
    target = target_on(simulate, "gaudi2", **{"neural-compressor-pt": "3.10"})
    plan = decide("fp8", None, target)
    assert plan.choice is not None and plan.choice.method == "inc" and plan.claim == "H7"
    assert plan.choice.details["flow"] == "measure-then-quantize"
    with pytest.raises(PlanError, match=r"not installed: pip install 'intelrt\[inc\]'"):
        decide("fp8", None, replace(target, packages={**_installed(), "neural-compressor-pt": None}))


@pytest.mark.parametrize("machine", ["arc", "max"])
def test_on_simulated_intel_gpus_int4_is_torchaos_xpu_layout(simulate: Callable[..., Any], machine: str) -> None:
    pytest.importorskip("torchao")
    plan = decide("int4", None, target_on(simulate, machine), in_features=(4096, 11008))
    assert plan.choice is not None and plan.claim == "X9"
    assert plan.choice.details["int4_packing_format"] == "plain_int32"
