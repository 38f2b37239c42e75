"""X9: the Intel GPU columns of intelrt's quantization table (Intel Arc / client GPUs and the Data
Center GPU Max), one cell per method (``intelrt.quantization.methods.TABLE``'s rows).

Sources: each quantizer's ``validate_environment`` in transformers 5.24, the Intel GPU column of
transformers' quantization overview (``docs/source/en/quantization/overview.md``), torchao 0.18,
auto-round 0.16 (``inference/backend.py`` ``BackendInfos``) and the bitsandbytes 0.47 release notes.
Where the overview and a quantizer disagree, the quantizer (the code that runs) decides and the
cell says so. A cell the same as on CUDA (or the CPU) is that cell (``core_cell``).
"""

from __future__ import annotations

from dataclasses import replace

from intelrt.plugin import Cell, Column, QuantizationColumns, core_cell

OVERVIEW = "transformers docs/source/en/quantization/overview.md"
Q = "transformers 5.24 quantizers/"
COLUMNS = (Column("xpu-arc", "xpu", "arc", "Intel Arc / client GPU", claim="X9"),
           Column("xpu-max", "xpu", "max", "Intel Data Center GPU Max", claim="X9"))

_BNB = Cell("yes", f"SPEC X9; {OVERVIEW} Intel GPU column (bitsandbytes); bitsandbytes 0.47 release notes (Intel "
            "GPU support, torch >= 2.6)", package="bitsandbytes", floor="0.47", torch_floor="2.6",
            note="bitsandbytes runs on Intel GPUs from 0.47 with torch >= 2.6")
_INT4 = Cell("yes", "torchao docs quick start (XPU: plain_int32); torchao 0.18 int4_plain_int32_tensor.py "
             "_from_hp_xpu / _linear_xpu (aten._weight_int4pack_mm_with_scales_and_zeros)",
             package="torchao", floor=core_cell("torchao-int4", "cuda").floor,
             kernel="aten._weight_int4pack_mm_with_scales_and_zeros, torch's XPU kernel (torchao 0.18 "
                    "quantization/quantize_/workflows/int4/int4_plain_int32_tensor.py)",
             details={"config": "Int4WeightOnlyConfig", "int4_packing_format": "plain_int32"})
_CT = core_cell("compressed-tensors", "cuda")
_GGUF = core_cell("gguf", "cuda")
_KERNELS = core_cell("fp8", "cuda")  # the hub-kernel package and floor the FP8 kernels need

CELLS: dict[str, Cell] = {
    "bitsandbytes-4bit": _BNB,
    "bitsandbytes-8bit": _BNB,
    "torchao-int4": _INT4,
    "torchao-int8": core_cell("torchao-int8", "cuda"),
    "torchao-int8-dynamic": replace(core_cell("torchao-int8-dynamic", "cuda"),
                                    note="the int8 matmul is torch._int_mm on the XPU (torch >= 2.7)"),
    "torchao-float8": Cell("no", "no torchao float8 path for Intel GPUs is documented",
                           note="FP8 on an Intel GPU: load an FP8 checkpoint (fine-grained FP8 runs there)"),
    "autoround": replace(core_cell("autoround", "cuda"), kernel=(
        "auto-round's QuantLinear of the backend auto-round picks by priority among those installed (inference/"
        "backend.py get_layer_backend): auto_round:torch anywhere, ark (auto_round_kernel_xpu, priority 6: Intel's XPU "
        "kernels) where auto-round-lib is installed; each layer runs its own kernel in the compact step")),
    "inc-fp8": Cell("no", "neural_compressor.torch.algorithms.fp8_quant runs on Gaudi (and on the CPU in QDQ mode)",
                    note="INC's FP8 flow runs on Gaudi, and on the CPU as quantize-dequantize; on an Intel GPU "
                         "load an FP8 checkpoint"),
    "gptq": core_cell("gptq", "cuda"),
    "awq": core_cell("awq", "cuda"),
    "compressed-tensors": replace(_CT, source=_CT.source + "; the FP8 kernel path names XPU (validate_environment)",
                                  note=f"{OVERVIEW} marks Intel GPU red; transformers' quantizer runs "
                                       "compressed-tensors' torch code there and its FP8 kernel path names XPU"),
    "fbgemm-fp8": Cell("yes", f"{Q}quantizer_fbgemm_fp8.py validate_environment (XPU: the kernels package; hub kernel "
                       "kernels-community/fp8-fbgemm) and update_dtype (bfloat16)", package=_KERNELS.package,
                       floor=_KERNELS.floor, dtype="bfloat16",
                       note=f"{OVERVIEW} marks Intel GPU red; transformers' quantizer runs it on XPU through the hub "
                            "kernel kernels-community/fp8-fbgemm (in the local hub cache when offline)"),
    "fp8": Cell("yes", f"{Q}quantizer_finegrained_fp8.py validate_environment (XPU); {OVERVIEW} "
                "FINEGRAINED_FP8 row (Intel GPU)", package=_KERNELS.package, floor=_KERNELS.floor,
                note="its matmuls are the hub kernel kernels-community/finegrained-fp8 (in the local hub "
                     "cache when offline)"),
    "mxfp4": Cell("yes", f"{Q}quantizer_mxfp4.py validate_environment (XPU: Triton >= 3.5, kernels)",
                  package=_KERNELS.package, floor=_KERNELS.floor, requires=(("triton", "3.5.0"),),
                  dequantizes_without_package=True),
    "hqq": core_cell("hqq", "cuda"),
    "quanto": core_cell("quanto", "cuda"),
    "aqlm": core_cell("aqlm", "cuda"),
    "gguf": replace(_GGUF, source=_GGUF.source + " (Intel GPU)"),
}
"""The cell of each method, the same on Arc and Max (their columns differ in what the plan's
variant says about the device, not in what runs)."""

XPU_QUANTIZATION = QuantizationColumns(COLUMNS, {key: {c.key: cell for c in COLUMNS} for key, cell in CELLS.items()})
"""``XpuBackend.quantization_columns``."""
