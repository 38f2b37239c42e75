"""The fast path reads the model's own weights (issue 15): its fused q/k/v and gate/up projections
share storage with the parameters, so no second copy exists and whatever changes the parameters
in place — an optimizer step, full fine-tuning, ``load_state_dict`` — is what ``generate`` uses."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import pytest
from varied_weights import varied_copy

import intelrt

PROMPTS = ["Intel GPUs are", "the cat sat on the mat and then"]


@pytest.fixture()
def varied_model(tiny_model: Path, tmp_path: Path) -> Path:
    return varied_copy(tiny_model, tmp_path / "varied", seed=11)


def ids(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    return [loaded.tokenizer(p)["input_ids"] for p in prompts]


def ours(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    out = loaded.generate_ids(ids(loaded, prompts), max_new_tokens=10, eos_token_id=None)
    assert loaded.last_generation is not None and loaded.last_generation.step == "compact"
    return out  # type: ignore[return-value]


def plain(loaded: intelrt.Loaded, prompts: list[str]) -> list[list[int]]:
    import torch

    rows = []
    for prompt in ids(loaded, prompts):
        with torch.inference_mode():
            out = loaded.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                        max_new_tokens=10, do_sample=False, eos_token_id=None,
                                        pad_token_id=loaded.tokenizer.pad_token_id)
        rows.append(out[0, len(prompt):].tolist())
    return rows


def live_tensor_bytes() -> int:
    """Bytes of every tensor storage alive in this process, each storage counted once."""
    import torch

    gc.collect()
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and not obj.is_meta:
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, ReferenceError):
            continue
    return sum(storages.values())


def assert_no_second_copy(loaded: intelrt.Loaded, rows: int, call: Callable[[], object]) -> None:
    """``call`` (a fast-path decode of ``rows`` prompts within 128 cache slots) adds its KV cache
    (keys and values, float32) and small buffers, not a copy of the weights: a copy of the q/k/v
    and gate/up projections would be a large share of them."""
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    before = live_tensor_bytes()
    call()
    grown = live_tensor_bytes() - before
    config = loaded.model.config
    kv = 2 * config.num_hidden_layers * rows * config.num_key_value_heads * 128 * config.head_dim * 4
    assert grown <= kv + 0.1 * weights, (grown, kv, weights)


def test_the_fast_path_keeps_no_second_copy_of_the_weights(varied_model: Path) -> None:
    loaded = intelrt.load(varied_model)
    assert_no_second_copy(loaded, len(PROMPTS), lambda: ours(loaded, PROMPTS))
    q = loaded.model.model.layers[0].self_attn.q_proj.weight
    k = loaded.model.model.layers[0].self_attn.k_proj.weight
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr(), "q/k/v share one storage"


def test_optimizer_steps_are_what_generate_uses(varied_model: Path) -> None:
    import torch

    loaded = intelrt.load(varied_model)
    optimizer = torch.optim.AdamW(loaded.model.parameters(), lr=0.05)
    data = torch.tensor([ids(loaded, PROMPTS)[1]])

    def step() -> None:
        loaded.model.train()
        loss = loaded.model(input_ids=data, labels=data).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loaded.model.eval()

    step()  # optimizer state exists before the fast path first fuses the projections
    first = ours(loaded, PROMPTS)
    assert first == plain(loaded, PROMPTS)
    for _ in range(3):
        step()  # after it: the steps write into the fused storage
    second = ours(loaded, PROMPTS)
    assert second == plain(loaded, PROMPTS)
    assert second != first, "the steps must change the output for this test to mean anything"


def test_load_state_dict_is_what_generate_uses(varied_model: Path, tiny_model: Path) -> None:
    loaded = intelrt.load(varied_model)
    varied = ours(loaded, PROMPTS)
    original = intelrt.load(tiny_model)
    loaded.model.load_state_dict(original.model.state_dict())
    assert ours(loaded, PROMPTS) == plain(loaded, PROMPTS) == plain(original, PROMPTS)
    assert plain(original, PROMPTS) != varied


@pytest.mark.slow
def test_full_fine_tuning_then_generate_equals_a_fresh_load_of_the_saved_model(varied_model: Path,
                                                                             tmp_path: Path) -> None:
    """The issue's report: after full fine-tuning, the trained model answered with its old weights."""
    from intelrt.tiny import corpus_text

    loaded = intelrt.load(varied_model)
    prompt = "Intel GPUs are"
    before = loaded.generate(prompt, max_new_tokens=12)
    out = tmp_path / "trained"
    loaded.train(corpus_text().splitlines()[:40], output_dir=out, max_steps=20, learning_rate=0.01,
                 per_device_train_batch_size=4, block_size=32)
    trained = loaded.generate(prompt, max_new_tokens=12)
    assert loaded.last_generation is not None and loaded.last_generation.path == "fast"
    reloaded = intelrt.load(out).generate(prompt, max_new_tokens=12)
    assert trained == reloaded
    assert trained != before, "training must change the output for this test to mean anything"
