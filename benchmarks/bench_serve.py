"""``intelrt serve`` against ``transformers serve --continuous-batching`` under workloads like real
traffic (issues 19 and 27), in one run, through one client.

    python benchmarks/bench_serve.py --out results/serve            # the H200 run: Qwen3-1.7B-shaped
    python benchmarks/bench_serve.py --tiny --out /tmp/serve-smoke  # the tiny model on the CPU, minutes

Builds the model from its config (random bf16 weights, no download; on the CPU, so this process
holds no device memory) with a word-level tokenizer over its whole vocabulary — every token id is
one word ``w<id>``, so a prompt of ``n`` words is ``n`` tokens and a streamed chunk's words are its
tokens — and no end-of-sequence token (every request generates exactly its ``max_tokens``). Then,
one server at a time, each a process of its own on 127.0.0.1: ``intelrt serve`` (and, with
``intelrt-no-prefix-cache`` in ``--servers``, the same with ``--no-prefix-caching``),
``transformers serve --continuous-batching`` (and plain ``transformers serve`` when named).
``intelrt-ray`` in ``--servers`` runs ``intelrt serve --replicas 1``: the same server as one Ray
Serve replica behind Ray's HTTP proxy and intelrt's ingress (``intelrt[ray]``); its rows against
plain ``intelrt``'s are the cost of Ray Serve (``ray_overhead`` in the results, issue 40's target
within 10 % on tok/s and TTFT p50).

Workloads (``--workloads``), each a seeded list of (prompt tokens, new tokens) per request:

* ``mixed``: prompts log-uniform in 16 … 1,536 tokens, outputs log-uniform in 16 … 384;
* ``long``: every 8th prompt 8,192 tokens, the others log-uniform in 16 … 256; outputs 16 … 256;
* ``prefix``: one shared 1,024-token prefix, then 16 … 128 tokens of each request's own; outputs
  16 … 128 (the prefix-cache comparison: run with ``intelrt-no-prefix-cache`` too);
* ``chat`` (issue 38): prompts log-normal with a median of 400 tokens (sigma 0.6, 16 … 4,096) and
  every 16th prompt 6,000 tokens, outputs log-normal with a median of 150 (sigma 0.5, 8 … 1,024).

Every cell also prints its *limit* — the tok/s this GPU could reach on exactly the requests the
cell finished: their prompt tokens at the matrix peak (``--peak-tflops``, two FLOPs per parameter
per token) plus ``outputs / concurrency`` decode steps, each reading the weights and the live KV
cache (every row at its mean context) at ``--bandwidth`` — and the share of it reached, and, for
intelrt, what its engine did meanwhile (from ``/metrics``): steps, the share of them that carried
prompt chunks with the decoding rows, and the host's own milliseconds per look (the time not spent
waiting for the device).

For each workload and concurrency (``--concurrency``, default 1, 32, 128, 256): after an
unmeasured warm-up round, ``concurrency`` clients of the ``openai`` Python client (spread over
processes, so the client is not what is measured) stream ``/v1/completions`` back to back until
``--requests`` have been sent (at least one per client); a cell stops at ``--cell-seconds``
(unfinished requests are counted as such). Every row: finished / sent, errors, total generated
tokens per second over the cell's wall time, time to first token p50/p99 (send to first text),
inter-token latency p50/p99 (over every token after a request's first: a chunk's gap over its
tokens), and the server process's peak device memory during the cell (``nvidia-smi``; on the CPU
its resident memory). intelrt's ratio to ``transformers serve --continuous-batching`` follows.

Ends with PASS/MISS against issue 38's targets on the chat workload (tok/s at least 55 % of the
limit at concurrency 128 and 256; at 128 TTFT p50 <= 1.5 s, p99 <= 6 s, ITL p99 <= 60 ms, and
>= 10x transformers serve --continuous-batching) and issue 27's: every intelrt cell 100 % finished with no error;
tok/s >= 4x the continuous-batching transformers serve at concurrency 32 and above; TTFT p99 <= 2 s
at concurrency 32 on the mixed workload; with the shared prefix, TTFT p50 <= 0.3x the run without
prefix caching; peak device memory within the ceiling intelrt printed at start. Results are
written to ``OUT/results.json`` after every cell (rows of servers not run this time, from an
earlier run into the same ``--out``, are kept); server logs go to ``OUT`` too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

SERVERS = ("intelrt", "intelrt-no-prefix-cache", "intelrt-ray", "transformers-cb", "transformers")
DEFAULT_SERVERS = "intelrt,intelrt-no-prefix-cache,transformers-cb"
WORKLOADS = ("mixed", "long", "prefix", "chat")
TARGET_TOK_S_RATIO = 4.0
"""At concurrency 32 and above: intelrt's tok/s over transformers serve --continuous-batching's."""
TARGET_TTFT_P99_S = 2.0
"""Mixed workload, concurrency 32: intelrt's time-to-first-token p99."""
TARGET_PREFIX_TTFT_RATIO = 0.3
"""Shared-prefix workload: intelrt's TTFT p50 over the same server's without prefix caching."""
CLIENTS_PER_PROCESS = 16
PREFIX_TOKENS = 1024
LONG_PROMPT = 8192
QWEN3_1_7B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True, "hidden_act": "silu"}
"""Qwen3-1.7B's shape (the model of issue 27's report)."""
SHAPES = ("llama-3.1-8b", "qwen3-1.7b", "qwen3-0.6b", "tiny")
CHAT_LONG_PROMPT = 6000
TARGET_CHAT_SHARE = 0.55
"""Chat workload, concurrency 128 and 256: intelrt's tok/s over the cell's limit."""
TARGET_CHAT_TTFT_P50_S, TARGET_CHAT_TTFT_P99_S, TARGET_CHAT_ITL_P99_S = 1.5, 6.0, 0.060
TARGET_CHAT_PEER_RATIO = 10.0
H200_PEAK_TFLOPS = 790.0
"""An H200's bf16 matrix throughput as measured on one (the device README's KINDS.md)."""
H200_BANDWIDTH_TB_S = 4.3
"""An H200's device-to-device copy rate as measured on one (TB read and written per second)."""


def terabytes_per_second(text: str) -> float:
    """``--bandwidth`` (argparse type): TB/s, as every benchmark here and ``intelrt bench`` take it; a
    value in bytes/s (``4.3e12``) would count every byte read 1e12 times too fast, so it is refused."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1000:  # nan fails too
        raise argparse.ArgumentTypeError(f"must be the memory bandwidth in TB/s (an H200: {H200_BANDWIDTH_TB_S}), "
                                         f"got {text!r}")
    return value


@dataclass
class Request:
    prompt_tokens: int = 0
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    """Inter-token latency samples: each chunk after the first, its gap over its tokens, per token."""
    tokens: int = 0
    finished: bool = False
    error: str | None = None


@dataclass
class Cell:
    server: str
    workload: str
    concurrency: int
    sent: int = 0
    finished: int = 0
    errors: int = 0
    tokens: int = 0
    seconds: float = 0.0
    tok_s: float = 0.0
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    itl_p50: float | None = None
    itl_p99: float | None = None
    peak_memory_mib: float | None = None
    memory_source: str | None = None
    error_examples: list[str] = field(default_factory=list)
    limit_tok_s: float | None = None
    """What this GPU could reach on the requests the cell finished (the module's docstring)."""
    engine: dict[str, float] = field(default_factory=dict)
    """intelrt's engine counters over the cell (``/metrics``): steps, mixed steps, looks, seconds."""

    @property
    def share(self) -> float | None:
        return self.tok_s / self.limit_tok_s if self.limit_tok_s else None


# -- the model ---------------------------------------------------------------------------------

def build(workdir: Path, shape: str, layers: int | None = None) -> None:
    """The model's random weights (bf16; the tiny model float32), a word-level tokenizer over its
    vocabulary, and no end-of-sequence token — built on the GPU where there is one. ``layers``: that
    many decoder layers of the shape's width instead of its own count (not for the tiny shape)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, GenerationConfig, PreTrainedTokenizerFast

    from intelrt.cli.bench import QWEN3_0_6B, build_model
    from intelrt.cli.shapes import random_model
    from intelrt.tiny import CHAT_TEMPLATE

    if shape == "tiny":
        if layers is not None:
            raise SystemExit("--layers is for the real shapes; the tiny model has its own two layers")
        build_model(workdir, tiny=True, device="cpu")
    else:
        from intelrt.cli.shapes import shape as shape_config

        config = (shape_config("Llama-3.1-8B") if shape == "llama-3.1-8b" else QWEN3_1_7B if shape == "qwen3-1.7b"
                  else {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **QWEN3_0_6B})
        if layers is not None:
            config = {**config, "num_hidden_layers": layers}
        # built on the GPU when there is one (seconds, where an 8B model takes minutes on the CPU)
        model = random_model(config, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu")
        model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id = None, None, 1
        model.save_pretrained(workdir, safe_serialization=True)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
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
    generation = GenerationConfig.from_pretrained(workdir) if (workdir / "generation_config.json").is_file() \
        else GenerationConfig()
    generation.eos_token_id, generation.bos_token_id, generation.pad_token_id = None, None, 1
    generation.save_pretrained(workdir)


# -- the workloads -----------------------------------------------------------------------------

def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _log_normal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(rng.lognormvariate(math.log(median), sigma)))))


def workload(name: str, count: int, vocab: int, seed: int, scale: float = 1.0) -> list[tuple[str, int]]:
    """``count`` (prompt text, max_tokens) of workload ``name``, seeded; ``scale`` shrinks every
    length (the tiny model's CPU smoke run)."""
    rng = random.Random(f"{name}-{seed}")

    def words(n: int) -> str:
        return " ".join(f"w{rng.randrange(2, vocab)}" for _ in range(max(1, int(n * scale))))

    def out(low: int, high: int) -> int:
        return max(2, int(_log_uniform(rng, low, high) * scale))

    requests = []
    prefix_rng = random.Random("the shared prefix")  # the same prefix for every request and cell
    shared = " ".join(f"w{prefix_rng.randrange(2, vocab)}" for _ in range(max(1, int(PREFIX_TOKENS * scale))))
    for i in range(count):
        if name == "mixed":
            requests.append((words(_log_uniform(rng, 16, 1536)), out(16, 384)))
        elif name == "long":
            length = LONG_PROMPT if i % 8 == 7 else _log_uniform(rng, 16, 256)
            requests.append((words(length), out(16, 256)))
        elif name == "prefix":
            requests.append((f"{shared} {words(_log_uniform(rng, 16, 128))}", out(16, 128)))
        elif name == "chat":
            length = CHAT_LONG_PROMPT if i % 16 == 15 else _log_normal(rng, 400, 0.6, 16, 4096)
            requests.append((words(length), max(2, int(_log_normal(rng, 150, 0.5, 8, 1024) * scale))))
        else:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    return requests


def server_context(model_dir: Path, scale: float) -> int:
    """The context every server is started with: the longest request of any workload, within the model's."""
    from transformers import AutoConfig

    longest = max(int(LONG_PROMPT * scale) + 384, int((PREFIX_TOKENS + 128) * scale) + 384, 1536 + 384,
                  int(CHAT_LONG_PROMPT * scale) + 1024)
    return min(int(AutoConfig.from_pretrained(model_dir).max_position_embeddings), longest)


# -- the servers -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(server: str, workdir: Path, device: str, context: int, log: Path,
          extra: list[str]) -> tuple[subprocess.Popen[bytes], str, str]:
    """(the server's process, its URL, the model name clients send)."""
    port = free_port()
    if server.startswith("intelrt"):
        command = [sys.executable, "-m", "intelrt.cli", "serve", str(workdir), "--port", str(port),
                   "--served-model-name", "bench", "--backend", device, "--context-length", str(context),
                   "--max-queue", "4096", *extra]
        if server == "intelrt-no-prefix-cache":
            command.append("--no-prefix-caching")
        if server == "intelrt-ray":  # the same server as one Ray Serve replica (intelrt[ray]; issue 40)
            command += ["--replicas", "1", "--proxy-location", "HeadOnly"]
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

    path = "/ready" if server.startswith("intelrt") else "/health"
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


def ceiling_gib(log: Path) -> float | None:
    """The device memory ceiling intelrt printed at start (GiB), if it printed one."""
    found = re.search(r"device memory ceiling: ([\d,.]+) (GiB|MiB)", log.read_text(errors="replace"))
    if found is None:
        return None
    value = float(found.group(1).replace(",", ""))
    return value if found.group(2) == "GiB" else value / 1024


class MemoryWatch:
    """The peak memory of process group ``pid`` while running (MiB): its GPU memory from
    ``nvidia-smi`` on a GPU, its resident memory on the CPU."""

    def __init__(self, pid: int, device: str) -> None:
        self.pid, self.device = pid, device
        self.peak: float | None = None
        self.source: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _group(self) -> set[int]:
        pids = {self.pid}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pid:
                        pids.add(int(entry.name))
                except OSError:
                    continue
        return pids

    def _sample(self) -> float | None:
        pids = self._group()
        if self.device == "cuda" and shutil.which("nvidia-smi"):
            self.source = "nvidia-smi used_memory of the server's processes"
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            used = [float(parts[1]) for line in out.splitlines() if len(parts := [p.strip() for p in line.split(",")]) == 2
                    and parts[0].isdigit() and int(parts[0]) in pids]
            return sum(used) if used else None
        self.source = "resident memory of the server's processes (VmRSS)"
        total = 0.0
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            found = re.search(r"VmRSS:\s+(\d+) kB", status)
            total += int(found.group(1)) / 1024 if found else 0
        return total

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                value = self._sample()
            except Exception:  # noqa: BLE001 - a missed sample only loses precision
                value = None
            if value is not None:
                self.peak = max(self.peak or 0.0, value)
            self._stop.wait(0.5)


# -- the clients -------------------------------------------------------------------------------

async def _one(client: Any, model: str, prompt: str, max_tokens: int, deadline: float) -> Request:
    """One streamed completion; cut (unfinished, its streamed words counted as tokens) at ``deadline``."""
    result = Request(prompt_tokens=len(prompt.split()))
    sent = time.perf_counter()
    last: float | None = None
    words = 0
    usage = None
    try:
        async with asyncio.timeout(max(0.0, deadline - time.time())):
            stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                                     stream=True, stream_options={"include_usage": True})
            async for chunk in stream:
                now = time.perf_counter()
                text = chunk.choices[0].text if chunk.choices else ""
                count = len(text.split())
                if count:
                    if last is None:
                        result.ttft = now - sent
                    else:
                        result.gaps += [(now - last) / count] * count
                    last = now
                    words += count
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
        result.finished = True
    except TimeoutError:
        pass
    except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
        result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    result.tokens = usage.completion_tokens if usage is not None and result.finished else words
    if result.finished and result.tokens < max_tokens:
        result.error = result.error or f"only {result.tokens} of {max_tokens} tokens"
    return result


async def _clients(url: str, model: str, work: list[tuple[str, int]], clients: int,
                   deadline: float) -> tuple[list[Request], float, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    queue = list(reversed(work))

    async def worker() -> list[Request]:
        done = []
        while queue and time.time() < deadline:
            prompt, max_tokens = queue.pop()
            done.append(await _one(client, model, prompt, max_tokens, deadline))
        return done

    began = time.time()
    try:
        results = await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        await client.close()
    return [r for rs in results for r in rs], began, time.time()


def _client_process(url: str, model: str, work: list[tuple[str, int]], clients: int, seconds: float,
                    barrier: Any = None) -> tuple[list[dict[str, Any]], float, float]:
    import openai  # noqa: F401 - imported before the barrier: no process starts its clients late

    if barrier is not None:
        barrier.wait(600)  # every process starts its clients at once
    deadline = time.time() + seconds
    results, began, ended = asyncio.run(_clients(url, model, work, clients, deadline))
    return [asdict(r) for r in results], began, ended


@dataclass(frozen=True)
class Hardware:
    """What the limit of a cell is computed from: the model's parameters (those a token's matrix work
    multiplies), the bytes a decode step reads of its weights, its KV bytes per token, the device's
    matrix peak and memory bandwidth."""

    parameters: int
    weight_bytes: int
    kv_bytes_per_token: int
    peak_flops: float
    bandwidth: float

    @classmethod
    def of(cls, model_dir: Path, peak_tflops: float, bandwidth_tb_s: float) -> Hardware:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        embedding = model.get_input_embeddings().weight.numel()
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        total = sum(p.numel() for p in model.parameters())
        read = total - (0 if tied else embedding)  # a step reads one row of an untied input embedding
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        dtype_bytes = 2 if str(getattr(config, "dtype", None) or config.torch_dtype) != "torch.float32" else 4
        return cls(read, read * dtype_bytes, 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes,
                   peak_tflops * 1e12, bandwidth_tb_s * 1e12)

    def limit(self, requests: list[Request], concurrency: int) -> float | None:
        """tok/s of ``requests`` (finished ones) at this hardware's limit (the module's docstring)."""
        if not requests:
            return None
        outputs = sum(r.tokens for r in requests)
        prefill = sum(r.prompt_tokens for r in requests) * 2 * self.parameters / self.peak_flops
        rows = min(concurrency, len(requests))
        context = sum(r.prompt_tokens + r.tokens / 2 for r in requests) / len(requests)
        step = (self.weight_bytes + rows * context * self.kv_bytes_per_token) / self.bandwidth
        seconds = prefill + math.ceil(outputs / rows) * step
        return outputs / seconds if seconds else None


def engine_counters(url: str) -> dict[str, float]:
    """intelrt's engine counters from ``/metrics`` (empty for a server without them)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        match = re.match(r"intelrt_engine_(\w+)_total (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def run_cell(server: str, name: str, url: str, model: str, work: list[tuple[str, int]], concurrency: int,
             seconds: float, pid: int, device: str, hardware: Hardware | None = None) -> Cell:
    """``concurrency`` clients streaming ``work`` back to back, stopped after ``seconds``."""
    counted = engine_counters(url)
    processes = max(1, math.ceil(concurrency / CLIENTS_PER_PROCESS)) if concurrency > 1 else 1
    shares = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    with MemoryWatch(pid, device) as memory:
        if processes == 1:
            outcomes = [_client_process(url, model, work, concurrency, seconds)]
        else:
            context = get_context("spawn")
            with context.Manager() as manager, ProcessPoolExecutor(processes, mp_context=context) as pool:
                barrier = manager.Barrier(processes)
                futures = [pool.submit(_client_process, url, model, work[i::processes], share, seconds, barrier)
                           for i, share in enumerate(shares)]
                outcomes = [f.result() for f in futures]
    requests = [Request(**r) for rows, _, _ in outcomes for r in rows]
    began, ended = min(o[1] for o in outcomes), max(o[2] for o in outcomes)
    cell = Cell(server, name, concurrency, len(requests), sum(r.finished and not r.error for r in requests),
                sum(r.error is not None for r in requests), sum(r.tokens for r in requests), ended - began)
    cell.tok_s = cell.tokens / cell.seconds if cell.seconds else 0.0
    ttfts = sorted(r.ttft for r in requests if r.ttft is not None)
    gaps = sorted(g for r in requests for g in r.gaps)
    if ttfts:
        cell.ttft_p50, cell.ttft_p99 = _percentile(ttfts, 50), _percentile(ttfts, 99)
    if gaps:
        cell.itl_p50, cell.itl_p99 = _percentile(gaps, 50), _percentile(gaps, 99)
    cell.peak_memory_mib, cell.memory_source = memory.peak, memory.source
    cell.error_examples = sorted({r.error for r in requests if r.error})[:3]
    if hardware is not None:
        cell.limit_tok_s = hardware.limit([r for r in requests if r.finished and not r.error], concurrency)
    after = engine_counters(url)
    cell.engine = {key: after[key] - counted.get(key, 0.0) for key in after}
    return cell


def _percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return float(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1])


# -- the report --------------------------------------------------------------------------------

def _find(cells: list[Cell], server: str, workload_name: str, concurrency: int) -> Cell | None:
    return next((c for c in cells if (c.server, c.workload, c.concurrency) == (server, workload_name, concurrency)),
                None)


def table(cells: list[Cell]) -> str:
    def ms(value: float | None) -> str:
        return f"{value * 1000:,.1f}" if value is not None else "-"

    lines = [f"{'workload':<8} {'server':<24} {'conc':>4} {'done':>9} {'err':>4} {'tok/s':>9} {'vs tf-cb':>8} "
             f"{'limit':>7} {'share':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'peak MiB':>9}"
             f"  (ms)  engine: steps, mixed, host ms/look"]
    order = {s: i for i, s in enumerate(SERVERS)}
    for cell in sorted(cells, key=lambda c: (WORKLOADS.index(c.workload) if c.workload in WORKLOADS else 9,
                                             c.concurrency, order.get(c.server, 9))):
        theirs = _find(cells, "transformers-cb", cell.workload, cell.concurrency)
        ratio = (f"{cell.tok_s / theirs.tok_s:.2f}x" if cell.server.startswith("intelrt") and theirs is not None
                 and theirs.tok_s else "")
        peak = f"{cell.peak_memory_mib:,.0f}" if cell.peak_memory_mib is not None else "-"
        limit = f"{cell.limit_tok_s:,.0f}" if cell.limit_tok_s else "-"
        share = f"{cell.share:.0%}" if cell.share is not None else "-"
        engine = cell.engine
        looks = engine.get("looks") or 0
        host = ((engine.get("look_seconds", 0) - engine.get("wait_seconds", 0)) / looks * 1000) if looks else None
        steps = (f"  {engine.get('steps', 0):,.0f}, {engine.get('mixed_steps', 0):,.0f}, {host:.1f}"
                 if host is not None else "")
        lines.append(f"{cell.workload:<8} {cell.server:<24} {cell.concurrency:>4} {cell.finished:>4}/{cell.sent:<4} "
                     f"{cell.errors:>4} {cell.tok_s:>9,.0f} {ratio:>8} {limit:>7} {share:>6} {ms(cell.ttft_p50):>9} "
                     f"{ms(cell.ttft_p99):>9} {ms(cell.itl_p50):>8} {ms(cell.itl_p99):>8} {peak:>9}{steps}"
                     + (f"  errors: {'; '.join(cell.error_examples)}" if cell.error_examples else ""))
    return "\n".join(lines)


def verdict(cells: list[Cell], ceilings: dict[str, float | None]) -> list[str]:
    """PASS/MISS lines for issue 27's targets over the cells measured."""
    lines = []
    ours = [c for c in cells if c.server == "intelrt"]
    if not ours:
        return ["MISS: intelrt was not measured in this run/results"]
    incomplete = [c for c in ours if c.finished != c.sent or c.errors]
    lines.append(f"{'PASS' if not incomplete else 'MISS'} every intelrt cell finished all its requests with no error"
                 + ("" if not incomplete else ": " + ", ".join(f"{c.workload} c={c.concurrency} {c.finished}/{c.sent}"
                                                              for c in incomplete)))
    for cell in ours:
        if cell.concurrency < 32:
            continue
        theirs = _find(cells, "transformers-cb", cell.workload, cell.concurrency)
        if theirs is None or not theirs.tok_s:
            lines.append(f"MISS {cell.workload} c={cell.concurrency}: transformers-cb not measured")
            continue
        ratio = cell.tok_s / theirs.tok_s
        lines.append(f"{'PASS' if ratio >= TARGET_TOK_S_RATIO else 'MISS'} {cell.workload} c={cell.concurrency}: "
                     f"{cell.tok_s:,.0f} tok/s = {ratio:.2f}x transformers-cb ({theirs.tok_s:,.0f}; target >= "
                     f"{TARGET_TOK_S_RATIO:g}x)")
    lines += chat_verdict(cells)
    mixed = _find(cells, "intelrt", "mixed", 32)
    if mixed is not None and mixed.ttft_p99 is not None:
        ok = mixed.ttft_p99 <= TARGET_TTFT_P99_S
        lines.append(f"{'PASS' if ok else 'MISS'} mixed c=32: TTFT p99 {mixed.ttft_p99:.2f} s (target <= "
                     f"{TARGET_TTFT_P99_S:g} s)")
    for cell in (c for c in ours if c.workload == "prefix"):
        without = _find(cells, "intelrt-no-prefix-cache", "prefix", cell.concurrency)
        if without is None or not without.ttft_p50 or cell.ttft_p50 is None:
            continue
        ratio = cell.ttft_p50 / without.ttft_p50
        lines.append(f"{'PASS' if ratio <= TARGET_PREFIX_TTFT_RATIO else 'MISS'} prefix c={cell.concurrency}: TTFT p50 "
                     f"{cell.ttft_p50 * 1000:.1f} ms = {ratio:.2f}x without prefix caching "
                     f"({without.ttft_p50 * 1000:.1f} ms; target <= {TARGET_PREFIX_TTFT_RATIO:g}x)")
    for server in ("intelrt", "intelrt-no-prefix-cache"):
        ceiling = ceilings.get(server)
        peaks = [c.peak_memory_mib for c in cells if c.server == server and c.peak_memory_mib is not None]
        if ceiling is None or not peaks or not any(c.memory_source and "nvidia" in c.memory_source for c in cells):
            continue
        peak = max(peaks) / 1024
        lines.append(f"{'PASS' if peak <= ceiling else 'MISS'} {server}: peak device memory {peak:,.1f} GiB within the "
                     f"ceiling it printed ({ceiling:,.1f} GiB)")
    return lines


def chat_verdict(cells: list[Cell]) -> list[str]:
    """PASS/MISS lines for issue 38's targets on the chat workload (cells measured only)."""
    lines = []
    for level in (128, 256):
        cell = _find(cells, "intelrt", "chat", level)
        if cell is not None and cell.share is not None:
            lines.append(f"{'PASS' if cell.share >= TARGET_CHAT_SHARE else 'MISS'} chat c={level}: {cell.tok_s:,.0f} "
                         f"tok/s = {cell.share:.0%} of the limit ({cell.limit_tok_s:,.0f}; target >= "
                         f"{TARGET_CHAT_SHARE:.0%})")
    cell = _find(cells, "intelrt", "chat", 128)
    if cell is not None:
        for what, value, target in (("TTFT p50", cell.ttft_p50, TARGET_CHAT_TTFT_P50_S),
                                    ("TTFT p99", cell.ttft_p99, TARGET_CHAT_TTFT_P99_S),
                                    ("ITL p99", cell.itl_p99, TARGET_CHAT_ITL_P99_S)):
            if value is not None:
                lines.append(f"{'PASS' if value <= target else 'MISS'} chat c=128: {what} {value * 1000:,.0f} ms "
                             f"(target <= {target * 1000:,.0f} ms)")
        theirs = _find(cells, "transformers-cb", "chat", 128)
        if theirs is not None and theirs.tok_s:
            ratio = cell.tok_s / theirs.tok_s
            lines.append(f"{'PASS' if ratio >= TARGET_CHAT_PEER_RATIO else 'MISS'} chat c=128: {ratio:.1f}x "
                         f"transformers serve --continuous-batching ({theirs.tok_s:,.0f} tok/s; target >= "
                         f"{TARGET_CHAT_PEER_RATIO:g}x)")
    return lines


# -- the run -----------------------------------------------------------------------------------

RAY_TARGET = 0.10
"""intelrt-ray's tok/s and TTFT p50 within this share of plain intelrt's at concurrency 32 and above (issue 40)."""


def ray_overhead(cells: list[Cell]) -> list[str]:
    """PASS/MISS per cell where both intelrt and intelrt-ray ran: Ray Serve's cost on tok/s and TTFT p50."""
    lines = []
    for cell in (c for c in cells if c.server == "intelrt-ray" and c.concurrency >= 32):
        plain = _find(cells, "intelrt", cell.workload, cell.concurrency)
        if plain is None or not plain.tok_s or plain.ttft_p50 is None or cell.ttft_p50 is None:
            continue
        tok = cell.tok_s / plain.tok_s
        ttft = cell.ttft_p50 / plain.ttft_p50
        ok = tok >= 1 - RAY_TARGET and ttft <= 1 + RAY_TARGET and cell.finished == cell.sent and not cell.errors
        lines.append(f"{'PASS' if ok else 'MISS'} ray {cell.workload} c={cell.concurrency}: tok/s {tok:.3f}x plain "
                     f"intelrt ({cell.tok_s:,.0f} vs {plain.tok_s:,.0f}), TTFT p50 {ttft:.3f}x "
                     f"({cell.ttft_p50 * 1000:.1f} vs {plain.ttft_p50 * 1000:.1f} ms); {cell.finished}/{cell.sent} "
                     f"finished (target: within {RAY_TARGET:.0%})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for results.json, the model and the server logs")
    parser.add_argument("--model-dir", default=None, help="where the model is built (default: inside --out)")
    parser.add_argument("--shape", choices=SHAPES, default="qwen3-1.7b", help="the model's shape (random weights)")
    parser.add_argument("--tiny", action="store_true", help="--shape tiny on the CPU, lengths scaled down, few requests")
    parser.add_argument("--device", default=None, help="cuda, xpu, hpu or cpu (default: cuda when present)")
    parser.add_argument("--servers", default=DEFAULT_SERVERS, help=f"which of {', '.join(SERVERS)} to run")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"which of {', '.join(WORKLOADS)} to run")
    parser.add_argument("--concurrency", default="1,32,128,256", help="client counts, comma-separated")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per cell (default 192, at least the concurrency; tiny 24)")
    parser.add_argument("--cell-seconds", type=float, default=None,
                        help="a cell stops after this (default 600; tiny 120)")
    parser.add_argument("--startup-seconds", type=float, default=900, help="how long a server may take to be ready")
    parser.add_argument("--no-prefix-caching", action="store_true",
                        help="run intelrt without prefix caching (its rows are then that comparison)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="passed to intelrt serve (its default: 0.9)")
    parser.add_argument("--peer-concurrency", default=None,
                        help="client counts for the transformers servers (default: as --concurrency)")
    parser.add_argument("--peak-tflops", type=float, default=H200_PEAK_TFLOPS,
                        help="the device's bf16 matrix throughput for the limit (default: an H200's, measured)")
    parser.add_argument("--bandwidth", type=terabytes_per_second, default=H200_BANDWIDTH_TB_S, metavar="TB_S",
                        help="the device's memory bandwidth in TB/s for the limit (default: an H200's, measured)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.tiny:
        args.shape, args.device = "tiny", args.device or "cpu"
    tiny = args.shape == "tiny"
    scale = 1 / 32 if tiny else 1.0
    seconds = args.cell_seconds or (120.0 if tiny else 600.0)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(servers) - set(SERVERS)) + sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown server(s) or workload(s) {', '.join(unknown)}")
    levels = [int(c) for c in args.concurrency.split(",")]
    peer_levels = [int(c) for c in (args.peer_concurrency or args.concurrency).split(",")]
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model_dir) if args.model_dir else out / f"model-{args.shape}"
    began = time.monotonic()
    if not (model_dir / "config.json").is_file():
        model_dir.mkdir(parents=True, exist_ok=True)
        build(model_dir, args.shape)
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    hardware = Hardware.of(model_dir, args.peak_tflops, args.bandwidth)
    context = server_context(model_dir, scale)
    extra = ["--no-prefix-caching"] if args.no_prefix_caching else []
    if args.gpu_memory_utilization is not None:
        extra += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    print(f"bench_serve: {args.shape} model in {model_dir} ({time.monotonic() - began:.0f} s); device {device}; "
          f"workloads {', '.join(names)}; concurrency {', '.join(map(str, levels))}; cells stop at {seconds:g} s",
          flush=True)
    results = out / "results.json"
    earlier = json.loads(results.read_text()) if results.is_file() else {}
    cells: list[Cell] = [Cell(**row) for row in earlier.get("cells", []) if row["server"] not in servers]
    ceilings: dict[str, float | None] = {k: v for k, v in earlier.get("ceilings", {}).items() if k not in servers}
    failures: list[str] = []

    def save() -> None:
        results.write_text(json.dumps({"shape": args.shape, "device": device, "torch": torch.__version__,
                                       "scale": scale, "context": context, "cells": [asdict(c) for c in cells],
                                       "ceilings": ceilings, "verdict": verdict(cells, ceilings),
                                       "ray_overhead": ray_overhead(cells)}, indent=2))

    for server in servers:
        log = out / f"{server}.log"
        process, url, model = start(server, model_dir, device, context, log, extra)
        try:
            ready = wait_up(server, url, process, args.startup_seconds, log)
            ceilings[server] = ceiling_gib(log) if server.startswith("intelrt") else None
            print(f"bench_serve: {server} ready after {ready:.0f} s", flush=True)
            for name in names:
                for level in (levels if server.startswith("intelrt") else peer_levels):
                    count = max(args.requests or (24 if tiny else 192), level)
                    work = workload(name, count, vocab, args.seed + level, scale)
                    warm = workload(name, level, vocab, args.seed + 1000 + level, scale)
                    run_cell(server, name, url, model, [(p, min(8, n)) for p, n in warm], level, args.startup_seconds,
                             process.pid, device)
                    cell = run_cell(server, name, url, model, work, level, seconds, process.pid, device, hardware)
                    cells.append(cell)
                    print(f"bench_serve: {server} {name} c={level}: {cell.finished}/{cell.sent} finished, "
                          f"{cell.tok_s:,.0f} tok/s ({cell.share or 0:.0%} of the limit), TTFT p50 "
                          f"{(cell.ttft_p50 or 0) * 1000:.1f} ms, ITL p99 {(cell.itl_p99 or 0) * 1000:.1f} ms; engine "
                          f"{json.dumps({k: round(v, 3) for k, v in cell.engine.items()})}"
                          + (f"; errors: {'; '.join(cell.error_examples)}" if cell.error_examples else ""), flush=True)
                    save()  # after every cell: a run cut short still leaves its rows
        except Exception as exc:  # noqa: BLE001 - the other servers still run; the verdict says what is missing
            failures.append(f"{server}: {type(exc).__name__}: {exc}")
            print(f"bench_serve: {server} failed: {exc}", flush=True)
        finally:
            stop(process)
    save()
    print()
    print(f"intelrt serve vs transformers serve — {args.shape}, random weights, on {device} "
          f"(torch {torch.__version__}); {time.monotonic() - began:.0f} s in all; results in {results}")
    print(table(cells))
    for line in verdict(cells, ceilings) + ray_overhead(cells):
        print(line)
    for failure in failures:
        print(f"FAILED {failure.splitlines()[0]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
