"""Quantized weights in intelrt's compact step on the CPU (issue 42, SPEC P2): torchao weights fused by rows as
torchao itself slices them, the fidelity of int8 and int4 to the unquantized model measured through
the compact step's own decode steps (and equal to torchao's forward), and another quantizer's
layers (bitsandbytes' ``Linear4bit``) run as themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from varied_weights import varied_copy

from intelrt.decoding.fidelity import Fidelity, compare, model_logits, step_logits

pytest.importorskip("torchao")


@pytest.fixture(scope="module")
def varied(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied"), seed=5)


@pytest.fixture(scope="module")
def prompts(varied: Path) -> Any:
    import json

    import torch

    vocab = json.loads((varied / "config.json").read_text())["vocab_size"]
    # 8 rows x 40 tokens: 320 positions
    return torch.randint(3, vocab, (8, 40), generator=torch.Generator().manual_seed(0))


def _load(path: Path, config: Any = None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, TorchAoConfig

    extra = {"quantization_config": TorchAoConfig(config)} if config is not None else {}
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **extra).eval()


def _torchao_weights(kind: str, rows: list[int]) -> list[Any]:
    import torch

    if kind == "Int4TilePackedTo4dTensor":  # tinygemm's layout is built on CUDA only: its tensors, at random
        from torchao.quantization import Int4TilePackedTo4dTensor

        k, group = 1024, 128
        return [Int4TilePackedTo4dTensor(torch.randint(0, 2**31 - 1, (n // 8, k // 128, 32, 4), dtype=torch.int32),
                                         torch.randn(k // group, n, 2, dtype=torch.bfloat16), [1, group],
                                         torch.Size([n, k])) for n in rows]
    import torchao.quantization as ao
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerGroup

    config = {"Int8Tensor": ao.Int8WeightOnlyConfig(),
              "IntxUnpackedToInt8Tensor": ao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
              "Float8Tensor": ao.Float8WeightOnlyConfig()}[kind]
    weights = []
    for n in rows:
        linear = torch.nn.Linear(256, n, bias=False).to(torch.bfloat16)
        quantize_(linear, config)
        weights.append(linear.weight)
    return weights


@pytest.mark.parametrize("kind", ["Int8Tensor", "IntxUnpackedToInt8Tensor", "Float8Tensor",
                                  "Int4TilePackedTo4dTensor"])
def test_fused_rows_are_what_torchao_slices_back_out(kind: str) -> None:
    """The fused weight's rows, cut by torchao's own ``aten.slice`` of that layout, hold each
    projection's quantized data and scales: the fusion puts rows where torchao reads them."""
    import torch

    from intelrt.decoding.quantized_linears import ROW_DIMS, concatenate

    rows = [64, 16, 16]  # q, k, v of a grouped-query layer
    weights = _torchao_weights(kind, rows)
    assert type(weights[0]).__name__ == kind
    fused, views = concatenate(weights)
    assert type(fused) is type(weights[0]) and tuple(fused.shape) == (sum(rows), weights[0].shape[1])
    start = 0
    for weight, view, n in zip(weights, views, rows, strict=True):
        cut = fused[start:start + n]
        start += n
        for name in ROW_DIMS[kind]:
            if getattr(weight, name, None) is None:
                continue
            original = getattr(weight, name)
            for tensor in (getattr(cut, name), getattr(view, name)):
                assert torch.equal(tensor.view(torch.uint8) if tensor.dtype.itemsize == 1 else tensor,
                                   original.view(torch.uint8) if original.dtype.itemsize == 1 else original), name
        # a view of the fused rows, not a copy
        assert view.qdata.untyped_storage().data_ptr() == fused.qdata.untyped_storage().data_ptr()


def test_padded_rows_are_not_fused_and_run_one_by_one() -> None:
    """tinygemm pads a weight's rows to a multiple of 8: such parts cannot be laid end to end."""
    from intelrt.decoding.quantized_linears import _fusable

    why = _fusable(_torchao_weights("Int4TilePackedTo4dTensor", [64, 8]) + [_padded()])
    assert why is not None and "padded" in why


def _padded() -> Any:
    import torch
    from torchao.quantization import Int4TilePackedTo4dTensor

    # 12 rows stored as 16 (two tiles of 8)
    return Int4TilePackedTo4dTensor(torch.zeros((2, 8, 32, 4), dtype=torch.int32),
                                    torch.zeros((8, 16, 2), dtype=torch.bfloat16), [1, 128], torch.Size([12, 1024]))


def test_int8_and_int4_fidelity_measured_through_the_compact_step(varied: Path, prompts: Any,
                                                                  one_torch_thread: None) -> None:
    """320 positions, teacher-forced through the compact step's decode steps (and as the compiled
    few-row step writes its projections): int8 keeps nearly every next token, int4 loses more; the
    compact step's distributions are torchao's own (the quantized model's forward)."""
    import torch
    import torchao.quantization as ao
    from torchao.quantization.granularity import PerGroup

    reference = model_logits(_load(varied), prompts)
    assert compare(reference, step_logits(_load(varied), prompts)).kl_mean < 1e-6  # the step itself adds nothing
    measured: dict[str, Fidelity] = {}
    for name, config in (("int8", ao.Int8WeightOnlyConfig()),
                         ("int4", ao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))):
        model = _load(varied, config)
        torchao_own = compare(reference, model_logits(model, prompts))
        ours = compare(reference, step_logits(model, prompts))
        few_rows = compare(reference, step_logits(model, prompts, gemv=True))
        assert ours.positions == 320
        for fidelity in (ours, few_rows):
            assert fidelity.within(torchao_own, top1_slack=0.0, kl_factor=1.01, kl_floor=1e-7), (name, fidelity)
            assert torchao_own.within(fidelity, top1_slack=0.0, kl_factor=1.01, kl_floor=1e-7), (name, fidelity)
        measured[name] = ours
    assert measured["int8"].top1 >= 0.97 and measured["int8"].kl_mean < 1e-3, measured["int8"]
    assert measured["int4"].top1 >= 0.5 and measured["int4"].kl_mean < 0.05, measured["int4"]
    assert measured["int4"].kl_mean > 10 * measured["int8"].kl_mean  # 4 bits are measurably coarser than 8


def test_another_quantizers_layers_run_as_themselves(varied: Path, prompts: Any, one_torch_thread: None) -> None:
    """bitsandbytes' Linear4bit is a module of its own: the compact step calls it per projection."""
    pytest.importorskip("bitsandbytes")
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from intelrt.decoding.compact import CompactModel
    from intelrt.decoding.quantized_linears import QuantizedProjections

    model = AutoModelForCausalLM.from_pretrained(
        varied, dtype=torch.float32, quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)).eval()
    layer = CompactModel(model).layers[0]
    assert isinstance(layer.qkv, QuantizedProjections) and not layer.qkv.fused
    assert type(layer.qkv.linears[0]).__name__ == "Linear4bit"
    rows = prompts[:2, :16]
    own = compare(model_logits(model, rows), step_logits(model, rows))
    assert own.top1 == 1.0 and own.kl_mean < 1e-6, own
