"""A vision-language model's decode through intelrt against plain ``model.generate`` (issue 26).

    python benchmarks/bench_vlm_generate.py --out results/         # LLaVA-shaped ~1.9B, random weights, cuda
    python benchmarks/bench_vlm_generate.py --shape gemma3-1b-siglip --out results/gemma3
    python benchmarks/bench_vlm_generate.py --rows 4 --out results/rows4   # four images decoded together
    python benchmarks/bench_vlm_generate.py --tiny --out /tmp/vlm  # a tiny shape, on the CPU in seconds

The model is built from its config with random weights (no download): by default a LLaVA whose
language model is Qwen2-1.5B-shaped (a compact-step family of intelrt's fast loop) and whose vision
tower is CLIP-ViT-L/14-336-shaped, one image (576 image tokens) per prompt; ``--shape
gemma3-1b-siglip``: Gemma-3-1B's text decoder (sliding-window layers) with Gemma-3-4B's SigLIP tower
(256 image tokens). 24 text tokens per prompt, greedy ``--new-tokens`` tokens, ``--rows`` prompts. Both sides run the same model object in one process: plain ``model.generate``,
then intelrt's ``Loaded.generate_ids`` — transformers' ``generate`` prefills (vision tower,
projector, merged embeddings), then intelrt's engine steps the language model (compact step,
compiled and graph-captured on a GPU: planned with ``workload="batch"``, so the warm-up call
compiles). Prints and writes (``<out>/bench_vlm_generate.json``) for each side the new tokens per
second of whole calls (median of ``--repeats`` after one warm-up call, prefill included), the ratio
intelrt / plain, the peak device memory, the path intelrt took and why
(``Loaded.last_generation``), and whether the tokens are identical — in float32 by default
(``--dtype bfloat16`` for the speed of a real deployment). A third side, transformers' own compiled
decode (``cache_implementation="static"``, which ``generate`` compiles), is the stronger peer
(``--no-static`` leaves it out). Exit status 1 when float32 tokens differ from plain generate's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

IMAGE_TOKEN = 151655
SHAPES: dict[str, dict[str, Any]] = {
    "llava-qwen2-1.5b": {
        "text_config": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
                        "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                        "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": True},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                          "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                          "projection_dim": 768},
        "image_token_index": IMAGE_TOKEN, "image_seq_length": 576, "vision_feature_select_strategy": "default",
        "vision_feature_layer": -2,
    },
    "gemma3-1b-siglip": {  # Gemma-3-1B's text decoder with Gemma-3-4B's SigLIP tower (sliding-window layers)
        "config": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
                        "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                        "vocab_size": 262208, "sliding_window": 512, "query_pre_attn_scalar": 256,
                        "max_position_embeddings": 32768},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                          "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 896, "patch_size": 14},
        "mm_tokens_per_image": 256, "image_token_index": 262144, "boi_token_index": 255999,
        "eoi_token_index": 256000,
    },
    "tiny": {
        "text_config": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
                        "max_position_embeddings": 512},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14,
                          "projection_dim": 32},
        "image_token_index": 250, "image_seq_length": 4, "vision_feature_select_strategy": "default",
        "vision_feature_layer": -2,
    },
}


def build(shape: dict[str, Any], workdir: Path, dtype: Any, device: str) -> tuple[Any, Any]:
    """(the plan for the config-only directory, the random-weight model built on ``device``)."""
    import torch
    from transformers import AutoModelForImageTextToText, Gemma3Config, LlavaConfig

    import intelrt

    kind = shape.get("config", "llava")
    config_class, architecture = {"llava": (LlavaConfig, "LlavaForConditionalGeneration"),
                                  "gemma3": (Gemma3Config, "Gemma3ForConditionalGeneration")}[kind]
    config = config_class(**{k: v for k, v in shape.items() if not k.endswith("config")},
                          text_config=dict(shape["text_config"]), vision_config=dict(shape["vision_config"]))
    config.architectures = [architecture]
    config.save_pretrained(workdir)
    # Gemma-3's class serves text-generation first: the image path is asked for by its task
    plan = intelrt.plan(workdir, backend="cuda" if device == "cuda" else "cpu", workload="batch",
                        task="image-text-to-text", dtype="float32" if dtype == torch.float32 else "bfloat16")
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None  # decode the full length on both sides
    model.generation_config.pad_token_id = 0
    return plan, model.eval()


def inputs(shape: dict[str, Any], device: str, dtype: Any, rows: int) -> dict[str, Any]:
    """``rows`` prompts of one image each (576 or 256 image tokens) and 24 random text tokens."""
    import torch

    vision = shape["vision_config"]
    generator = torch.Generator().manual_seed(1)
    image_tokens = shape.get("image_seq_length") or shape["mm_tokens_per_image"]
    text = torch.randint(10, min(shape["text_config"]["vocab_size"], 20000) - 1, (rows, 24), generator=generator)
    ids = torch.cat([torch.full((rows, image_tokens), shape["image_token_index"]), text], dim=1)
    pixels = torch.randn((rows, 3, vision["image_size"], vision["image_size"]), generator=generator)
    made = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "pixel_values": pixels.to(device, dtype)}
    if shape.get("config") == "gemma3":  # its processor marks the image tokens (bidirectional attention among them)
        made["token_type_ids"] = (ids == shape["image_token_index"]).long().to(device)
    return made


def timed(device: str, run: Any, repeats: int) -> tuple[Any, float, int, float]:
    """(the last output, the median seconds of ``repeats`` runs after one warm-up, peak bytes, the
    warm-up's seconds: compiles and captures included)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - start
    seconds = []
    out = None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    peak = int(torch.cuda.max_memory_allocated()) if device == "cuda" else 0
    return out, statistics.median(seconds), peak, first


def main() -> int:
    import torch

    from intelrt.runtime.loading import adopt, prepare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for bench_vlm_generate.json")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape, on the CPU")
    parser.add_argument("--shape", choices=[n for n in SHAPES if n != "tiny"], default="llava-qwen2-1.5b")
    parser.add_argument("--rows", type=int, default=1, help="prompts, one image each, decoded together")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-static", action="store_true",
                        help="leave out the static cache + torch.compile side (transformers' own compiled generate)")
    args = parser.parse_args()
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    name = "tiny" if args.tiny else args.shape
    shape = SHAPES[name]
    dtype = getattr(torch, args.dtype)
    settings = {"max_new_tokens": args.new_tokens, "do_sample": False}
    with tempfile.TemporaryDirectory() as workdir:
        plan, model = build(shape, Path(workdir), dtype, device)
        prepare(plan)
        batch = inputs(shape, device, dtype, args.rows)
        width = batch["input_ids"].shape[1]
        sides: dict[str, dict[str, Any]] = {}
        with torch.inference_mode():
            for side, extra in (("plain_generate", {}), ("static_compiled", {"cache_implementation": "static"})):
                if side == "static_compiled" and args.no_static:
                    continue
                out, seconds, peak, first = timed(
                    device, lambda extra=extra: model.generate(**batch, **settings, **extra)[:, width:].tolist(),
                    args.repeats)
                sides[side] = {"tok_s": args.rows * args.new_tokens / seconds, "seconds": seconds, "peak_bytes": peak,
                               "first_call_s": first, "tokens": out}
        loaded = adopt(model, None, plan)
        prompts = batch["input_ids"].tolist()
        extra = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
        ours, ours_s, ours_peak, ours_first = timed(device, lambda: loaded.generate_ids(
            prompts if args.rows > 1 else prompts[0], **extra, **settings), args.repeats)
        report = loaded.last_generation
    ours_rows = ours if ours and isinstance(ours[0], list) else [ours]
    plain = sides["plain_generate"]
    result = {
        "shape": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "dtype": args.dtype,
        "parameters": sum(p.numel() for p in model.parameters()), "new_tokens": args.new_tokens, "rows": args.rows,
        **{side: {k: v for k, v in found.items() if k != "tokens"} for side, found in sides.items()},
        "intelrt": {"tok_s": args.rows * args.new_tokens / ours_s, "seconds": ours_s, "peak_bytes": ours_peak,
                    "first_call_s": ours_first, "path": report.path if report else None,
                    "reason": report.reason if report else None},
        "ratio": plain["seconds"] / ours_s, "identical": ours_rows == plain["tokens"],
    }
    if "static_compiled" in sides:
        static = sides["static_compiled"]
        result["ratio_vs_static"] = static["seconds"] / ours_s
        result["identical_to_static"] = ours_rows == static["tokens"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_vlm_generate.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    static_text = ""
    if "ratio_vs_static" in result:
        static = result["static_compiled"]
        static_text = (f"; static cache + compile {static['tok_s']:.1f} tok/s (intelrt x{result['ratio_vs_static']:.2f}, "
                       f"first call {static['first_call_s']:.0f} s vs intelrt's {ours_first:.0f} s)")
    print(f"{name} ({result['parameters'] / 1e9:.2f}B, {args.dtype}, {result['device']}, {args.rows} row(s)): plain generate "
          f"{plain['tok_s']:.1f} tok/s, intelrt {result['intelrt']['tok_s']:.1f} tok/s "
          f"(x{result['ratio']:.2f}; path {result['intelrt']['path']}){static_text}; peak "
          f"{plain['peak_bytes'] / 2**30:.2f} / {ours_peak / 2**30:.2f} GiB; tokens "
          f"{'identical' if result['identical'] else 'differ'} to plain generate")
    # bfloat16's compiled kernels round differently from eager ones: identity is asked of float32 only
    return 0 if result["identical"] or args.dtype != "float32" else 1


if __name__ == "__main__":
    raise SystemExit(main())
