"""A vision-language model's decode on intelrt's fast loop (issue 26; SPEC T3): transformers'
``generate`` prefills (vision tower, projector, merged embeddings), the engine steps the language
model — greedy tokens identical to plain ``generate`` on the same inputs, in float32.

Against what nobody here wrote: every image-text-to-text model type transformers ships whose plan
decodes on the fast loop (the zoo's tiny checkpoints, text prompts), and LLaVA over Qwen2, Gemma-3
(bidirectional image blocks, sliding-window layers) and Mistral-3 (Pixtral, image sizes) with
images, in batches of prompts of different lengths; the engine's preemption (a request recomputed
without its images) under a tiny KV budget; PaliGemma's positions (from 1) refused, not decoded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import transformers
from zoo import heads, table, tasks

import intelrt

pytestmark = pytest.mark.integration

VLM = "image-text-to-text"
NEW_TOKENS = 10


@pytest.mark.claim("T3")
@pytest.mark.parametrize("model_type", tasks.model_types(VLM))
def test_every_vision_language_model_the_plan_puts_on_the_fast_loop_decodes_as_generate(model_type: str) -> None:
    import torch

    torch.set_num_threads(1)
    try:
        directory, _info, built = tasks.build_model(VLM, model_type, table.models_root())
        plain = built if built is not None else transformers.AutoModelForImageTextToText.from_pretrained(
            directory, dtype=torch.float32).eval()
        batch = tasks.inputs(VLM, plain)
        with torch.inference_mode():
            expected = plain.generate(**batch, do_sample=False, max_new_tokens=NEW_TOKENS)
    except Exception as exc:  # noqa: BLE001 - plain transformers itself fails: nothing to compare with
        pytest.skip(f"plain transformers fails on {model_type}: {type(exc).__name__}")
    loaded = intelrt.load(str(directory), dtype="float32")
    decode = loaded.plan.decisions["decode"]
    if loaded.plan.task != VLM or not decode.value.fast:
        assert decode.reason
        pytest.skip(f"planned for {loaded.plan.task}, decode {decode.value.method}: {decode.reason[:120]}")
    width = batch["input_ids"].shape[1]
    got = loaded.generate_ids(batch["input_ids"].tolist(), do_sample=False, max_new_tokens=NEW_TOKENS)
    assert got == expected[:, width:].tolist()
    assert loaded.last_generation.path == "fast", loaded.last_generation.reason


def _llava_qwen2() -> Any:
    return transformers.LlavaConfig(
        text_config={"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
                     "max_position_embeddings": 512},
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14,
                       "projection_dim": 32},
        image_token_index=250, image_seq_length=4, vision_feature_select_strategy="default",
        vision_feature_layer=-2), 250, 4, 28


def _gemma3() -> Any:
    return transformers.Gemma3Config(
        text_config={"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "vocab_size": 256, "sliding_window": 6,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                     "max_position_embeddings": 512},
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
        mm_tokens_per_image=4, image_token_index=250, boi_token_index=251, eoi_token_index=252), 250, 4, 28


def _mistral3() -> Any:
    return transformers.Mistral3Config(
        text_config={"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
                     "max_position_embeddings": 512},
        vision_config={"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "head_dim": 16, "image_size": 56, "patch_size": 14},
        image_token_index=250, spatial_merge_size=2, vision_feature_layer=-1), 250, 4, 56


FAMILIES = {"llava-qwen2": _llava_qwen2, "gemma3": _gemma3, "mistral3": _mistral3}


def _saved(tmp_path: Path, config: Any) -> tuple[Path, Any]:
    import torch

    config.architectures = [{"Gemma3Config": "Gemma3ForConditionalGeneration",
                             "Mistral3Config": "Mistral3ForConditionalGeneration"}.get(type(config).__name__,
                                                                                        "LlavaForConditionalGeneration")]
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # every row decodes its full length
    model.save_pretrained(tmp_path)
    return tmp_path, model


def _image_batch(model: Any, image_token: int, per_image: int, side: int, texts: list[tuple[int, int]]) -> Any:
    """Left-padded prompts ``text before, image, text after`` of the lengths in ``texts``, with one
    random image each (and the inputs each family's processor adds: token types, image sizes)."""
    import torch

    generator = torch.Generator().manual_seed(3)
    rows = [torch.randint(10, 240, (before,), generator=generator).tolist() + [image_token] * per_image
            + torch.randint(10, 240, (after,), generator=generator).tolist() for before, after in texts]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    inputs = {"input_ids": ids, "attention_mask": (torch.arange(width) >= width - torch.tensor(
        [len(r) for r in rows])[:, None]).long(),
        "pixel_values": torch.randn((len(rows), 3, side, side), generator=generator)}
    if isinstance(model, transformers.Gemma3ForConditionalGeneration):
        inputs["token_type_ids"] = (ids == image_token).long()
    if isinstance(model, transformers.Mistral3ForConditionalGeneration):
        inputs["image_sizes"] = torch.tensor([[side, side]] * len(rows))
    return rows, inputs


@pytest.mark.claim("T3")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_images_decode_on_the_fast_loop_as_generate(family: str, tmp_path: Path) -> None:
    import torch

    torch.set_num_threads(1)
    config, image_token, per_image, side = FAMILIES[family]()
    directory, plain = _saved(tmp_path, config)
    loaded = intelrt.load(str(directory), dtype="float32", task=VLM)  # Gemma-3's class serves text-generation first
    assert loaded.plan.task == VLM and loaded.plan.decided.decode.fast, loaded.plan.decisions["decode"].reason
    for texts in ([(3, 5)], [(2, 9), (6, 1)]):  # one prompt; two of different lengths (left padding)
        rows, inputs = _image_batch(plain, image_token, per_image, side, texts)
        with torch.inference_mode():
            expected = plain.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS)
        extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        got = loaded.generate_ids(rows if len(rows) > 1 else rows[0], do_sample=False,
                                  max_new_tokens=NEW_TOKENS, **extra)
        assert got == (expected[:, inputs["input_ids"].shape[1]:].tolist() if len(rows) > 1 else
                       expected[0, inputs["input_ids"].shape[1]:].tolist())
        assert loaded.last_generation.path == "fast", loaded.last_generation.reason
        assert "image prefill" in loaded.last_generation.reason


@pytest.mark.claim("T3")
def test_a_vision_language_request_preempted_is_recomputed_without_its_images() -> None:
    """Four image prompts through 12 blocks of 4 tokens (fewer than they need together): the newest
    are preempted as the oldest grow, and each comes back from its handed prefill (its images are
    not read again) with exactly ``generate``'s tokens."""
    import torch

    from intelrt.decoding.engine import FastDecoder
    from intelrt.decoding.inflight import InflightBatch
    from intelrt.decoding.memory import MemoryBudget, size_engine
    from intelrt.decoding.sampling import DecodeRequest, SamplingParams
    from intelrt.decoding.tuning import DecodeTuning
    from intelrt.decoding.vision_language import language_model, prefill

    torch.set_num_threads(1)
    directory = heads.build_head("llava", table.models_root())
    loaded = intelrt.load(directory, dtype="float32")
    processor = loaded.processor
    prompts = ["<image> w5 w6", "<image> w9 w10 w11", "w3 <image> w4", "<image> w7"]
    pictures = heads.images(4)
    expected, handed = [], []
    for prompt, picture in zip(prompts, pictures, strict=True):
        inputs = {k: v.to(loaded.device) for k, v in processor(text=prompt, images=picture, return_tensors="pt").items()}
        with torch.inference_mode():
            out = loaded.model.generate(**inputs, do_sample=False, max_new_tokens=14, eos_token_id=None)
        expected.append(out[0, inputs["input_ids"].shape[1]:].tolist())
        handed.append((inputs["input_ids"][0].tolist(), prefill(loaded.model, inputs, 0)[0]))
    tuning = DecodeTuning(block_size=4)
    decoder = FastDecoder(language_model(loaded.model), loaded.plan.decided.decode, None, tuning,
                          backend=loaded.plan.backend)
    decoder.prepare()
    shape = decoder.kv_shape()
    size = size_engine(shape, MemoryBudget(12 * 4 * shape.bytes_per_token, "a test's budget"), tuning, rows=4,
                       context=32)
    batch = InflightBatch(decoder, size, loaded.device)
    params = SamplingParams(max_new_tokens=14, temperature=0.0)
    handles = batch.add([DecodeRequest(tuple(ids), params, prefilled=done) for ids, done in handed])
    got: dict[int, list[int]] = {h: [] for h in handles}
    for _ in range(500):
        if not batch.pending:
            break
        progress = batch.step()
        assert not progress.failed, progress.failed
        for handle, tokens in progress.tokens.items():
            got[handle] += tokens
        batch.check()
    assert [got[h] for h in handles] == expected
    assert batch.stats.preemptions >= 1, batch.stats


def test_paligemma_counts_positions_from_one_and_stays_on_generate(tmp_path: Path) -> None:
    """PaliGemma 2's language model (Gemma-2) is a compact-step family, but PaliGemma numbers
    positions from 1: the plan keeps it on ``generate`` and says why, and a prefill handed to the
    engine anyway is refused for its positions."""
    import torch

    from intelrt.decoding.vision_language import PrefillMisfit, prefill

    config = transformers.PaliGemmaConfig(
        text_config={"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256},
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14,
                       "projection_dim": 64},
        image_token_index=250, projection_dim=64)
    config.architectures = ["PaliGemmaForConditionalGeneration"]
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(tmp_path)
    loaded = intelrt.load(str(tmp_path), dtype="float32")
    decode = loaded.plan.decisions["decode"]
    assert not decode.value.fast and "numbers positions from 1" in decode.reason
    ids = torch.tensor([[250] * 4 + [5, 6, 7]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": torch.randn((1, 3, 28, 28)),
              "token_type_ids": torch.zeros_like(ids)}
    with pytest.raises(PrefillMisfit, match="positions"):
        prefill(model, inputs, 0)
    assert loaded.generate_ids(ids[0].tolist(), pixel_values=inputs["pixel_values"], max_new_tokens=3)
    assert loaded.last_generation.path == "generate" and "positions from 1" in loaded.last_generation.reason


def test_the_vision_language_benchmark_runs_both_sides_and_finds_the_same_tokens(tmp_path: Path) -> None:
    """``benchmarks/bench_vlm_generate.py --tiny`` in its own process (the H200 command at a tiny
    size): both sides' timings, the ratio, the path intelrt took, identical tokens in float32."""
    import json
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_vlm_generate.py"
    done = subprocess.run([sys.executable, str(script), "--tiny", "--out", str(tmp_path), "--new-tokens", "8",
                           "--repeats", "1", "--no-static"], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "bench_vlm_generate.json").read_text())
    assert result["identical"] and result["intelrt"]["path"] == "fast" and result["ratio"] > 0
    assert "tokens identical to plain generate" in done.stdout
