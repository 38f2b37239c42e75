"""``intelrt serve`` against ``transformers serve`` (issue 19), in one run, through one client.

    python benchmarks/bench_serve.py --shape qwen3-0.6b   # Qwen3-0.6B-shaped, random bf16 weights (the H200 run)
    python benchmarks/bench_serve.py --tiny               # the tiny model on the CPU, a few minutes

Builds the model from its config (no download) with a word-level tokenizer over its whole
vocabulary (every token id decodes to a word, so both servers stream every token) and no
end-of-sequence token (every request generates exactly ``--max-tokens``). Then, one server at a
time, each a process of its own on 127.0.0.1: ``intelrt serve``, ``transformers serve`` and
``transformers serve --continuous-batching``. For concurrency 1, 16 and 64, clients of the
``openai`` Python client (the same for all three; for 16 and more, spread over processes so the
client is not what is measured) stream ``/v1/completions`` back to back: ``--requests-per-client``
each, after an unmeasured warm-up round at that concurrency. A cell stops at ``--cell-seconds``:
requests unfinished by then are cut and counted as such. Per server and concurrency: time to first
token p50/p99 (from sending to the first text), inter-token latency (a request's time from first to
last text over its tokens after the first; p50 over requests), total generated tokens per second
(over the cell's wall time), and intelrt's ratios to the better ``transformers serve`` mode. Ends
with PASS/MISS against issue 19's targets: at concurrency 64, total tok/s >= 5x the better
``transformers serve`` mode; at concurrency 1, time to first token p50 <= ``transformers serve``'s
(the lower of its two modes).

``--servers`` runs a subset; with ``--results FILE`` each run adds its rows to FILE and the table
and verdict cover every server FILE holds (so the servers can run in separate commands).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

SERVERS = ("intelrt", "transformers", "transformers-cb")
TARGET_TOK_S_RATIO = 5.0
"""At concurrency 64: intelrt's total tok/s over the better transformers serve mode's."""
CLIENTS_PER_PROCESS = 8
SHAPES = ("qwen3-0.6b", "tiny")


@dataclass
class Request:
    ttft: float | None = None
    itl: float | None = None
    tokens: int = 0
    finished: bool = False
    error: str | None = None


@dataclass
class Cell:
    server: str
    concurrency: int
    requests: int = 0
    finished: int = 0
    tokens: int = 0
    seconds: float = 0.0
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    itl_p50: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


# -- the model ---------------------------------------------------------------------------------

def build(workdir: Path, shape: str, device: str) -> None:
    """The model's weights (``intelrt.cli.bench.build_model``), a word-level tokenizer over its
    vocabulary, and no end-of-sequence token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, GenerationConfig, PreTrainedTokenizerFast

    from intelrt.cli.bench import build_model
    from intelrt.tiny import CHAT_TEMPLATE

    build_model(workdir, tiny=shape == "tiny", device=device)
    config = AutoConfig.from_pretrained(workdir)
    # Special tokens are matched anywhere in a text: named so that no word contains one.
    vocabulary = {"<unk>": 0, "<pad>": 1, **{f"w{i}": i for i in range(2, config.vocab_size)}}
    words = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    for stale in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (workdir / stale).unlink(missing_ok=True)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(workdir)
    config.eos_token_id, config.bos_token_id, config.pad_token_id = None, None, 1
    config.save_pretrained(workdir)
    generation = GenerationConfig.from_pretrained(workdir)
    generation.eos_token_id, generation.bos_token_id, generation.pad_token_id = None, None, 1
    generation.save_pretrained(workdir)


def prompts(count: int, tokens: int, vocab: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(2, vocab)}" for _ in range(tokens)) for _ in range(count)]


# -- the servers -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(server: str, workdir: Path, device: str, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """(the server's process, its URL, the model name clients send)."""
    port = free_port()
    if server == "intelrt":
        command = [sys.executable, "-m", "intelrt.cli", "serve", str(workdir), "--port", str(port),
                   "--served-model-name", "bench", "--backend", device]
        name = "bench"
    else:
        cli = shutil.which("transformers", path=os.path.dirname(sys.executable)) or "transformers"
        command = [cli, "serve", str(workdir), "--host", "127.0.0.1", "--port", str(port), "--device", device]
        command += ["--continuous-batching"] if server == "transformers-cb" else []
        name = str(workdir)
    handle = log.open("wb")
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    return process, f"http://127.0.0.1:{port}", name


def wait_up(server: str, url: str, process: subprocess.Popen[bytes], timeout: float, log: Path) -> float:
    """Seconds until the server answers ready (intelrt: ``/ready``; transformers: ``/health``)."""
    import urllib.request

    path = "/ready" if server == "intelrt" else "/health"
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"{server} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + path, timeout=5) as answer:
                if answer.status == 200:
                    return time.monotonic() - began
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{server} not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# -- the clients -------------------------------------------------------------------------------

async def _one(client: Any, model: str, prompt: str, max_tokens: int, deadline: float) -> Request:
    """One streamed completion; cut (unfinished, its streamed chunks counted as tokens) at ``deadline``."""
    result = Request()
    sent = time.perf_counter()
    first = last = None
    chunks = 0
    usage = None
    try:
        async with asyncio.timeout(max(0.0, deadline - time.time())):
            stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                                     stream=True, stream_options={"include_usage": True})
            async for chunk in stream:
                now = time.perf_counter()
                if chunk.choices and chunk.choices[0].text:
                    chunks += 1
                    first = first or now
                    last = now
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
        result.finished = True
    except TimeoutError:
        pass
    except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
        result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    result.tokens = usage.completion_tokens if usage is not None and result.finished else chunks
    if first is not None:
        result.ttft = first - sent
        if last is not None and result.tokens > 1 and last > first:
            result.itl = (last - first) / (result.tokens - 1)
    return result


async def _clients(url: str, model: str, texts: list[str], clients: int, per_client: int, max_tokens: int,
                   deadline: float) -> tuple[list[Request], float, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)

    async def worker(index: int) -> list[Request]:
        done = []
        for turn in range(per_client):
            if time.time() > deadline:
                break
            prompt = texts[(index * per_client + turn) % len(texts)]
            done.append(await _one(client, model, prompt, max_tokens, deadline))
        return done

    began = time.time()
    try:
        results = await asyncio.gather(*(worker(i) for i in range(clients)))
    finally:
        await client.close()
    return [r for rs in results for r in rs], began, time.time()


def _client_process(url: str, model: str, texts: list[str], clients: int, per_client: int, max_tokens: int,
                    seconds: float, barrier: Any = None) -> tuple[list[dict[str, Any]], float, float]:
    import openai  # noqa: F401 - imported before the barrier: no process starts its clients late

    if barrier is not None:
        barrier.wait(600)  # every process starts its clients at once
    deadline = time.time() + seconds
    results, began, ended = asyncio.run(_clients(url, model, texts, clients, per_client, max_tokens, deadline))
    return [asdict(r) for r in results], began, ended


def run_cell(server: str, url: str, model: str, texts: list[str], concurrency: int, per_client: int, max_tokens: int,
             seconds: float) -> Cell:
    """``concurrency`` clients, ``per_client`` streamed requests each, stopped after ``seconds``."""
    processes = max(1, math.ceil(concurrency / CLIENTS_PER_PROCESS)) if concurrency > 1 else 1
    shares = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    if processes == 1:
        outcomes = [_client_process(url, model, texts, concurrency, per_client, max_tokens, seconds)]
    else:
        context = get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(processes, mp_context=context) as pool:
            barrier = manager.Barrier(processes)
            futures = [pool.submit(_client_process, url, model, texts[i::processes] or texts, share, per_client,
                                   max_tokens, seconds, barrier) for i, share in enumerate(shares)]
            outcomes = [f.result() for f in futures]
    requests = [Request(**r) for rows, _, _ in outcomes for r in rows]
    began, ended = min(o[1] for o in outcomes), max(o[2] for o in outcomes)
    cell = Cell(server, concurrency, len(requests), sum(r.finished for r in requests),
                sum(r.tokens for r in requests), ended - began)
    ttfts = sorted(r.ttft for r in requests if r.ttft is not None)
    itls = sorted(r.itl for r in requests if r.itl is not None)
    if ttfts:
        cell.ttft_p50, cell.ttft_p99 = _percentile(ttfts, 50), _percentile(ttfts, 99)
    if itls:
        cell.itl_p50 = _percentile(itls, 50)
    cell.errors = sorted({r.error for r in requests if r.error})[:3]
    return cell


def _percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return float(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1])


# -- the report --------------------------------------------------------------------------------

def best_transformers(cells: list[Cell], concurrency: int) -> tuple[Cell | None, Cell | None]:
    """(the transformers cell with the most tok/s, the one with the lowest TTFT p50) at ``concurrency``."""
    theirs = [c for c in cells if c.server != "intelrt" and c.concurrency == concurrency]
    fastest = max(theirs, key=lambda c: c.tok_s, default=None)
    quickest = min((c for c in theirs if c.ttft_p50 is not None), key=lambda c: c.ttft_p50 or 0.0, default=None)
    return fastest, quickest


def table(cells: list[Cell]) -> str:
    def ms(value: float | None) -> str:
        return f"{value * 1000:,.1f}" if value is not None else "-"

    lines = [f"{'server':<16} {'conc':>4} {'done':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} "
             f"{'tok/s':>9} {'vs best tf':>10}  (ms; tok/s over the cell's wall time)"]
    for cell in sorted(cells, key=lambda c: (c.concurrency, SERVERS.index(c.server))):
        fastest, _ = best_transformers(cells, cell.concurrency)
        ratio = (f"{cell.tok_s / fastest.tok_s:.2f}x" if cell.server == "intelrt" and fastest is not None
                 and fastest.tok_s else "")
        lines.append(f"{cell.server:<16} {cell.concurrency:>4} {cell.finished:>4}/{cell.requests:<4} "
                     f"{ms(cell.ttft_p50):>9} {ms(cell.ttft_p99):>9} {ms(cell.itl_p50):>8} {cell.tok_s:>9,.0f} "
                     f"{ratio:>10}" + (f"  errors: {'; '.join(cell.errors)}" if cell.errors else ""))
    return "\n".join(lines)


def verdict(cells: list[Cell]) -> list[str]:
    lines = []
    ours = {c.concurrency: c for c in cells if c.server == "intelrt"}
    fastest, _ = best_transformers(cells, 64)
    if 64 in ours and fastest is not None and fastest.tok_s:
        ratio = ours[64].tok_s / fastest.tok_s
        lines.append(f"{'PASS' if ratio >= TARGET_TOK_S_RATIO else 'MISS'} concurrency 64: {ours[64].tok_s:,.0f} tok/s "
                     f"= {ratio:.2f}x {fastest.server} ({fastest.tok_s:,.0f} tok/s; target >= "
                     f"{TARGET_TOK_S_RATIO:g}x the better transformers serve mode)")
    else:
        lines.append("MISS concurrency 64: not measured for intelrt and transformers serve in this run/results file")
    _, quickest = best_transformers(cells, 1)
    if 1 in ours and ours[1].ttft_p50 is not None and quickest is not None and quickest.ttft_p50 is not None:
        ok = ours[1].ttft_p50 <= quickest.ttft_p50
        lines.append(f"{'PASS' if ok else 'MISS'} concurrency 1: TTFT p50 {ours[1].ttft_p50 * 1000:.1f} ms vs "
                     f"{quickest.server} {quickest.ttft_p50 * 1000:.1f} ms (target <= transformers serve's)")
    else:
        lines.append("MISS concurrency 1: not measured for intelrt and transformers serve in this run/results file")
    return lines


# -- the run -----------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=SHAPES, default="qwen3-0.6b", help="the model's shape (random weights)")
    parser.add_argument("--tiny", action="store_true", help="--shape tiny on the CPU, with a small workload")
    parser.add_argument("--device", default=None, help="cuda, xpu, hpu or cpu (default: cuda when present)")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"which of {', '.join(SERVERS)} to run")
    parser.add_argument("--concurrency", default="1,16,64", help="client counts, comma-separated")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="tokens per prompt (default 128; tiny 16)")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens per completion (default 128; tiny 16)")
    parser.add_argument("--requests-per-client", type=int, default=2, help="streamed requests each client sends")
    parser.add_argument("--cell-seconds", type=float, default=None,
                        help="a server x concurrency cell stops after this (default 30; tiny 15)")
    parser.add_argument("--startup-seconds", type=float, default=480, help="how long a server may take to be ready")
    parser.add_argument("--workdir", default=None, help="where the model and server logs go (default: a temp dir)")
    parser.add_argument("--results", default=None, help="JSON file: rows of earlier runs are shown too, this run's added")
    args = parser.parse_args(argv)
    if args.tiny:
        args.shape, args.device = "tiny", args.device or "cpu"
    tiny = args.shape == "tiny"
    prompt_tokens = args.prompt_tokens or (16 if tiny else 128)
    max_tokens = args.max_tokens or (16 if tiny else 128)
    seconds = args.cell_seconds or (15.0 if tiny else 30.0)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = sorted(set(servers) - set(SERVERS))
    if unknown:
        parser.error(f"unknown server(s) {', '.join(unknown)}; choose from {', '.join(SERVERS)}")
    levels = [int(c) for c in args.concurrency.split(",")]
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="intelrt-bench-serve-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir = workdir / "model"
    began = time.monotonic()
    if not (model_dir / "config.json").is_file():
        build(model_dir, args.shape, device)
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    print(f"bench_serve: {args.shape} model in {model_dir} ({time.monotonic() - began:.0f} s); device {device}; "
          f"{prompt_tokens}-token prompts, {max_tokens} new tokens, {args.requests_per_client} requests per client, "
          f"cells stop at {seconds:g} s", flush=True)
    results = Path(args.results) if args.results else None
    earlier = [Cell(**row) for row in json.loads(results.read_text())["cells"]] \
        if results is not None and results.is_file() else []
    cells: list[Cell] = [c for c in earlier if c.server not in servers]
    failures: list[str] = []
    for server in servers:
        log = workdir / f"{server}.log"
        process, url, name = start(server, model_dir, device, log)
        try:
            ready = wait_up(server, url, process, args.startup_seconds, log)
            print(f"bench_serve: {server} ready after {ready:.0f} s", flush=True)
            for level in levels:
                texts = prompts(level * args.requests_per_client, prompt_tokens, vocab, seed=level)
                warm = run_cell(server, url, name, prompts(level, prompt_tokens, vocab, seed=1000 + level), level, 1,
                                min(8, max_tokens), args.startup_seconds)
                cell = run_cell(server, url, name, texts, level, args.requests_per_client, max_tokens, seconds)
                cells.append(cell)
                print(f"bench_serve: {server} c={level}: warm-up {warm.seconds:.1f} s; {cell.finished}/{cell.requests} "
                      f"finished, {cell.tok_s:,.0f} tok/s, TTFT p50 {(cell.ttft_p50 or 0) * 1000:.1f} ms"
                      + (f"; errors: {'; '.join(cell.errors)}" if cell.errors else ""), flush=True)
                if results is not None:  # after every cell: a run cut short still leaves its rows
                    results.write_text(json.dumps({"shape": args.shape, "device": device, "prompt_tokens": prompt_tokens,
                                                   "max_tokens": max_tokens, "cells": [asdict(c) for c in cells]},
                                                  indent=2))
        except Exception as exc:  # noqa: BLE001 - the other servers still run; the verdict says what is missing
            failures.append(f"{server}: {type(exc).__name__}: {exc}")
            print(f"bench_serve: {server} failed: {exc}", flush=True)
        finally:
            stop(process)
    print()
    print(f"intelrt serve vs transformers serve — {args.shape}, random weights, on {device} "
          f"(torch {torch.__version__}); {time.monotonic() - began:.0f} s in all")
    print(table(cells))
    for line in verdict(cells):
        print(line)
    for failure in failures:
        print(f"FAILED {failure.splitlines()[0]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
