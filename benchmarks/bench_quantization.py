"""Quantized decode, intelrt against plain transformers with the same quantization (issue 29).

    python benchmarks/bench_quantization.py --out results/           # Llama-3-8B shape, random weights, cuda
    python benchmarks/bench_quantization.py --out /tmp/q --shape tiny  # the CPU smoke test (seconds)

For bf16, torchao int8 and int4 weight-only (quantized while loading, and loaded back from a saved
torchao checkpoint) and FP8 (torchao float8 on CUDA): weights memory, batch-1 and batch-16
decode tokens/s and peak memory of plain ``model.generate`` and of intelrt's decode loop on the
same loaded model (static KV cache, the model's own forward: the compact step takes plain
linears only), their ratio, and whether their greedy tokens agree; then, on 2 layers, whether
the quantized model's greedy tokens equal those of a float32 model holding its dequantized
weights. The quantization of each side is what ``intelrt.quantization.decide`` plans; a method
the device does not run is recorded with the plan's reason. One JSON file per run in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES = {
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 4096},
    "tiny": {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512},
}
METHODS = ("bf16", "int8", "int4", "int4-checkpoint", "fp8")


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.accelerator.synchronize()


def _memory(device: str) -> tuple[int, int]:
    import torch

    if device == "cpu" or not torch.accelerator.is_available():
        return 0, 0
    return int(torch.accelerator.memory_allocated()), int(torch.accelerator.max_memory_allocated())


def _reset_peak(device: str) -> None:
    import torch

    if device != "cpu" and torch.accelerator.is_available():
        torch.accelerator.reset_peak_memory_stats()


def _stored_bytes(tensor: Any) -> int:
    """Bytes a tensor holds; a torchao tensor subclass counts its inner tensors (qdata, scales)."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(_stored_bytes(getattr(tensor, n)) for n in names if getattr(tensor, n) is not None)
    return int(tensor.numel() * tensor.element_size())


def build(shape: str, layers: int | None, directory: Path, device: str) -> Path:
    """A random-weight Llama of ``shape`` saved in bfloat16 (seeded), so every method loads the same weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    facts = dict(SHAPES[shape])
    if layers is not None:
        facts["num_hidden_layers"] = layers
    config = LlamaConfig(**facts, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory)
    del model
    return directory


def plan(method: str, directory: Path, device: str) -> Any:
    from intelrt.quantization import Target, decide, read_checkpoint_quantization

    config = json.loads((directory / "config.json").read_text())
    request = {"bf16": None, "int8": "int8", "int4": "int4", "int4-checkpoint": None, "fp8": "fp8"}[method]
    target = Target(device)
    if device == "cuda":
        import torch

        target = Target("cuda", capability=tuple(torch.cuda.get_device_capability()))  # type: ignore[arg-type]
    return decide(request, read_checkpoint_quantization(config, directory), target,
                  in_features=(config["hidden_size"], config["intermediate_size"]))


def load(directory: Path, choice: Any, device: str, dtype: str = "bfloat16") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from intelrt.quantization.builders import from_pretrained_kwargs

    kwargs = from_pretrained_kwargs(choice)
    kwargs.setdefault("dtype", getattr(torch, dtype))
    return AutoModelForCausalLM.from_pretrained(directory, device_map=device, **kwargs).eval()


def plain_decode(model: Any, ids: Any, new: int) -> tuple[list[list[int]], float]:
    import torch

    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False,
                       attention_mask=torch.ones_like(ids))  # warm up
        _sync(str(ids.device.type))
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             attention_mask=torch.ones_like(ids))
        _sync(str(ids.device.type))
    return out[:, ids.shape[1]:].tolist(), time.perf_counter() - start


def intelrt_decode(model: Any, ids: Any, new: int) -> tuple[list[list[int]], float]:
    import torch

    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.keywords import DecodeOptions
    from intelrt.hooks.payloads import DecodeChoice

    decoder = FastDecoder(model, DecodeChoice("fast", cache="static", step="model"), None)
    options = DecodeOptions(max_new_tokens=new, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
                            eos_token_ids=(), pad_token_id=0)
    mask = torch.ones_like(ids)
    decoder.decode(ids, mask, DecodeOptions(**{**options.__dict__, "max_new_tokens": 2}))  # warm up
    _sync(str(ids.device.type))
    start = time.perf_counter()
    tokens, _ = decoder.decode(ids, mask, options)
    _sync(str(ids.device.type))
    return tokens.tolist(), time.perf_counter() - start


def dequantized_identity(directory: Path, method: str, device: str, new: int) -> dict[str, Any]:
    """2 layers: the quantized model in float32 against a float32 model of its dequantized weights."""
    import torch

    quantized_plan = plan(method, directory, device)
    if quantized_plan.choice is None:
        return {"skipped": "not quantized"}
    model = load(directory, quantized_plan.choice, device, "float32")
    reference = load(directory, None, device, "float32")
    with torch.no_grad():
        for (_, module), (_, twin) in zip(model.named_modules(), reference.named_modules(), strict=True):
            weight = getattr(module, "weight", None)
            if weight is not None and hasattr(weight, "dequantize"):
                twin.weight.copy_(weight.dequantize().float())
    ids = torch.randint(3, reference.config.vocab_size, (4, 16), generator=torch.Generator().manual_seed(1)).to(device)
    ours, _ = plain_decode(model, ids, new)
    theirs, _ = plain_decode(reference, ids, new)
    return {"identical": ours == theirs, "rows": len(ours), "new_tokens": new}


def measure(directory: Path, method: str, device: str, new: int, batches: list[int]) -> dict[str, Any]:
    import torch

    from intelrt.errors import PlanError

    try:
        decided = plan(method, directory, device)
    except PlanError as refused:
        return {"method": method, "skipped": str(refused)}
    _reset_peak(device)
    before, _ = _memory(device)
    model = load(directory, decided.choice, device)
    after, _ = _memory(device)
    row: dict[str, Any] = {"method": method, "plan": decided.reason, "notes": list(decided.notes),
                           "weights_bytes": after - before if device != "cpu" else
                           sum(_stored_bytes(t) for t in model.state_dict().values()),
                           "batches": {}}
    for rows in batches:
        ids = torch.randint(3, model.config.vocab_size, (rows, 32), generator=torch.Generator().manual_seed(rows))
        ids = ids.to(device)
        _reset_peak(device)
        plain_tokens, plain_s = plain_decode(model, ids, new)
        _, plain_peak = _memory(device)
        _reset_peak(device)
        try:
            ours_tokens, ours_s = intelrt_decode(model, ids, new)
            _, ours_peak = _memory(device)
            ours: dict[str, Any] = {"tok_s": rows * new / ours_s, "peak_bytes": ours_peak,
                                    "same_tokens": ours_tokens == plain_tokens}
        except Exception as failed:  # noqa: BLE001 - recorded: the row says why intelrt could not run it
            ours = {"failed": f"{type(failed).__name__}: {failed}"}
        plain = {"tok_s": rows * new / plain_s, "peak_bytes": plain_peak}
        ratio = ours["tok_s"] / plain["tok_s"] if "tok_s" in ours else None
        row["batches"][str(rows)] = {"transformers": plain, "intelrt": ours, "ratio": ratio}
    del model
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the JSON results")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--device", default=None, help="cuda, xpu, hpu or cpu (default: the accelerator, else cpu)")
    parser.add_argument("--new-tokens", type=int, default=None, help="decode steps (default 128; tiny: 8)")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    import torch

    device = args.device or (torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu")
    new = args.new_tokens or (8 if args.shape == "tiny" else 128)
    batches = [int(b) for b in args.batches.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"shape": args.shape, "device": device, "new_tokens": new, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = build(args.shape, None, Path(tmp) / "bf16", device)
        small = build(args.shape, 2, Path(tmp) / "two-layers", "cpu" if args.shape == "tiny" else device)
        checkpoint = None
        for method in methods:
            directory = base
            if method == "int4-checkpoint":
                if checkpoint is None:
                    from intelrt.errors import PlanError
                    from intelrt.quantization.saving import save_quantized

                    try:
                        decided = plan("int4", base, device)
                        model = load(base, decided.choice, device)
                        checkpoint = save_quantized(model, decided.choice, Path(tmp) / "int4-saved")
                        del model
                    except PlanError as refused:
                        result["rows"].append({"method": method, "skipped": str(refused)})
                        continue
                directory = checkpoint
            row = measure(directory, method, device, new, batches)
            if method in ("int8", "int4") and "skipped" not in row:
                row["float32_dequantized_2_layers"] = dequantized_identity(small, method, device, min(new, 16))
            result["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "notes"}), flush=True)
    name = args.out / f"bench_quantization_{args.shape}_{device}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    name.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
