"""LoRA adapters served per request (issue 28): two PEFT adapters with different random weights and
the base model decode in one batch of a real uvicorn server; each completion equals transformers'
``generate`` of ``PeftModel`` with that adapter (greedy, float32), the base rows equal the base
model's; adapters are loaded and unloaded through the real ``openai`` client and raw HTTP; an
adapter unloaded while a stream decodes with it finishes that stream with its weights."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from test_serve import NAME, Server, _error, httpx, metric
from varied_weights import varied_copy

import intelrt
from intelrt.serving import create_app

PROMPTS = ("Intel GPUs run", "The quick brown fox jumps over", "a")
LONG = "Serving several LoRA adapters from one base model keeps a single copy of the weights in memory"
"""Longer than one KV block (16 tokens): its blocks go to the prefix cache."""
MAX_NEW = 12


@pytest.fixture(scope="module")
def model_dir(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return varied_copy(tiny_model, tmp_path_factory.mktemp("varied-lora"), seed=3)


def _adapter(model_dir: Path, directory: Path, seed: int) -> Path:
    """A LoRA adapter of random (non-zero) weights from ``seed``, saved as PEFT saves it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                        init_lora_weights=False, lora_dropout=0.0)
    get_peft_model(base, config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def adapters(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {"alpha": _adapter(model_dir, root / "alpha", 1), "beta": _adapter(model_dir, root / "beta", 2)}


class Reference:
    """transformers' greedy ``generate`` of the base model and of ``PeftModel`` with each adapter."""

    def __init__(self, model_dir: Path, adapters: dict[str, Path]) -> None:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.models: dict[str, Any] = {NAME: AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)}
        for name, path in adapters.items():
            base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            self.models[name] = PeftModel.from_pretrained(base, str(path)).eval()
        self._memo: dict[tuple[str, str, int], str] = {}

    def text(self, model: str, prompt: str, max_new: int = MAX_NEW) -> str:
        key = (model, prompt, max_new)
        if key not in self._memo:
            import torch

            ids = torch.tensor([self.tokenizer(prompt)["input_ids"]])
            with torch.inference_mode():
                out = self.models[model].generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                                  max_new_tokens=max_new, do_sample=False,
                                                  pad_token_id=self.tokenizer.pad_token_id)
            self._memo[key] = self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        return self._memo[key]


@pytest.fixture(scope="module")
def reference(model_dir: Path, adapters: dict[str, Path]) -> Reference:
    return Reference(model_dir, adapters)


@pytest.fixture(scope="module")
def server(model_dir: Path, adapters: dict[str, Path]) -> Any:
    app = create_app(intelrt.load(model_dir), model_name=NAME, max_batch=8, announce=lambda line: None,
                     lora={"alpha": str(adapters["alpha"])})
    with Server(app) as running:
        yield running


def _complete(server: Server, model: str, prompt: str, max_new: int = MAX_NEW) -> str:
    answer = server.client().completions.create(model=model, prompt=prompt, max_tokens=max_new, temperature=0)
    return answer.choices[0].text


def _load(server: Server, name: str, path: Path) -> Any:
    """``POST /v1/load_lora_adapter`` through the ``openai`` client's own request method."""
    return server.client().post("/load_lora_adapter", body={"lora_name": name, "lora_path": str(path)},
                                cast_to=object)


def test_adapters_and_the_base_decode_together_each_as_peft_generates(server: Server, reference: Reference,
                                                                      adapters: dict[str, Path]) -> None:
    loaded = _load(server, "beta", adapters["beta"])  # --lora gave alpha at start; beta comes at run time
    assert loaded["lora_name"] == "beta"
    models = server.client().models.list().data
    assert {m.id for m in models} == {NAME, "alpha", "beta"}
    assert {m.id: m.parent for m in models}["beta"] == NAME  # type: ignore[attr-defined]
    jobs = [(model, prompt) for prompt in PROMPTS for model in (NAME, "alpha", "beta")]
    with ThreadPoolExecutor(len(jobs)) as pool:  # every request at once: one batch of three kinds of rows
        texts = list(pool.map(lambda job: _complete(server, *job), jobs))
    for (model, prompt), text in zip(jobs, texts, strict=True):
        assert text == reference.text(model, prompt), (model, prompt)
    # the adapters change the output (else the comparison above could not tell them apart)
    assert len({reference.text(m, PROMPTS[1]) for m in (NAME, "alpha", "beta")}) == 3


def test_the_prefix_cache_keeps_each_adapters_keys_apart(server: Server, reference: Reference) -> None:
    before = metric(server.url, "intelrt_prefix_cache_hit_tokens_total")
    for model in (NAME, "alpha", NAME, "alpha"):  # one after another: each may find the blocks before it cached
        assert _complete(server, model, LONG) == reference.text(model, LONG), model
    assert metric(server.url, "intelrt_prefix_cache_hit_tokens_total") > before  # the repeats reused their own


def test_unloading_refuses_new_requests_and_a_running_stream_finishes_with_its_adapter(
        server: Server, reference: Reference, adapters: dict[str, Path]) -> None:
    _load(server, "gamma", adapters["beta"])
    client = server.client()
    stream = client.completions.create(model="gamma", prompt=PROMPTS[1], max_tokens=40, temperature=0, stream=True)
    pieces = [next(iter(stream)).choices[0].text]
    gone = httpx.post(f"{server.url}/v1/unload_lora_adapter", content=json.dumps({"lora_name": "gamma"}),
                      headers={"content-type": "application/json"})
    assert gone.status_code == 200, gone.text
    pieces += [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert "".join(pieces) == reference.text("beta", PROMPTS[1], 40)  # the same weights as beta
    with pytest.raises(openai.NotFoundError, match="gamma"):
        _complete(server, "gamma", PROMPTS[0])
    assert "gamma" not in {m.id for m in client.models.list().data}
    engine = server.state.decode_thread.batch.decoder.adapters
    assert engine.names == ["alpha", "beta"] and not engine.holds_unloaded  # its weights left the model
    assert _complete(server, "beta", PROMPTS[0]) == reference.text("beta", PROMPTS[0])


def test_a_bad_adapter_is_refused_naming_what_is_wrong(server: Server, reference: Reference,
                                                       adapters: dict[str, Path], tmp_path: Path) -> None:
    no_weights = shutil.copytree(adapters["alpha"], tmp_path / "no-weights")
    (no_weights / "adapter_model.safetensors").unlink()
    refused = _error(httpx.post(f"{server.url}/v1/load_lora_adapter", content=json.dumps(
        {"lora_name": "x", "lora_path": str(no_weights)}), headers={"content-type": "application/json"}), 400)
    assert refused["param"] == "lora_path" and "adapter_model.safetensors does not exist" in refused["message"]
    wrong = shutil.copytree(adapters["alpha"], tmp_path / "wrong-modules")
    config = json.loads((wrong / "adapter_config.json").read_text())
    (wrong / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["no_such_proj"]}))
    with pytest.raises(openai.BadRequestError, match="does not fit this model") as bad:
        _load(server, "y", wrong)
    assert bad.value.body["param"] == "lora_path"  # type: ignore[index]
    assert _complete(server, NAME, PROMPTS[0]) == reference.text(NAME, PROMPTS[0])  # the failed load undone
    assert _complete(server, "alpha", PROMPTS[0]) == reference.text("alpha", PROMPTS[0])
    assert {m.id for m in server.client().models.list().data} >= {NAME, "alpha"}
    assert "x" not in {m.id for m in server.client().models.list().data}


def test_intelrt_serve_lora_on_the_command_line(model_dir: Path, adapters: dict[str, Path],
                                                reference: Reference) -> None:
    """``intelrt serve MODEL --lora alpha=DIR --lora beta=DIR`` as a process, with the real client."""
    import os
    import socket
    import subprocess
    import sys

    from test_serve import wait_ready

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "intelrt.cli", "serve", str(model_dir), "--port", str(port), "--max-batch", "4",
               "--served-model-name", NAME, "--lora", f"alpha={adapters['alpha']}", "--lora",
               f"beta={adapters['beta']}", "--no-access-log"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        assert {m.id for m in client.models.list().data} == {NAME, "alpha", "beta"}
        for model in ("beta", NAME, "alpha"):
            answer = client.completions.create(model=model, prompt=PROMPTS[0], max_tokens=MAX_NEW, temperature=0)
            assert answer.choices[0].text == reference.text(model, PROMPTS[0]), model
        process.terminate()
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
