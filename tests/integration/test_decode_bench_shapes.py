"""``intelrt bench --shape`` on the CPU (issue 18): real model configs by name, at a tiny size; the
table's runs, the roofline arithmetic, the float32 check and the target lines (none on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from intelrt.cli import main
from intelrt.cli.bench_shapes import ShapeRow, check_targets, decode_bytes
from intelrt.cli.shapes import SHAPES, pretrained_config, random_model, shape, tiny_config


def parameters(config: dict[str, object]) -> int:
    """The shape's parameter count, from a model built on the meta device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(pretrained_config(config))
    return sum(p.numel() for p in model.parameters())


def test_the_shapes_cover_families_sizes_and_grouped_queries() -> None:
    """At least six real configs of different families and sizes, one of 7B parameters or more,
    one whose query heads share a key/value head six or more at a time."""
    counts = {name: parameters(config) for name, config in SHAPES.items()}
    families = {config["model_type"] for config in SHAPES.values()}
    assert len(SHAPES) >= 6 and len(families) >= 6
    assert max(counts.values()) >= 7e9 and min(counts.values()) <= 1e9
    assert any(c["num_attention_heads"] // c["num_key_value_heads"] >= 6 for c in SHAPES.values())
    assert 0.55e9 < counts["Qwen3-0.6B"] < 0.65e9 and 7.9e9 < counts["Llama-3.1-8B"] < 8.1e9


def test_the_bytes_a_decode_step_reads() -> None:
    """Every weight once, the untied input embedding not (one row of it is read), and of the
    experts only the chosen share; a tied head reads the embedding matrix."""
    import torch

    moe = random_model(tiny_config(shape("Qwen3-30B-A3B"), 384), dtype=torch.float32, device="cpu")
    total = sum(p.numel() * 4 for p in moe.parameters())
    embedding = moe.model.embed_tokens.weight.numel() * 4
    experts = sum((layer.mlp.experts.gate_up_proj.numel() + layer.mlp.experts.down_proj.numel()) * 4
                  for layer in moe.model.layers)
    assert decode_bytes(moe) == total - embedding - experts // 2  # 2 of 4 experts per token
    tied = random_model(tiny_config(shape("Qwen3-0.6B"), 384), dtype=torch.float32, device="cpu")
    assert decode_bytes(tied) == sum(p.numel() * 4 for p in tied.parameters())


def test_bench_shape_tiny_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "shapes.json"
    code = main(["bench", "--tiny", "--shape", "Llama-3.2-1B,Gemma-2-2B", "--repeats", "1", "--new-tokens", "6",
                 "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "targets not judged" in text and "PASS" not in text and "MISS" not in text
    rows = json.loads(out.read_text())["rows"]
    assert [(r["shape"], r["run"]) for r in rows] == [
        (f"{name} (tiny)", run) for name in ("Llama-3.2-1B", "Gemma-2-2B")
        for run in ("static cache + compile", "intelrt", "verify fp32")]
    for row in rows:
        if row["run"] == "verify fp32":
            assert row["outputs"].startswith("identical vs plain generate (all layers; path fast, step=compact")
        else:
            assert row["tok_s"] > 0 and row["roofline"] > 0 and row["peak_gib"] is None  # no GPU memory on the CPU


def test_a_prompt_length_sweep_benches_every_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--prompt-tokens 8,40``: both runs at each length, labelled with it (a latent-attention
    shape, issue 31), and the float32 check at the first length."""
    out = tmp_path / "sweep.json"
    code = main(["bench", "--tiny", "--shape", "DeepSeek-V3", "--prompt-tokens", "8,40", "--repeats", "1",
                 "--new-tokens", "5", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "8, 40-token prompt" in text and "prefill GiB" in text
    rows = json.loads(out.read_text())["rows"]
    assert [(r["shape"], r["run"], r["prompt_tokens"]) for r in rows] == [
        ("DeepSeek-V3 (tiny) @8", "static cache + compile", 8), ("DeepSeek-V3 (tiny) @8", "intelrt", 8),
        ("DeepSeek-V3 (tiny) @40", "static cache + compile", 40), ("DeepSeek-V3 (tiny) @40", "intelrt", 40),
        ("DeepSeek-V3 (tiny)", "verify fp32", None)]
    assert all(r["tok_s"] > 0 and r["first_call_s"] > 0 for r in rows[:4])
    assert rows[1]["outputs"].startswith("identical vs static; path fast, step=compact")
    assert rows[4]["outputs"].startswith("identical vs plain generate")


def test_the_default_path_rows_come_from_a_fresh_process(tmp_path: Path) -> None:
    """``--default-path``: a fresh process on intelrt's default plan (on the CPU: eager, so no
    background compile to swap in) gives its first call's and its steady state's rows."""
    out = tmp_path / "default.json"
    assert main(["bench", "--tiny", "--shape", "Granite-3.1-2B", "--skip-verify", "--repeats", "1", "--new-tokens",
                 "4", "--default-path", "--default-path-tokens", "8", "--output", str(out)]) == 0
    rows = {r["run"]: r for r in json.loads(out.read_text())["rows"]}
    first, steady = rows["default: first 8 tokens (fresh)"], rows["default: steady (8 tokens)"]
    assert first["tok_s"] > 0 and first["first_call_s"] > 0 and steady["tok_s"] > 0
    assert first["ratio"] is not None and "warmup=eager" in first["outputs"] and "step=compact" in first["outputs"]
    assert "no swap" in steady["outputs"] and "tokens the same before and after" in steady["outputs"]


def test_a_prompt_past_the_shapes_positions_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Before anything loads, naming the shape, the lengths and the limit (not a row of 0 tok/s)."""
    assert main(["bench", "--tiny", "--shape", "Qwen3-0.6B,Granite-3.1-2B", "--prompt-tokens", "32,500",
                 "--new-tokens", "16"]) == 2
    err = capsys.readouterr().err
    assert "max_position_embeddings" in err and "Qwen3-0.6B (tiny): 500 + 16 new tokens > 512" in err
    assert "Granite-3.1-2B (tiny): 500 + 16 new tokens > 512" in err and "32 +" not in err


def test_the_plain_bench_takes_one_prompt_length(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tiny", "--prompt-tokens", "8,16"]) == 2
    assert "a sweep of prompt lengths is a --shape option" in capsys.readouterr().err


def test_bench_shape_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tiny", "--shape", "Llama-9B"]) == 2
    err = capsys.readouterr().err
    assert "'Llama-9B' is not a known shape" in err and "Qwen3-0.6B" in err


def test_targets_are_judged_per_family() -> None:
    rows = [ShapeRow("Llama-3.1-8B", "intelrt", 120.0, 2.0, 2.4, 0.55, 16.5),
            ShapeRow("Qwen3-0.6B", "intelrt", 1000.0, 0.2, 3.5, 0.45, 2.0),
            ShapeRow("Llama-3.2-1B", "intelrt", 851.0, 0.3, 1.998, 0.496, 2.6),
            ShapeRow("Gemma-2-2B", "intelrt", 300.0, 0.8, 0.9, 0.30, 6.0),
            ShapeRow("Gemma-2-2B", "verify fp32", outputs="identical vs plain generate (4 of 26 layers)"),
            ShapeRow("Qwen3-0.6B", "first answer: intelrt (cold)", seconds=40.0),
            ShapeRow("Qwen3-0.6B", "first answer: plain-static (cold)", seconds=65.0),
            ShapeRow("Qwen3-0.6B", "first answer: intelrt (warm)", seconds=12.0)]
    lines = check_targets(rows)
    assert lines == [
        "PASS Llama-3.1-8B: 55% of the bandwidth roofline (target >= 50%)",
        "PASS Llama-3.1-8B: 2.40x static cache + compile (target >= 2.0x)",
        "MISS Qwen3-0.6B: 45% of the bandwidth roofline (target >= 50%)",
        "PASS Qwen3-0.6B: 3.50x static cache + compile (target >= 2.0x)",
        "MISS Llama-3.2-1B: 49.6% of the bandwidth roofline (target >= 50%)",  # not "50%": a miss
        "MISS Llama-3.2-1B: 1.998x static cache + compile (target >= 2.0x)",
        "MISS Gemma-2-2B: 0.90x static cache + compile (target: faster)",
        "PASS Gemma-2-2B: float32 tokens identical",
        "PASS first answer cold: intelrt 40.0 s, plain static cache + compile 65.0 s (target: intelrt <=)",
        "MISS first answer warm: intelrt 12.0 s (target <= 10 s; process start to exit)"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_first_answer_rows_time_fresh_processes(tmp_path: Path) -> None:
    """Fresh processes, cold then warm caches: plain eager generate and ``intelrt run``."""
    import torch

    from intelrt.cli.first_answer import first_answer_rows
    from intelrt.cli.shapes import save_shape

    config = tiny_config(shape("Qwen3-0.6B"), 384)
    save_shape(tmp_path, config, weights=False)
    random_model(config, dtype=torch.float32, device="cpu").save_pretrained(tmp_path)
    rows = first_answer_rows(tmp_path, "cpu", new_tokens=8, prompt_tokens=8, modes=("plain-eager", "intelrt run"))
    assert [(r.name, r.cache) for r in rows] == [("plain-eager", "cold"), ("plain-eager", "warm"),
                                                 ("intelrt run", "cold"), ("intelrt run", "warm")]
    assert all(r.seconds > 0 for r in rows)
    assert len(rows[0].detail["tokens"]) == 8 and rows[0].detail["load_s"] > 0
    assert rows[2].detail["plan"]["request"]["workload"] == "one-shot"


def test_shape_options_without_a_shape_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """They would do nothing in the plain bench: said, not ignored."""
    assert main(["bench", "--tiny", "--layers", "2", "--first-answer"]) == 2
    err = capsys.readouterr().err
    assert "--layers, --first-answer only apply to --shape runs" in err and "Qwen3-0.6B" in err
