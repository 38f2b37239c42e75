"""What logprobs, json_schema decoding and LoRA adapters cost ``intelrt serve`` against plain greedy
serving (issue 28), on one server, in one run, through the ``openai`` client.

    python benchmarks/bench_serve_features.py --out results/     # Qwen3-0.6B-shaped, random bf16 weights, cuda
    python benchmarks/bench_serve_features.py --tiny --out /tmp/r # the tiny model on the CPU

Builds the model from its config (no download; ``bench_serve.build`` less its tokenizer) with the
embedded tiny model's byte-level tokenizer (a grammar needs tokens that spell JSON) and no
end-of-sequence token, starts ``intelrt serve`` on 127.0.0.1, then for each mode — ``greedy``,
``logprobs`` (``logprobs=5``), ``json_schema`` (``response_format`` with a schema whose answer is
longer than ``--max-tokens``, so every mode generates the same count), ``lora`` (every request
names a LoRA adapter of rank 16 on every projection, random weights, served with ``--lora``: each
look runs the model's own forward with PEFT's mixed-batch hooks), ``lora_mixed`` (every other
client names it, the rest the base model: one batch of both) — runs ``--concurrency``
clients (32) sending non-streamed ``/v1/completions`` back to back, ``--requests-per-client``
each, after an unmeasured warm-up round. Prints per mode: requests done, tokens, tok/s over the
mode's wall time, and the ratio to greedy; writes the same as JSON to ``--out``/serve_features.json.
A mode the server refuses (an engine that does not apply ``SamplingParams`` yet) is reported with
the server's message, not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import free_port, stop, wait_up  # noqa: E402  (this directory's sibling)

MODES = ("greedy", "logprobs", "json_schema", "lora", "lora_mixed")
ADAPTER = "adapter"
"""The served name of the benchmark's LoRA adapter."""
LOGPROBS = 5


def schema(items: int) -> dict[str, Any]:
    """An answer of ``items`` four-letter words: longer than any ``--max-tokens`` asked here."""
    return {"type": "object", "required": ["words"], "additionalProperties": False,
            "properties": {"words": {"type": "array", "minItems": items, "maxItems": items,
                                     "items": {"type": "string", "pattern": "^[a-z]{4}$"}}}}


def build(workdir: Path, tiny: bool, device: str) -> None:
    from transformers import AutoConfig, GenerationConfig

    from intelrt.cli.bench import build_model

    build_model(workdir, tiny=tiny, device=device)  # with the embedded tiny model's byte-level tokenizer
    config = AutoConfig.from_pretrained(workdir)
    config.eos_token_id, config.bos_token_id = None, None
    config.save_pretrained(workdir)
    generation = GenerationConfig.from_pretrained(workdir)
    generation.eos_token_id, generation.bos_token_id = None, None
    generation.save_pretrained(workdir)
    build_adapter(workdir)


def build_adapter(workdir: Path) -> Path:
    """A LoRA adapter of the model in ``workdir`` (rank 16, every projection, random non-zero weights)
    in ``workdir/lora``, as ``PeftModel.save_pretrained`` writes it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(workdir)
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, init_lora_weights=False,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    get_peft_model(model, config).save_pretrained(workdir / "lora")
    return workdir / "lora"


def prompts(count: int, tokens: int) -> list[list[int]]:
    """Token-id prompts of ``tokens`` ids of the tokenizer's words (the same length in every mode)."""
    import random

    rng = random.Random(0)
    return [[rng.randrange(3, 384) for _ in range(tokens)] for _ in range(count)]


def body(mode: str, max_tokens: int) -> dict[str, Any]:
    extra: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0}
    if mode == "logprobs":
        extra["logprobs"] = LOGPROBS
    elif mode == "json_schema":
        extra["extra_body"] = {"response_format": {"type": "json_schema", "json_schema": {
            "name": "words", "schema": schema(max_tokens), "strict": True}}}
    return extra


async def run_mode(url: str, mode: str, texts: list[Any], concurrency: int, per_client: int,
                   max_tokens: int) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    settings = body(mode, max_tokens)
    errors: list[str] = []
    tokens = 0
    done = 0

    async def one(text: Any, model: str) -> int:
        answer = await client.completions.create(model=model, prompt=text, **settings)
        return answer.usage.completion_tokens if answer.usage else 0

    async def worker(index: int, rounds: int) -> None:
        nonlocal tokens, done
        model = ADAPTER if mode == "lora" or (mode == "lora_mixed" and index % 2) else "bench"
        for r in range(rounds):
            try:
                got = await one(texts[(index * rounds + r) % len(texts)], model)  # not `tokens += await`: racy
                tokens += got
                done += 1
            except openai.APIStatusError as exc:
                errors.append(f"{exc.status_code}: {exc.message}")
                return

    try:
        await asyncio.gather(*(worker(i, 1) for i in range(concurrency)))  # warm-up, not measured
        if errors:
            return {"mode": mode, "refused": errors[0]}
        tokens = done = 0
        began = time.monotonic()
        await asyncio.gather(*(worker(i, per_client) for i in range(concurrency)))
        seconds = time.monotonic() - began
    finally:
        await client.close()
    return {"mode": mode, "requests": done, "tokens": tokens, "seconds": round(seconds, 3),
            "tok_s": round(tokens / seconds, 1) if seconds else 0.0, "errors": errors[:3]}


def main(argv: list[str] | None = None) -> int:
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for serve_features.json")
    parser.add_argument("--tiny", action="store_true", help="the tiny model on the CPU, a small workload")
    parser.add_argument("--device", default=None, help="cuda, xpu, hpu or cpu (default: cuda when present)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 128 (tiny 16)")
    parser.add_argument("--max-tokens", type=int, default=None, help="default 128 (tiny 16)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"a subset of {', '.join(MODES)}")
    parser.add_argument("--startup-seconds", type=float, default=480)
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    prompt_tokens = args.prompt_tokens or (16 if args.tiny else 128)
    max_tokens = args.max_tokens or (16 if args.tiny else 128)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="intelrt-bench-features-"))
    build(workdir, args.tiny, device)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "server.log"
    with log.open("wb") as handle:
        process = subprocess.Popen([sys.executable, "-m", "intelrt.cli", "serve", str(workdir), "--port", str(port),
                                    "--served-model-name", "bench", "--backend", device, "--no-access-log",
                                    "--lora", f"{ADAPTER}={workdir / 'lora'}"],
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_up("intelrt", url, process, args.startup_seconds, log)
        texts = prompts(64, prompt_tokens)
        rows = [asyncio.run(run_mode(url, mode, texts, args.concurrency, args.requests_per_client, max_tokens))
                for mode in args.modes.split(",")]
    finally:
        stop(process)
    greedy = next((r for r in rows if r["mode"] == "greedy" and "tok_s" in r), None)
    for row in rows:
        if greedy and "tok_s" in row and greedy["tok_s"]:
            row["vs_greedy"] = round(row["tok_s"] / greedy["tok_s"], 3)
    result = {"device": device, "concurrency": args.concurrency, "prompt_tokens": prompt_tokens,
              "max_tokens": max_tokens, "ready_seconds": round(ready, 1), "modes": rows}
    (out / "serve_features.json").write_text(json.dumps(result, indent=2))
    print(f"{'mode':<12} {'done':>6} {'tokens':>8} {'tok/s':>9} {'vs greedy':>9}")
    for row in rows:
        if "refused" in row:
            print(f"{row['mode']:<12} refused: {row['refused']}")
        else:
            print(f"{row['mode']:<12} {row['requests']:>6} {row['tokens']:>8} {row['tok_s']:>9,.1f} "
                  f"{row.get('vs_greedy', 1.0):>8.2f}x")
    print(f"written: {out / 'serve_features.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
