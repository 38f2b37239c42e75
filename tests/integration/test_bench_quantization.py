"""benchmarks/bench_quantization.py --tiny on the CPU (issue 42): the code path the H200 run takes —
bf16, int4 and int8 through ``intelrt.load`` and plain transformers on the same loaded model, tok/s,
weights, first-call seconds, fidelity against bf16 through the compact step and torchao's forward —
writing its JSON as it goes and judging the targets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchao")
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_quantization.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_quantization", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tiny_run_measures_every_method_through_intelrt_and_transformers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], one_torch_thread: None) -> None:
    assert _bench().main(["--tiny", "--out", str(tmp_path), "--methods", "bf16,int4,int8,fp8", "--rows", "1,3",
                          "--fidelity-rows", "2"]) == 0
    out = capsys.readouterr().out
    (written,) = tmp_path.glob("bench_quantization_8b-tiny_cpu_*.json")
    result = json.loads(written.read_text())
    rows = result["rows"]

    def row(method: str, side: str, count: int | None = None) -> dict[str, Any]:
        return next(r for r in rows if r.get("method") == method and r.get("side") == side
                    and (count is None or r.get("rows") == count))

    for method in ("bf16", "int4", "int8"):
        for count in (1, 3):
            ours, theirs = row(method, "intelrt", count), row(method, "transformers", count)
            assert ours["tok_s"] > 0 and theirs["tok_s"] > 0 and ours["first_call_s"] > 0
            assert (ours["path"], ours["step"]) == ("fast", "compact"), ours
            assert len(ours["tokens"]) == count and len(ours["tokens"][0]) == result["new_tokens"]
        fidelity = row(method, "fidelity")
        assert fidelity["positions"] == 2 * 64 and fidelity["within"], fidelity
    assert row("int4", "transformers", 1)["weights_bytes"] < row("bf16", "transformers", 1)["weights_bytes"]
    assert row("int4", "fidelity")["intelrt"]["kl_mean"] > row("int8", "fidelity")["intelrt"]["kl_mean"]
    fp8 = next(r for r in rows if r.get("method") == "fp8")
    assert "Intel Neural Compressor" in fp8["skipped"]
    assert "int4 at 1 row vs intelrt bf16" in out and "int8 fidelity: top-1" in out
    assert "(no target at this shape/device)" in out  # the targets are the H200's
    assert result["verdicts"] and all(line.startswith("(no target") for line in result["verdicts"])
    # each method's 1-row speed against the bandwidth roofline, over the bytes its step reads
    assert row("int4", "intelrt", 1)["step_bytes"] < row("bf16", "intelrt", 1)["step_bytes"]
    assert [line.split(" ", 1)[0] for line in result["roofline"]] == ["bf16", "int4", "int8"]
    assert "of the bandwidth roofline" in out
