"""H7: the Gaudi columns of intelrt's quantization table (Gaudi 1, 2, 3), one cell per method
(``intelrt.quantization.methods.TABLE``'s rows).

Sources: SPEC H7 and Intel's Gaudi documentation (FP8 and bitsandbytes from Gaudi 2), bitsandbytes
0.50 ``backends/hpu``, auto-round 0.16 (``inference/backend.py`` ``BackendInfos['hpu']``), Intel
Neural Compressor's FP8 flow as Optimum Habana runs it (``examples/text-generation/utils.py``
``setup_quantization``) and vllm-gaudi, and each quantizer's ``validate_environment`` in
transformers 5.24 (what it does on "an accelerator other than cuda/xpu/cpu"). On Gaudi,
``quantization="fp8"`` is Intel Neural Compressor's FP8 (``Column.requests``).
"""

from __future__ import annotations

from dataclasses import replace

from intelrt.plugin import Cell, Column, QuantizationColumns, core_cell

Q = "transformers 5.24 quantizers/"
COLUMNS = tuple(Column(key, "hpu", key, title, claim="H7", requests={"fp8": "inc-fp8"})
                for key, title in (("gaudi1", "Gaudi 1"), ("gaudi2", "Gaudi 2"), ("gaudi3", "Gaudi 3")))
LATER = ("gaudi2", "gaudi3")
"""Gaudi 2 and 3 run what the first generation does not (FP8, bitsandbytes)."""

FIRST = Cell("no", "SPEC H7; Intel Gaudi docs: FP8 and bitsandbytes from Gaudi 2",
             note="first-generation Gaudi runs none of the quantized kernels (no FP8 hardware; bitsandbytes' HPU "
                  "backend needs Gaudi 2 or 3)")
NO_TORCHAO = Cell("no", "torchao 0.18 tensor subclasses: kernels for cpu, cuda, xpu (and npu) only",
                  note="torchao has no Gaudi kernels; Habana documents bitsandbytes, Intel Neural Compressor and "
                       "AutoRound for Gaudi")
BNB_SOURCE = ("SPEC H7; bitsandbytes 0.50 backends/hpu (registers the NF4 4-bit dequantize only); "
              f"{Q}quantizer_bnb_4bit.py update_device_map (places on the current Gaudi)")
BNB = Cell("yes", BNB_SOURCE, package="bitsandbytes", floor=core_cell("bitsandbytes-4bit", "cuda").floor,
           note="bitsandbytes' HPU backend registers only the NF4 4-bit dequantize kernel (quant_type 'nf4', uint8 "
                "or bfloat16 storage; FP4 is refused there); the other bitsandbytes ops run on its generic torch "
                "kernels")
_AR_SOURCE = (f"{Q}quantizer_auto_round.py (pre-quantized only; auto_round.inference.convert_model); "
              "auto-round 0.16 inference/backend.py BackendInfos")
AUTOROUND = Cell("yes", _AR_SOURCE + ' ("hpu": 4-bit, bfloat16)', package="auto-round",
                 floor=core_cell("autoround", "cuda").floor, dtype="bfloat16", compute_dtypes=("bfloat16",),
                 kernel="auto-round's hpu QuantLinear (4-bit weights, bfloat16 matmuls)",
                 note="auto-round's Gaudi kernels take 4-bit weights and compute in bfloat16 (auto-round-hpu builds "
                      "them for Gaudi)")
INC = Cell("yes", "Optimum Habana examples/text-generation utils.py setup_quantization (FP8Config.from_json_file, "
           "prepare → calibrate → finalize_calibration, then convert) and quantization_config/maxabs_*.json; "
           "vllm-gaudi hpu_model_runner _is_quant_with_inc (QUANT_CONFIG)", package="neural-compressor-pt",
           floor="3.2", dtype="bfloat16", kernel="INC's PatchedLinear (neural_compressor/torch/algorithms/fp8_quant/"
           "_quant_common/helper_modules.py): FP8 weights and activations with the measured scales, the matmul "
           "Gaudi's FP8 GEMM (torch.ops.hpu.fp8_gemm_v2); the model's own forward runs it",
           note="two runs: the first measures activation ranges, the second quantizes "
           "with them (Intel Neural Compressor's measure → quantize flow)")
_VIA_AUTOROUND = ("transformers converts a GPTQ v1 / AWQ gemm checkpoint to auto-round's loader when given an "
                  "AutoRoundConfig (quantizers/auto.py merge_quantization_configs; AutoRoundConfig.from_dict)")
_FP8_DEQUANTIZED = "transformers dequantizes the FP8 weights to the model dtype at load time: it runs with no memory saved"


def _later(cell: Cell, first: Cell = FIRST) -> dict[str, Cell]:
    """``cell`` on Gaudi 2 and 3, ``first`` on the first generation."""
    return {"gaudi1": first, **{key: cell for key in LATER}}


def _all(cell: Cell) -> dict[str, Cell]:
    return {c.key: cell for c in COLUMNS}


CELLS: dict[str, dict[str, Cell]] = {
    "bitsandbytes-4bit": _later(replace(BNB, checkpoint_schemes=("nf4",))),
    "bitsandbytes-8bit": _later(BNB),
    "torchao-int4": _all(NO_TORCHAO),
    "torchao-int8": _all(NO_TORCHAO),
    "torchao-int8-dynamic": _all(NO_TORCHAO),
    "torchao-float8": _later(Cell("no", NO_TORCHAO.source, note="on Gaudi, FP8 is Intel Neural Compressor's")),
    "autoround": _later(AUTOROUND),
    "inc-fp8": _later(INC),
    "gptq": _later(Cell("yes", f"{_VIA_AUTOROUND}; auto-round inference/backend.py BackendInfos['hpu'] (4-bit)",
                        package="auto-round", floor=AUTOROUND.floor, dtype="bfloat16", details={"loader": "auto-round"},
                        kernel=AUTOROUND.kernel, note="gptqmodel has no Gaudi kernels: auto-round's Gaudi backend "
                                                      "loads the GPTQ weights (4-bit, symmetric v1 format)")),
    "awq": _later(Cell("yes", f"{_VIA_AUTOROUND}; auto-round inference/backend.py BackendInfos['hpu_zp']",
                       package="auto-round", floor=AUTOROUND.floor, dtype="bfloat16", details={"loader": "auto-round"},
                       kernel=AUTOROUND.kernel,
                       note="gptqmodel has no Gaudi kernels: auto-round's Gaudi backend loads the AWQ (gemm) weights")),
    "compressed-tensors": _later(Cell("no", "no compressed-tensors path on Gaudi is documented by transformers or "
                                            "Habana",
                                      note="vLLM-Gaudi serves compressed-tensors checkpoints with its own kernels")),
    "fbgemm-fp8": _all(Cell("no", f"{Q}quantizer_fbgemm_fp8.py validate_environment",
                            note="FBGEMM FP8 needs a CUDA GPU or an Intel GPU; on Gaudi, FP8 is Intel Neural "
                                 "Compressor's")),
    "fp8": _later(Cell("dequantized", f"{Q}quantizer_finegrained_fp8.py validate_environment (no CUDA or XPU: "
                       "dequantize=True)", note=_FP8_DEQUANTIZED + "; FP8 on Gaudi: quantization='fp8' (Intel Neural "
                       "Compressor) on the unquantized checkpoint")),
    "mxfp4": _later(Cell("dequantized", f"{Q}quantizer_mxfp4.py validate_environment (an accelerator other than "
                         "cuda/xpu/cpu: dequantize=True)", dtype="bfloat16",
                         note="transformers dequantizes MXFP4 to bfloat16 on Gaudi: it runs with no memory saved")),
    "hqq": _all(Cell("no", "no HQQ path on Gaudi is documented",
                     note="HQQ's kernels target CPU, CUDA and Intel GPUs")),
    "quanto": _all(Cell("no", "no optimum-quanto path on Gaudi is documented",
                        note="optimum-quanto targets CPU, CUDA, MPS and Intel GPUs")),
    "aqlm": _all(Cell("no", "no AQLM path on Gaudi is documented",
                      note="transformers docs/source/en/quantization/overview.md lists AQLM for CPU, CUDA and Intel "
                           "GPUs")),
    "gguf": _all(Cell("dequantized", f"{Q}quantizer_gguf.py validate_environment: the weights stay in GGUF blocks with "
                      "the hub kernel ggml-org/ggml-quantization, else the whole model is dequantized at load (no kernel "
                      "for Gaudi: the kernels package knows no hpu)",
                      note="transformers unpacks every GGUF weight at load on Gaudi: it runs with no memory saved")),
}

HPU_QUANTIZATION = QuantizationColumns(COLUMNS, CELLS, default="gaudi2")
"""``HpuBackend.quantization_columns`` (a Gaudi of unknown generation is planned as a Gaudi 2)."""
