"""Which quantization method runs on which backend: ONE table, and the decision it drives.

:data:`TABLE` holds the rows: per method, whether transformers runs it on the CPU and on CUDA, with
which package and version floor, in which dtype, and the source of the fact. Every other column
comes from the backend whose devices it describes (``Backend.quantization_columns``, a
:class:`~intelrt.hooks.quantization.QuantizationColumns`: the Intel plugins' Arc / Max and Gaudi
1/2/3 columns, a third party's own). The plan logic (:func:`decide`) reads the rows and the
planned backend's columns; docs/quantization.md is rendered from the rows and every installed
backend's columns (:func:`render_page`, checked by tests/contract/test_quantization_docs.py).
Sources: each quantizer's ``validate_environment`` / ``update_dtype`` in transformers 5.24
(``quantizers/quantizer_*.py``), transformers' quantization overview
(``docs/source/en/quantization/overview.md``), torchao 0.18 (``quantization/quant_api.py`` and its
tensor subclasses), auto-round 0.16 (``inference/backend.py`` ``BackendInfos``) and Intel Neural
Compressor's CPU path. Where the overview and a quantizer disagree, the quantizer (the code that
runs) decides and the cell says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import PlanError
from ..hooks.payloads import QUANTIZATION_REQUESTS, JSONValue
from ..hooks.quantization import Cell, Column, QuantizationColumns
from ..support.versions import at_least, package_version, parse
from .checkpoint import CheckpointQuantization
from .choice import QuantizationChoice, QuantizationPlan

REQUESTS = QUANTIZATION_REQUESTS
"""What ``quantization=`` accepts (declared in the contract, ``hooks/payloads.py``): every
:attr:`Method.request` of :data:`TABLE` is one of them, and each of them is some row's."""

OVERVIEW = "transformers docs/source/en/quantization/overview.md"
Q = "transformers 5.24 quantizers/"


CPU = Column("cpu", "cpu", None, "CPU", requests={"fp8": "inc-fp8"})
"""On the CPU ``quantization="fp8"`` is Intel Neural Compressor's QDQ path (torchao's float8 needs FP8 hardware)."""
CUDA = Column("cuda", "cuda", None, "CUDA")
COLUMNS = (CPU, CUDA)
"""intelrt's own columns: its built-in backends'. The others are contributed (``Backend.quantization_columns``)."""


@dataclass(frozen=True)
class Method:
    """One row: a method as a request asks for it or a checkpoint carries it."""

    key: str
    family: str
    """``QuantizationChoice.method``: transformers' quant_method family."""
    title: str
    bits: int | None
    scheme: str | None
    request: str | None
    """The ``quantization=`` value that quantizes with it while loading (``None``: checkpoints only)."""
    checkpoint: bool
    extra: str | None
    serializable: bool
    serializable_source: str
    lora: bool
    lora_reason: str
    cells: Mapping[str, Cell]
    """Its cells in intelrt's own columns (:data:`COLUMNS`: the CPU, CUDA)."""

    def cell(self, column: str) -> Cell:
        return self.cells[column]


def _no(source: str, note: str) -> Cell:
    return Cell("no", source, note=note)




def _bnb(bits: int) -> Method:
    floor = "0.46.1"  # transformers' BITSANDBYTES_MIN_VERSION
    base = Cell("yes", f"{Q}quantizer_bnb_{bits}bit.py validate_environment; bitsandbytes 0.50 "
                "supported_torch_devices", package="bitsandbytes", floor=floor)
    return Method(
        key=f"bitsandbytes-{bits}bit", family="bitsandbytes", title=f"bitsandbytes {bits}-bit", bits=bits,
        scheme="nf4" if bits == 4 else "llm.int8", request=f"{bits}bit", checkpoint=True, extra="intelrt[bitsandbytes]",
        serializable=True, serializable_source=f"{Q}quantizer_bnb_{bits}bit.py is_serializable",
        lora=True, lora_reason="PEFT's bnb LoRA layers (peft/tuners/lora/bnb.py); transformers: is_trainable True (QLoRA)",
        cells={"cpu": base, "cuda": base})


_TORCHAO = "torchao"
_AO_FLOOR = "0.15.0"  # transformers' TORCHAO_MIN_VERSION
_AO_SOURCE = f"{Q}quantizer_torchao.py; {OVERVIEW} torchao row (CPU, CUDA, Intel GPU)"


def _ao(note: str | None = None, kernel: str | None = None, **details: JSONValue) -> Cell:
    return Cell("yes", _AO_SOURCE, package=_TORCHAO, floor=_AO_FLOOR, details=details, note=note, kernel=kernel)


_K_WORKFLOWS = "torchao 0.18 quantization/quantize_/workflows"
_K_TINYGEMM = (f"tinygemm's aten._weight_int4pack_mm, torch's own CUDA kernel ({_K_WORKFLOWS}/int4/"
               "int4_tile_packed_to_4d_tensor.py); the compact step fuses q/k/v and gate/up by rows")
_K_INTX = (f"the 4-bit values (one per byte) dequantized, then a matmul ({_K_WORKFLOWS}/intx/"
           "intx_unpacked_to_int8_tensor.py); the compact step fuses q/k/v and gate/up by rows")
_K_INT8 = (f"the int8 weights cast in a matmul, times the row scales ({_K_WORKFLOWS}/int8/int8_tensor.py, weight-only); "
           "the compact step fuses q/k/v and gate/up by rows, and a compiled step of few rows reads the int8 weights "
           "in one fused multiply-and-sum")
_K_INT8_DYNAMIC = f"torch._int_mm on int8 activations and weights ({_K_WORKFLOWS}/int8/int8_tensor.py)"
_K_FP8 = (f"torch._scaled_mm on row-wise scaled FP8 activations and weights ({_K_WORKFLOWS}/float8/float8_tensor.py); "
          "the compact step fuses q/k/v and gate/up by rows, and a compiled step of few rows reads the FP8 weights in "
          "one fused multiply-and-sum with activations left in the model's dtype (weight-only numerics)")


TORCHAO_INT4 = Method(
    key="torchao-int4", family="torchao", title="torchao int4 weight-only", bits=4, scheme="int4-weight-only",
    request="int4", checkpoint=True, extra="intelrt[torchao]", serializable=True,
    serializable_source=f"{Q}quantizer_torchao.py is_serializable (safetensors through torchao's flatten_tensor_state_dict)",
    lora=False, lora_reason=("transformers' TorchAoHfQuantizer.is_trainable is True only for 8-bit configs, and PEFT's "
                             "TorchaoLoraLinear refuses Int4Tensor weights (peft/tuners/lora/torchao.py "
                             "_check_dtype_supported): train LoRA on int8 (quantization='int8') or bitsandbytes "
                             "4-bit (quantization='4bit')"),
    cells={
        "cpu": Cell("yes", "torchao 0.18 quant_api.py IntxWeightOnlyConfig (IntxUnpackedToInt8Tensor); "
                    "Int4WeightOnlyConfig's layouts need mslk, CUDA or an XPU/NPU", package=_TORCHAO, floor=_AO_FLOOR,
                    details={"config": "IntxWeightOnlyConfig", "weight_dtype": "int4"}, kernel=_K_INTX,
                    note="the CPU layout keeps each 4-bit value in a byte (int4 accuracy, int8 memory)"),
        "cuda": Cell("yes", "torchao 0.18 int4_tile_packed_to_4d_tensor.py (tinygemm, compute capability >= 8.0)",
                     package=_TORCHAO, floor=_AO_FLOOR, capability=(8, 0), kernel=_K_TINYGEMM,
                     details={"config": "Int4WeightOnlyConfig", "int4_packing_format": "tile_packed_to_4d"}),
    })

TORCHAO_INT8 = Method(
    key="torchao-int8", family="torchao", title="torchao int8 weight-only", bits=8, scheme="int8-weight-only",
    request="int8", checkpoint=True, extra="intelrt[torchao]", serializable=True,
    serializable_source=f"{Q}quantizer_torchao.py is_serializable",
    lora=True, lora_reason=("transformers' TorchAoHfQuantizer.is_trainable (8-bit configs) and PEFT's TorchaoLoraLinear "
                            "(peft/tuners/lora/torchao.py)"),
    cells={"cpu": _ao(config="Int8WeightOnlyConfig", kernel=_K_INT8),
           "cuda": _ao(config="Int8WeightOnlyConfig", kernel=_K_INT8)})

TORCHAO_INT8_DYNAMIC = Method(
    key="torchao-int8-dynamic", family="torchao", title="torchao int8 dynamic activations, int8 weights", bits=8,
    scheme="int8-dynamic", request="int8-dynamic", checkpoint=True, extra="intelrt[torchao]", serializable=True,
    serializable_source=f"{Q}quantizer_torchao.py is_serializable",
    lora=True, lora_reason="transformers' TorchAoHfQuantizer.is_trainable (8-bit configs) and PEFT's TorchaoLoraLinear",
    cells={"cpu": _ao(config="Int8DynamicActivationInt8WeightConfig", kernel=_K_INT8_DYNAMIC),
           "cuda": _ao(config="Int8DynamicActivationInt8WeightConfig", kernel=_K_INT8_DYNAMIC)})

TORCHAO_FLOAT8 = Method(
    key="torchao-float8", family="torchao", title="torchao float8 dynamic (row-wise)", bits=8, scheme="float8-dynamic",
    request="fp8", checkpoint=True, extra="intelrt[torchao]", serializable=True,
    serializable_source=f"{Q}quantizer_torchao.py is_serializable",
    lora=True, lora_reason="transformers' TorchAoHfQuantizer.is_trainable (8-bit configs) and PEFT's TorchaoLoraLinear",
    cells={"cpu": _no("torchao 0.18 Float8DynamicActivationFloat8WeightConfig: torch._scaled_mm needs FP8 hardware",
                      "no FP8 matmul on the CPU"),
           "cuda": Cell("yes", "torchao 0.18 quant_api.py Float8DynamicActivationFloat8WeightConfig (PerRow); "
                        "torch._scaled_mm needs compute capability >= 8.9", package=_TORCHAO, floor=_AO_FLOOR,
                        capability=(8, 9), kernel=_K_FP8, details={"config": "Float8DynamicActivationFloat8WeightConfig",
                                                    "granularity": "PerRow"})})

_AR_SOURCE = (f"{Q}quantizer_auto_round.py (pre-quantized only; auto_round.inference.convert_model); "
              "auto-round 0.16 inference/backend.py BackendInfos")
_K_AR = ("auto-round's QuantLinear of the backend auto-round picks by priority among those installed (inference/"
         "backend.py get_layer_backend): auto_round:torch anywhere{more}; each layer runs its own kernel in the compact "
         "step")
_AR = Cell("yes", _AR_SOURCE + ' ("auto_round:torch": cpu, cuda, xpu; 2-8 bits; float16/bfloat16) and '
           "convert_model.post_init (a model in another dtype is cast to float16)", package="auto-round", floor="0.5.0",
           compute_dtypes=("float16", "bfloat16"), kernel=_K_AR.format(more=""))
_AR_CPU = replace(_AR, kernel=_K_AR.format(more=", ark (auto_round_kernel, priority 6) where auto-round-lib is installed"))
_AR_CUDA = replace(_AR, kernel=_K_AR.format(more=", gptqmodel's marlin (priority 6) where gptqmodel is installed, else "
                                                 "tritonv2"))

AUTOROUND = Method(
    key="autoround", family="auto-round", title="AutoRound (Intel)", bits=4, scheme="w4a16", request="autoround",
    checkpoint=True, extra="intelrt[autoround]", serializable=True,
    serializable_source=f"{Q}quantizer_auto_round.py is_serializable; auto-round quantize_and_save(format='auto_round')",
    lora=False, lora_reason=(f"transformers' AutoRoundQuantizer.is_trainable is False ({OVERVIEW}: no PEFT fine-tuning): "
                             "export it in the GPTQ format (auto-round format='auto_gptq') and train LoRA on that with "
                             "gptqmodel, or use quantization='4bit'"),
    cells={"cpu": _AR_CPU, "cuda": _AR_CUDA})

_INC_CPU = Cell(
    "yes", "neural-compressor-pt 3.10 torch/algorithms/fp8_quant/_quant_common/quant_config.py Fp8cfg.parse (on the "
    "CPU: \"only QDQ mode is supported\", use_qdq) and _core/fp_utils.py get_fp8_hw_alligned_scales_by_device "
    "(hardware-aligned scales on Gaudi only: maxabs_pow2 here)", package="neural-compressor-pt", floor="3.10",
    dtype="bfloat16", details={"qdq": True},
    kernel="INC's PatchedLinear in QDQ mode: weights and activations rounded to FP8 with the measured scales, the "
           "matmul in bfloat16; the model's own forward runs it",
    note="INC's CPU path quantizes and dequantizes (use_qdq): FP8's rounding with the measured scales, matmuls in "
         "bfloat16 — it measures FP8's accuracy before a Gaudi run and saves neither memory nor time")
INC_FP8 = Method(
    key="inc-fp8", family="inc", title="Intel Neural Compressor FP8", bits=8, scheme="fp8-static", request="fp8",
    checkpoint=False, extra="intelrt[inc]", serializable=False,
    serializable_source="INC keeps the measured scales in its dump_stats_path, not in a transformers checkpoint",
    lora=False, lora_reason="LoRA on INC's FP8 PatchedLinear is for QLoRA-style training through PEFT's IncLoraLinear "
                            "(peft/tuners/lora/inc.py), which intelrt does not plan yet",
    cells={"cpu": _INC_CPU,
           "cuda": _no("neural_compressor.torch.algorithms.fp8_quant runs on Gaudi (and on the CPU in QDQ mode)", "on CUDA, fp8 is torchao float8")})

_GPTQ_REQ = (("optimum", "1.24.0"),)
_K_GPTQMODEL = ("gptqmodel's QuantLinear of the backend gptqmodel picks for the device (its torch kernels on the CPU; "
                "marlin, exllama or triton on CUDA); each layer runs as itself in the compact step")
_GPTQ = Cell("yes", f"{Q}quantizer_gptq.py validate_environment (gptqmodel >= 1.4.3, optimum >= 1.24.0); {OVERVIEW} "
             "GPTQModel row", package="gptqmodel", floor="1.4.3", requires=_GPTQ_REQ, kernel=_K_GPTQMODEL)
GPTQ = Method(
    key="gptq", family="gptq", title="GPTQ (GPTQModel)", bits=None, scheme=None, request=None, checkpoint=True,
    extra=None, serializable=True, serializable_source=f"{Q}quantizer_gptq.py is_serializable",
    lora=True, lora_reason="PEFT's GPTQLoraLinear on gptqmodel's BaseQuantLinear (peft/tuners/lora/gptq.py); "
                           "transformers: GptqHfQuantizer.is_trainable True",
    cells={"cpu": _GPTQ, "cuda": _GPTQ})

_AWQ_CUDA = Cell("yes", f"{Q}quantizer_awq.py validate_environment (gptqmodel) and update_dtype (bfloat16 → float16 "
                 "on CUDA/XPU)", package="gptqmodel", floor="1.4.3", dtype="float16", kernel=_K_GPTQMODEL,
                 note="transformers casts AWQ models to float16 here (its kernels take no bfloat16)")
AWQ = Method(
    key="awq", family="awq", title="AWQ", bits=4, scheme=None, request=None, checkpoint=True, extra=None,
    serializable=True, serializable_source=f"{Q}quantizer_awq.py is_serializable (not with exllama backends)",
    lora=True, lora_reason="transformers' AwqQuantizer.is_trainable (gptqmodel >= 5.0) and PEFT's awq LoRA layer",
    cells={"cpu": Cell("yes", f"{Q}quantizer_awq.py (gptqmodel's torch kernels); {OVERVIEW} AWQ row (CPU)",
                       package="gptqmodel", floor="1.4.3", kernel=_K_GPTQMODEL),
           "cuda": _AWQ_CUDA})

_CT = Cell("yes", f"{Q}quantizer_compressed_tensors.py (compressed-tensors >= 0.15; decompressed on first forward, "
           f"or dequantize=True); {OVERVIEW} compressed-tensors row", package="compressed-tensors", floor="0.15.0",
           kernel="compressed-tensors' forward on each nn.Linear (quantization/lifecycle/forward.py "
                  "set_forward_quantized: the weights decompressed, activations quantized where the scheme says); each "
                  "layer runs as itself in the compact step")
COMPRESSED_TENSORS = Method(
    key="compressed-tensors", family="compressed-tensors", title="compressed-tensors (llm-compressor)", bits=None,
    scheme=None, request=None, checkpoint=True, extra="intelrt[compressed-tensors]", serializable=True,
    serializable_source=f"{Q}quantizer_compressed_tensors.py is_serializable",
    lora=True, lora_reason="transformers' CompressedTensorsHfQuantizer.is_trainable (not on the FP8 kernel path); the "
                           "layers stay torch.nn.Linear, which PEFT's default LoRA layer wraps",
    cells={"cpu": _CT, "cuda": _CT})

FBGEMM_FP8 = Method(
    key="fbgemm-fp8", family="fbgemm_fp8", title="FBGEMM FP8", bits=8, scheme="fp8-rowwise", request=None,
    checkpoint=True, extra=None, serializable=True, serializable_source=f"{Q}quantizer_fbgemm_fp8.py is_serializable",
    lora=False, lora_reason="transformers' FbgemmFp8HfQuantizer.is_trainable is False",
    cells={"cpu": _no(f"{Q}quantizer_fbgemm_fp8.py validate_environment", "FBGEMM FP8 needs a CUDA GPU or an Intel GPU"),
           "cuda": Cell("yes", f"{Q}quantizer_fbgemm_fp8.py validate_environment (fbgemm-gpu, compute capability >= 9.0) "
                        "and update_dtype (bfloat16)", package="fbgemm-gpu", capability=(9, 0), dtype="bfloat16")})

_FP8_DEQ = "transformers dequantizes the FP8 weights to the model dtype at load time: it runs with no memory saved"
FINEGRAINED_FP8 = Method(
    key="fp8", family="fp8", title="fine-grained FP8 (block-wise, DeepSeek style)", bits=8, scheme="fp8-block",
    request=None, checkpoint=True, extra=None, serializable=True,
    serializable_source=f"{Q}quantizer_finegrained_fp8.py is_serializable",
    lora=False, lora_reason=f"{OVERVIEW}: no PEFT fine-tuning for fine-grained FP8; load it with dequantize=True "
                            "(the plan's dtype) to train",
    cells={"cpu": Cell("dequantized", f"{Q}quantizer_finegrained_fp8.py validate_environment (no GPU or XPU: "
                       "dequantize=True)", note=_FP8_DEQ),
           "cuda": Cell("yes", f"{Q}quantizer_finegrained_fp8.py validate_environment (compute capability >= 8.9, "
                        "else dequantized); integrations/finegrained_fp8.py (hub kernel kernels-community/finegrained-fp8)",
                        package="kernels", floor="0.18.2", capability=(8, 9))})

MXFP4 = Method(
    key="mxfp4", family="mxfp4", title="MXFP4 (gpt-oss)", bits=4, scheme="mxfp4", request=None, checkpoint=True,
    extra=None, serializable=True, serializable_source=f"{Q}quantizer_mxfp4.py is_serializable",
    lora=False, lora_reason="transformers' Mxfp4HfQuantizer.is_trainable is False: load with Mxfp4Config(dequantize=True)",
    cells={"cpu": Cell("yes", f"{Q}quantizer_mxfp4.py validate_environment and _process_model_before_weight_loading "
                       "(CPU: Triton >= 3.5 and use_kernels=True, else dequantized to bfloat16)", package="kernels",
                       floor="0.18.2", requires=(("triton", "3.5.0"),), details={"use_kernels": True},
                       dequantizes_without_package=True,
                       note="runs quantized on the CPU only with hub kernels (use_kernels=True); else transformers "
                            "dequantizes it to bfloat16"),
           "cuda": Cell("yes", f"{Q}quantizer_mxfp4.py validate_environment (compute capability >= 7.5, Triton >= 3.4, "
                        "kernels; hub kernel kernels-community/gpt-oss-triton-kernels)", package="kernels",
                        floor="0.18.2", requires=(("triton", "3.4.0"),), capability=(7, 5),
                        dequantizes_without_package=True)})

_HQQ = Cell("yes", f"{Q}quantizer_hqq.py (hqq >= 0.2.1); {OVERVIEW} HQQ row", package="hqq", floor="0.2.1")
HQQ = Method(
    key="hqq", family="hqq", title="HQQ", bits=None, scheme=None, request=None, checkpoint=True, extra=None,
    serializable=True, serializable_source=f"{Q}quantizer_hqq.py is_serializable",
    lora=True, lora_reason="transformers' HqqHfQuantizer.is_trainable and PEFT's hqq LoRA layer (peft/tuners/lora/hqq.py)",
    cells={"cpu": _HQQ, "cuda": _HQQ})

_QUANTO = Cell("yes", f"{Q}quantizer_quanto.py (optimum-quanto); {OVERVIEW} optimum-quanto row", package="optimum-quanto")
QUANTO = Method(
    key="quanto", family="quanto", title="optimum-quanto", bits=None, scheme=None, request=None, checkpoint=True,
    extra=None, serializable=False, serializable_source=f"{Q}quantizer_quanto.py is_serializable is False",
    lora=False, lora_reason=f"{OVERVIEW}: no PEFT fine-tuning for optimum-quanto",
    cells={"cpu": _QUANTO, "cuda": _QUANTO})

_AQLM = Cell("yes", f"{Q}quantizer_aqlm.py validate_environment (aqlm, accelerate); {OVERVIEW} AQLM row (CPU, "
             "CUDA, Intel GPU)", package="aqlm")
AQLM = Method(
    key="aqlm", family="aqlm", title="AQLM (additive quantization)", bits=None, scheme=None, request=None,
    checkpoint=True, extra=None, serializable=True, serializable_source=f"{Q}quantizer_aqlm.py is_serializable",
    lora=True, lora_reason="transformers' AqlmHfQuantizer.is_trainable (aqlm >= 1.0.2) and PEFT's AQLM LoRA layer "
                           "(peft/tuners/lora/aqlm.py)",
    cells={"cpu": _AQLM, "cuda": _AQLM})

_GGUF_SOURCE = (f"{Q}quantizer_gguf.py validate_environment: the weights stay in GGUF blocks with the hub kernel "
                "ggml-org/ggml-quantization, else the whole model is dequantized at load")
_GGUF = Cell("yes", f"{_GGUF_SOURCE}; {OVERVIEW} GGUF row", package="kernels", floor="0.18.2",
             dequantizes_without_package=True,
             note="from_pretrained(gguf_file=...) keeps the blocks packed where the hub kernel ggml-org/ggml-quantization "
                  "is published for this device (the kernels extra; offline, in the local hub cache), else it "
                  "unpacks every weight at load: it runs with no memory saved")
GGUF = Method(
    key="gguf", family="gguf", title="GGUF (llama.cpp files)", bits=None, scheme=None, request=None, checkpoint=True,
    extra=None, serializable=False, serializable_source=f"{Q}quantizer_gguf.py is_serializable is False",
    lora=False, lora_reason=f"transformers' GgufHfQuantizer.is_trainable is False ({OVERVIEW}: no PEFT fine-tuning)",
    cells={"cpu": _GGUF, "cuda": _GGUF})

TABLE: tuple[Method, ...] = (_bnb(4), _bnb(8), TORCHAO_INT4, TORCHAO_INT8, TORCHAO_INT8_DYNAMIC, TORCHAO_FLOAT8,
                             AUTOROUND, INC_FP8, GPTQ, AWQ, COMPRESSED_TENSORS, FBGEMM_FP8, FINEGRAINED_FP8, MXFP4, HQQ,
                             QUANTO, AQLM, GGUF)
METHOD = {m.key: m for m in TABLE}
CPU_QUANTIZATION = QuantizationColumns((CPU,), {m.key: {CPU.key: m.cells[CPU.key]} for m in TABLE})
"""``CpuBackend.quantization_columns``."""
CUDA_QUANTIZATION = QuantizationColumns((CUDA,), {m.key: {CUDA.key: m.cells[CUDA.key]} for m in TABLE})
"""``CudaBackend.quantization_columns``."""


def core_cell(method: str, column: str) -> Cell:
    """The cell intelrt declares for ``method`` (a row's key) on the CPU (``column="cpu"``) or CUDA
    (``"cuda"``): for a backend whose column is the same (``QuantizationColumns``)."""
    return METHOD[method].cells[column]


def no_cell(method: Method, column: Column) -> Cell:
    """What a column that declares no cell for ``method`` says."""
    return Cell("no", f"the backend of the {column.title} column declares no cell for {method.title}",
                note=f"the {column.kind} backend's quantization columns say nothing of {method.title}")


def cell_of(method: Method, column: Column, columns: QuantizationColumns | None = None) -> Cell:
    """``method``'s cell in ``column``: intelrt's own for the CPU and CUDA, else from ``columns``."""
    if column.key in method.cells:
        return method.cells[column.key]
    found = columns.cell(method.key, column.key) if columns is not None else None
    return found or no_cell(method, column)


# -- the device a plan targets -------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """The facts of the backend a plan quantizes for.

    ``variant``: which device of its kind (``Backend.variant``); ``columns``: the backend's columns
    of the table (``Backend.quantization_columns``; ``None``: no method is known to run there). ``packages``: distribution → version (``None``: not installed); left ``None``,
    installed versions are read (``importlib.metadata``, which the simulator fakes)."""

    kind: str
    variant: str | None = None
    capability: tuple[int, int] | None = None
    """CUDA compute capability (``None``: unknown — methods needing one are planned with a note)."""
    torch: str | None = None
    packages: Mapping[str, str | None] | None = None
    name: str | None = None
    columns: QuantizationColumns | None = None

    @property
    def table(self) -> QuantizationColumns | None:
        """The columns this target is planned on: its backend's, never guessed from its device type
        (a third-party backend whose torch reports ``cuda`` is not NVIDIA's column)."""
        return self.columns

    def column(self) -> Column | None:
        table = self.table
        return table.column_for(self.variant) if table is not None else None

    def version(self, distribution: str) -> str | None:
        if self.packages is not None:
            return self.packages.get(distribution)
        module = {"neural-compressor-pt": "neural_compressor", "fbgemm-gpu": "fbgemm_gpu",
                  "optimum-quanto": "optimum.quanto", "auto-round": "auto_round"}.get(distribution)
        if distribution == "optimum-quanto":
            return package_version(distribution, "optimum")
        return package_version(distribution, module)

    @classmethod
    def from_backend(cls, backend: Any, packages: Mapping[str, str | None] | None = None) -> Target:
        """The target of a detected backend, from the facts it declares: its ``device_type``, its
        ``variant`` and ``quantization_columns``, and from its detection the torch version and
        CUDA's ``versions['compute_capability']`` (``"9.0"``)."""
        names = [str(d.name) for d in getattr(backend, "devices", ())]
        versions: Mapping[str, str] = getattr(backend, "versions", {}) or {}
        capability = None
        cc = parse(versions.get("compute_capability"))
        if cc is not None:
            capability = (cc.major, cc.minor)
        return cls(backend.device_type, getattr(backend, "variant", None), capability, versions.get("torch"), packages,
                   names[0] if names else None, getattr(backend, "quantization_columns", None))


def projection_inputs(config: Mapping[str, Any]) -> tuple[int, ...]:
    """The input sizes of a decoder's projections, from its config (the text config of a
    multimodal one): hidden size (q/k/v, gate/up), attention output (o_proj) and MLP width (down
    projection); int4's group size must divide each. Empty when the config does not say."""
    text: Mapping[str, Any] = config.get("text_config") or config
    sizes = []
    hidden = text.get("hidden_size")
    heads, head_dim = text.get("num_attention_heads"), text.get("head_dim")
    for value in (hidden, text.get("intermediate_size"), text.get("moe_intermediate_size"),
                  heads * head_dim if isinstance(heads, int) and isinstance(head_dim, int) else None):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            sizes.append(value)
    return tuple(dict.fromkeys(sizes))


# -- the decision --------------------------------------------------------------------------------

def request_method(request: str, target: Target) -> Method:
    """The method a ``quantization=`` value asks for on ``target``: its column's own
    (``Column.requests``: ``fp8`` is INC on Gaudi and the CPU), else the table's first row for it
    (torchao's float8 for ``fp8``)."""
    if request not in REQUESTS:
        raise PlanError(f"quantization={request!r} is not one of {', '.join(map(repr, REQUESTS))}")
    column = target.column()
    own = column.requests.get(request) if column is not None else None
    return METHOD[own] if own else next(m for m in TABLE if m.request == request)


TORCHAO_METHODS = {"Int4WeightOnlyConfig": "torchao-int4", "Int8WeightOnlyConfig": "torchao-int8",
                   "Int8DynamicActivationInt8WeightConfig": "torchao-int8-dynamic",
                   "Float8DynamicActivationFloat8WeightConfig": "torchao-float8"}


def checkpoint_method(checkpoint: CheckpointQuantization) -> Method:
    """The row of a checkpoint's quantization, or a ``PlanError`` for one intelrt does not plan."""
    key = {"bitsandbytes_4bit": "bitsandbytes-4bit", "bitsandbytes_8bit": "bitsandbytes-8bit", "gptq": "gptq",
           "awq": "awq", "auto-round": "autoround", "compressed-tensors": "compressed-tensors",
           "fbgemm_fp8": "fbgemm-fp8", "fp8": "fp8", "mxfp8": "fp8", "mxfp4": "mxfp4", "hqq": "hqq",
           "quanto": "quanto", "aqlm": "aqlm", "gguf": "gguf"}.get(checkpoint.method)
    if checkpoint.method == "torchao":
        key = TORCHAO_METHODS.get(checkpoint.scheme or "")
        if checkpoint.scheme == "IntxWeightOnlyConfig":
            key = {4: "torchao-int4", 8: "torchao-int8"}.get(checkpoint.bits or 0)
        if key is None:
            raise PlanError(f"the checkpoint is quantized with torchao's {checkpoint.scheme}, which intelrt does not "
                            f"plan (it plans {', '.join(sorted(TORCHAO_METHODS))} and IntxWeightOnlyConfig); load it "
                            "with transformers directly")
    if key is None:
        raise PlanError(f"the checkpoint is quantized with {checkpoint.method!r} ({checkpoint.where}), which intelrt "
                        f"does not plan; intelrt plans {', '.join(sorted({m.family for m in TABLE}))}. Load it with "
                        "transformers directly, or use the unquantized checkpoint with quantization=")
    return METHOD[key]


def group_size(in_features: Sequence[int], preferred: int = 128) -> int:
    """The largest of 128, 64, 32 (at most ``preferred``) dividing every projection's input size:
    torchao leaves a weight it cannot group unquantized (``_int4_weight_only_quantize_tensor``)."""
    for size in (128, 64, 32):
        if size <= preferred and all(n % size == 0 for n in in_features):
            return size
    raise PlanError(f"int4 groups weights by 32, 64 or 128 input features; this model's projections take "
                    f"{', '.join(map(str, in_features))}: use quantization='int8'")


def _runs_elsewhere(method: Method, target: Target) -> str:
    """Where else ``method`` runs: intelrt's own columns and the target backend's."""
    own = target.table
    known = [*COLUMNS, *(c for c in (own.columns if own is not None else ()) if c not in COLUMNS)]
    where = [c.title for c in known if cell_of(method, c, own).runs != "no"]
    return f"{method.title} runs on {', '.join(where)}" if where else f"{method.title} runs nowhere intelrt plans"


def _alternatives(column: Column, method: Method, target: Target) -> str:
    """The requests that do run here, as the way out of a refusal."""
    here = replace(target, variant=column.variant)
    fits = [m for m in TABLE if m.request and cell_of(m, column, target.table).runs == "yes" and m.key != method.key
            and request_method(m.request, here) is m]
    same_bits = [m for m in fits if m.bits == method.bits] or fits
    if not same_bits:
        return f"no quantization method runs on {column.title}: load without quantization"
    asks = ", ".join(f"quantization={m.request!r} ({m.title})" for m in same_bits)
    return f"on {column.title}: {asks}"


def _refusal(method: Method, column: Column, cell: Cell, asked: str, target: Target) -> PlanError:
    return PlanError(f"{asked}: {method.title} does not run on {column.title} ({cell.note}). "
                     f"Instead {_alternatives(column, method, target)}; {_runs_elsewhere(method, target)}")


EXTRAS = {"torchao": "intelrt[torchao]", "auto-round": "intelrt[autoround]", "neural-compressor-pt": "intelrt[inc]",
          "bitsandbytes": "intelrt[bitsandbytes]", "compressed-tensors": "intelrt[compressed-tensors]"}
"""The intelrt extra installing each distribution a method needs (pyproject.toml)."""


def _install_hint(distribution: str, floor: str | None) -> str:
    spec = f"{distribution}>={floor}" if floor else distribution
    extra = EXTRAS.get(distribution)
    return f"pip install '{extra}' (or pip install '{spec}')" if extra else f"pip install '{spec}'"


def _check_packages(method: Method, cell: Cell, target: Target, asked: str, where: str) -> list[str]:
    """Raise for a missing or too old package; the versions found, for the reason."""
    found = []
    for distribution, floor in ((cell.package, cell.floor), *cell.requires):
        if distribution is None:
            continue
        version = target.version(distribution)
        if version is None:
            raise PlanError(f"{asked} uses {distribution}, which is not installed: "
                            f"{_install_hint(distribution, floor)}")
        if floor and parse(version) is not None and not at_least(version, floor):
            raise PlanError(f"{asked}: {method.title} on {where} needs {distribution} >= {floor}, and this is "
                            f"{version} ({cell.source}): {_install_hint(distribution, floor)}")
        found.append(f"{distribution} {version}")
    return found


def _check_torch(method: Method, column: Column, cell: Cell, target: Target, asked: str) -> None:
    """A torch older than the method's kernels need on this device (as the backend reports it)."""
    if cell.torch_floor is None or target.torch is None or parse(target.torch) is None:
        return
    if not at_least(target.torch, cell.torch_floor):
        raise PlanError(f"{asked}: {method.title} on {column.title} needs torch >= {cell.torch_floor} ({cell.source}); "
                        f"this is torch {target.torch}: install a newer torch built for this device")


def _check_capability(method: Method, column: Column, cell: Cell, target: Target, asked: str) -> list[str]:
    if cell.capability is None:
        return []
    need = ".".join(map(str, cell.capability))
    if target.capability is None:
        return [f"{method.title} needs compute capability >= {need}; this GPU's was not reported"]
    if target.capability < cell.capability:
        have = ".".join(map(str, target.capability))
        raise PlanError(f"{asked}: {method.title} needs a CUDA GPU of compute capability >= {need} ({cell.source}); "
                        f"this one is {have}. Instead {_alternatives(column, method, target)}")
    return []


def _bnb_details(method: Method, dtype: str, checkpoint: CheckpointQuantization | None) -> dict[str, Any]:
    """bitsandbytes as ``backends/defaults.bitsandbytes_choice`` plans it (NF4, double quantization,
    matmuls in the plan's dtype), or as the checkpoint stored it."""
    if method.bits != 4:
        return {}
    if checkpoint is not None:
        config = checkpoint.config
        return {"quant_type": str(config.get("bnb_4bit_quant_type") or "fp4"),
                "compute_dtype": str(config.get("bnb_4bit_compute_dtype") or "float32"),
                "double_quant": bool(config.get("bnb_4bit_use_double_quant", False))}
    compute = dtype if dtype in ("bfloat16", "float16") else "float32"
    return {"quant_type": "nf4", "compute_dtype": compute, "double_quant": True}


def _layout_problem(method: Method, cell: Cell, checkpoint: CheckpointQuantization, column: Column) -> str | None:
    """A torchao checkpoint holds one config's layout; another device's kernels may not read it."""
    if method.family != "torchao":
        return None
    wanted = (cell.details.get("config"), cell.details.get("int4_packing_format"))
    stored = (checkpoint.scheme, checkpoint.packing)
    if wanted[0] == stored[0] and (wanted[1] is None or wanted[1] == stored[1]):
        return None
    if method.key != "torchao-int4":  # int8 / float8 tensors are one layout everywhere
        return None
    def show(pair: tuple[Any, Any]) -> str:
        return " ".join(str(p) for p in pair if p)
    return (f"the checkpoint's int4 weights are torchao's {show(stored)}; {column.title} runs {show(wanted)}. "
            "Quantize the unquantized checkpoint on this device (quantization='int4')")


def decide(request: str | None, checkpoint: CheckpointQuantization | None, target: Target, *,
           dtype: str = "bfloat16", in_features: Sequence[int] = (),
           claim_of: Callable[[str], str | None] | None = None,
           env: Mapping[str, str] | None = None) -> QuantizationPlan:
    """The quantization decision for ``request`` (a ``quantization=`` value or ``None``) and the
    checkpoint's own ``checkpoint`` on ``target``; a ``PlanError`` says the way out.

    ``dtype``: the plan's dtype; ``in_features``: the model's projection input sizes (int4 group
    size); ``claim_of``: the SPEC claim of a backend kind (default: the column's ``claim``); ``env``:
    the run's environment (INC's ``QUANT_CONFIG``)."""
    if request is None and checkpoint is None:
        return QuantizationPlan(None, "not requested")
    column = target.column()
    asked = f"quantization={request!r}" if request else f"the checkpoint's quantization ({checkpoint.describe()})" \
        if checkpoint else ""
    if column is None:
        raise PlanError(f"{asked}: the {target.kind} backend declares no column of intelrt's quantization table "
                        "(Backend.quantization_columns), so no quantization method is known to run there")
    notes: list[str] = []
    if checkpoint is not None:
        if not checkpoint.seen_by_transformers:
            raise PlanError(f"the checkpoint's quantization is described in {checkpoint.where} only, which "
                            "transformers does not read: it would load the quantized tensors as plain weights. Copy "
                            f"that file's content into config.json as \"quantization_config\" ({checkpoint.describe()})")
        method = checkpoint_method(checkpoint)
        if request is not None:
            wanted = request_method(request, target)
            if wanted.key != method.key:
                raise PlanError(f"quantization={request!r} ({wanted.title}) contradicts the checkpoint, which is "
                                f"already quantized: {checkpoint.describe()}. transformers refuses a second "
                                "quantization config of another kind (quantizers/auto.py merge_quantization_configs): "
                                "drop quantization= to run the checkpoint as it is, or start from the unquantized "
                                "checkpoint")
            notes.append(f"quantization={request!r} is the checkpoint's own quantization")
        asked = f"the checkpoint's quantization ({checkpoint.describe()})"
    else:
        assert request is not None
        method = request_method(request, target)
    cell = cell_of(method, column, target.table)
    if cell.runs == "no":
        raise _refusal(method, column, cell, asked, target)
    if checkpoint is not None and cell.checkpoint_schemes and checkpoint.scheme not in cell.checkpoint_schemes:
        schemes = " or ".join(s.upper() for s in cell.checkpoint_schemes)
        raise PlanError(f"{asked}: {method.title} on {column.title} runs {schemes} checkpoints only, and this "
                        f"checkpoint is {checkpoint.scheme} ({cell.source}). Re-quantize from the unquantized "
                        f"checkpoint with quantization={method.request!r} ({schemes})")
    if checkpoint is not None:
        problem = _layout_problem(method, cell, checkpoint, column)
        if problem:
            raise PlanError(f"{asked}: {problem}")
    dequantized = cell.runs == "dequantized"
    try:
        found = _check_packages(method, cell, target, asked, column.title)
    except PlanError as missing:
        if not (cell.dequantizes_without_package and checkpoint is not None):
            raise
        found, dequantized = [], True
        notes.append(f"{missing}; without it transformers dequantizes the checkpoint to bfloat16 ({cell.source}): "
                     "it runs with no memory saved")
    notes += _check_capability(method, column, cell, target, asked)
    _check_torch(method, column, cell, target, asked)
    details: dict[str, Any] = dict(cell.details)
    if cell.kernel:
        details["kernel"] = cell.kernel
    bnb = _bnb_details(method, dtype, checkpoint) if method.family == "bitsandbytes" else {}
    bits = method.bits or (checkpoint.bits if checkpoint else None) or 4
    group = checkpoint.group_size if checkpoint else None
    if method.key == "torchao-int4" and checkpoint is None:
        group = group_size(in_features) if in_features else 128
        details["group_size"] = group
    if method.key == "autoround" and checkpoint is None:
        from .autoround import calibration_defaults

        group = group_size(in_features) if in_features else 128
        details.update(calibration_defaults(bits, group))
        notes.append("AutoRound quantizes after loading, tuning on calibration text, and transformers loads only "
                     "AutoRound checkpoints (quantizer_auto_round.py): intelrt.load saves the quantized model to a "
                     "temporary directory and loads it back. Its default calibration set NeelNanda/pile-10k comes "
                     "from the hub; offline, or for your own text: intelrt quantize MODEL --method autoround "
                     "--calibration FILE --output DIR (--iters 0: round-to-nearest, no tuning), then load DIR")
    if method.key == "inc-fp8":
        from .inc import fp8_flow, stage_note

        details.update(fp8_flow(env, qdq_mode=bool(cell.details.get("qdq"))))
        notes.append(stage_note(details))
    if checkpoint is not None and method.family in ("gptq", "awq") and details.get("loader") == "auto-round":
        if bits != 4:
            raise PlanError(f"{asked}: on {column.title} auto-round loads 4-bit GPTQ/AWQ weights only "
                            "(auto-round inference/backend.py BackendInfos['hpu']); this checkpoint is "
                            f"{bits}-bit")
    if cell.note:
        notes.append(cell.note)
    if not method.lora:
        notes.append(f"LoRA training on this base is refused: {method.lora_reason}")
    elif not dequantized:
        notes.append(f"QLoRA: to fine-tune a model too big for the device, train LoRA adapters with PEFT on this base "
                     f"(Loaded.train(..., lora=True); {method.lora_reason})")
    load_dtype = cell.dtype
    if load_dtype is None and cell.compute_dtypes and dtype not in cell.compute_dtypes:
        load_dtype = cell.compute_dtypes[0]
        notes.append(f"{method.title}'s kernels here compute in {' or '.join(cell.compute_dtypes)}: the {dtype} model "
                     f"is loaded in {load_dtype}")
    choice = QuantizationChoice(
        method=method.family, bits=bits, quant_type=bnb.get("quant_type"), compute_dtype=bnb.get("compute_dtype"),
        double_quant=bool(bnb.get("double_quant", False)), scheme=(checkpoint.scheme if checkpoint and checkpoint.scheme
                                                                    else method.scheme),
        source="checkpoint" if checkpoint is not None else "request", requested=request, package=cell.package,
        extra=method.extra,
        group_size=group, dtype=load_dtype, details=details, trainable=method.lora,
        serializable=method.serializable, dequantized=dequantized)
    how = "loads dequantized" if dequantized else "runs"
    # a request's reason is prefixed "requested by the user; " by the host (hooks/concerns.py, PROPOSE)
    reason = ("the checkpoint is quantized: " if checkpoint is not None else "") + \
        f"{method.title} {how} on {column.title}" + (f" ({', '.join(found)})" if found else "")
    if load_dtype:
        reason += f", in {load_dtype}"
    claim = claim_of(column.kind) if claim_of else column.claim
    if checkpoint is not None:
        claim = "T4"
    return QuantizationPlan(choice, reason, tuple(notes), claim)


def method_of(choice: QuantizationChoice) -> Method:
    """The table's row of a planned choice."""
    for method in TABLE:
        if method.family != choice.method:
            continue
        if method.family == "bitsandbytes" and method.bits != choice.bits:
            continue
        if method.family == "torchao" and method.scheme != choice.scheme and \
                TORCHAO_METHODS.get(choice.scheme or "") != method.key:
            if not (choice.scheme == "IntxWeightOnlyConfig" and method.bits == choice.bits and method.key in
                    ("torchao-int4", "torchao-int8")):
                continue
        return method
    raise PlanError(f"no row of intelrt's quantization table is {choice.method} {choice.scheme or ''}".rstrip())


# -- the documentation table ---------------------------------------------------------------------

_MARK = {"yes": "yes", "dequantized": "dequantized", "no": "no"}


def _cell_text(cell: Cell) -> str:
    text = _MARK[cell.runs]
    bits = []
    if cell.package:
        bits.append(f"`{cell.package}`" + (f" ≥ {cell.floor}" if cell.floor else ""))
    if cell.capability:
        bits.append(f"sm ≥ {cell.capability[0]}.{cell.capability[1]}")
    if cell.dtype:
        bits.append(cell.dtype)
    config = cell.details.get("config")
    if config:
        bits.append(f"`{config}`" + (f" `{cell.details['int4_packing_format']}`"
                                     if cell.details.get("int4_packing_format") else ""))
    return text + (f" ({'; '.join(bits)})" if bits else "")


def table_columns(contributed: Sequence[QuantizationColumns]) -> list[tuple[Column, QuantizationColumns | None]]:
    """Every column of the rendered table: intelrt's own, then each contribution's (in its order)."""
    found: list[tuple[Column, QuantizationColumns | None]] = [(c, None) for c in COLUMNS]
    for columns in contributed:
        found += [(c, columns) for c in columns.columns if c.key not in {k.key for k, _ in found}]
    return found


def markdown_table(contributed: Sequence[QuantizationColumns] = ()) -> str:
    """The method × backend table of docs/quantization.md: :data:`TABLE`'s rows, intelrt's columns
    and the ``contributed`` ones (every installed backend's ``quantization_columns``)."""
    columns = table_columns(contributed)
    head = "| method | `quantization=` | " + " | ".join(c.title for c, _ in columns) + " | LoRA | saves |"
    rule = "|" + "---|" * (len(columns) + 4)
    rows = [head, rule]
    for m in TABLE:
        cells = " | ".join(_cell_text(cell_of(m, c, own)) for c, own in columns)
        rows.append(f"| {m.title} | {f'`{m.request}`' if m.request else 'checkpoint'} | {cells} | "
                    f"{'yes' if m.lora else 'no'} | {'yes' if m.serializable else 'no'} |")
    return "\n".join(rows)


def markdown_sources(contributed: Sequence[QuantizationColumns] = ()) -> str:
    """Every cell's source and note, per method (the table's footnotes)."""
    columns = table_columns(contributed)
    lines = []
    for m in TABLE:
        lines.append(f"\n### {m.title}\n")
        seen: dict[tuple[str, str | None], list[str]] = {}
        for c, own in columns:
            cell = cell_of(m, c, own)
            seen.setdefault((cell.source, cell.note), []).append(c.title)
        for (source, note), titles in seen.items():
            lines.append(f"- {', '.join(titles)}: {source}" + (f". {note}" if note else ""))
        kernels: dict[str, list[str]] = {}
        for c, own in columns:
            kernel = cell_of(m, c, own).kernel
            if kernel:
                kernels.setdefault(str(kernel), []).append(c.title)
        for kernel, titles in kernels.items():
            lines.append(f"- kernel ({', '.join(titles)}): {kernel}")
        lines.append(f"- LoRA: {m.lora_reason}")
        lines.append(f"- saving: {m.serializable_source}")
    return "\n".join(lines)


BEGIN, END = "<!-- table: generated from intelrt.quantization.methods.TABLE -->", "<!-- end of the generated table -->"


def render_page(page: str, contributed: Sequence[QuantizationColumns] = ()) -> str:
    """``page`` (docs/quantization.md) with its generated section replaced by the current table
    (``contributed``: the installed backends' columns; ``intelrt.cli.quantization_page`` passes them)."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"the page has no generated section ({BEGIN} … {END})")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return (f"{head}{BEGIN}\n{markdown_table(contributed)}\n\n## Sources of each cell\n"
            f"{markdown_sources(contributed)}\n{END}{tail}")
