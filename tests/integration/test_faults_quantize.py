"""Fault catalogue: saving and making quantized checkpoints — ``intelrt.load(DIR,
quantization="int8").save_quantized(DIR)`` replaced the float weights in ``DIR`` without a word
(``intelrt quantize`` refused the same), a directory holding another model was written over, and a
model kind the method cannot convert (torchao asks every model for its input embeddings, which a
speech encoder lacks; int4 needs widths its group size divides) ended in "unexpected RuntimeError …
report it" after a 190-line report of tracebacks.

Every write goes through a staging directory swapped in at the end
(``intelrt.training.saving.write_atomically``, the final training save's machinery): a save cut
short by a full disk (``RLIMIT_FSIZE``) leaves the directory as it was.
"""

from __future__ import annotations

import hashlib
import resource
import shutil
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, cli, error, works
from zoo import heads, table

import intelrt

catalogue = Catalogue(__file__)


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def source(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny model: the directory a quantized model is loaded from."""
    return Path(shutil.copytree(tiny_model, tmp_path_factory.mktemp("quantize-faults") / "model"))


@pytest.fixture(scope="module")
def int8(source: Path, one_torch_thread: None) -> Any:
    return intelrt.load(source, quantization="int8")


OWN = [
    error("quantize-save-own-directory", "quantize", "save_quantized into the directory the model was loaded from "
          "(the float weights were replaced without a word)", "was loaded from", "the only copy", "a new directory",
          risk="data loss", error="ConfigurationError",
          trigger="intelrt.load(DIR, quantization='int8').save_quantized(DIR)", data=("{dir}", False)),
    error("quantize-save-own-directory-overwrite", "quantize", "… with overwrite=True", "was loaded from",
          "overwrite=True does not change this", risk="data loss", error="ConfigurationError",
          trigger="….save_quantized(DIR, overwrite=True)", data=("{dir}", True)),
    error("quantize-save-own-directory-spelled-otherwise", "quantize", "… the same directory spelled another way",
          "was loaded from", risk="data loss", error="ConfigurationError",
          trigger="….save_quantized('DIR/../DIR', overwrite=True)", data=("{dir}/../model", True)),
    error("quantize-save-over-another-model", "quantize", "save_quantized into a directory holding files",
          "is not empty", "overwrite=True", risk="data loss", error="ConfigurationError",
          trigger="….save_quantized(DIR_WITH_A_MODEL)", data=("{other}", False)),
]


@catalogue.cases(OWN)
def test_save_quantized_refuses_its_source_and_a_directory_holding_files(case: Fault, int8: Any, source: Path,
                                                                         tiny_model: Path, tmp_path: Path) -> None:
    other = Path(shutil.copytree(tiny_model, tmp_path / "other"))
    target, overwrite = case.data
    before, others = digest(source), digest(other)
    check(case, call(lambda: int8.save_quantized(target.format(dir=source, other=other), overwrite=overwrite)))
    assert digest(source) == before and digest(other) == others, "a refused save changed a file"


@catalogue.cases(error("quantize-cli-own-directory", "quantize", "intelrt quantize with --output the model's own "
                       "directory and --overwrite", "was loaded from", risk="data loss",
                       trigger="intelrt quantize DIR --method int8 --output DIR --overwrite"))
def test_intelrt_quantize_refuses_the_models_own_directory_even_with_overwrite(case: Fault, source: Path) -> None:
    before = digest(source)
    check(case, cli("quantize", str(source), "--method", "int8", "--output", str(source), "--overwrite"))
    assert digest(source) == before


WRITES = [
    works("quantize-save-overwrite-swaps", "quantize", "save_quantized over an earlier quantized save, overwrite=True",
          risk="data loss", trigger="….save_quantized(DIR, overwrite=True) twice; intelrt.load(DIR)", data="twice"),
    error("quantize-save-disk-full-keeps-previous", "quantize", "a full disk while save_quantized writes over an "
          "earlier save", "writing the quantized model", "Nothing in", "was replaced", risk="data loss",
          error="SaveError", trigger="RLIMIT_FSIZE 64 KiB; ….save_quantized(DIR, overwrite=True)", data="full"),
    error("quantize-save-disk-full-fresh", "quantize", "a full disk while save_quantized writes a new directory",
          "partial files were removed", risk="silent wrong", error="SaveError",
          trigger="RLIMIT_FSIZE 64 KiB; ….save_quantized(NEW)", data="fresh"),
]


@catalogue.cases(WRITES)
def test_save_quantized_writes_all_or_nothing(case: Fault, int8: Any, tmp_path: Path, disk_limit: Any) -> None:
    out = tmp_path / "int8"
    if case.data != "fresh":
        int8.save_quantized(out)
    before = digest(out) if out.exists() else {}
    if case.data != "twice":
        disk_limit(64 * 1024)  # the tiny model's int8 weights are ~250 KiB
    seen = check(case, call(lambda: int8.save_quantized(out, overwrite=case.data != "fresh")))
    disk_limit(resource.RLIM_INFINITY)
    left = [p.name for p in out.iterdir() if p.name.startswith(".intelrt-")] if out.exists() else []
    assert not left, f"staging left behind: {left}"
    if case.data == "fresh":
        assert not (out / "config.json").exists()
        return
    if case.data == "full":
        assert digest(out) == before, "the earlier save was damaged"
    else:
        assert seen.value == out
    assert intelrt.load(out).generate("Intel", max_new_tokens=2, min_new_tokens=2)


CONVERT = [
    error("quantize-int8-speech-encoder", "quantize", "torchao int8 on a speech model (no input embeddings: "
          "'unexpected RuntimeError … report it' after 190 lines of tracebacks)", "torchao int8 weight-only",
          "cannot convert the weights of Wav2Vec2ForCTC", "get_input_embeddings", "Pick another method",
          trigger="intelrt quantize WAV2VEC2-CTC --method int8 --output NEW", data=("wav2vec2-ctc", "int8")),
    error("quantize-int4-narrow-layers", "quantize", "torchao int4 on a model whose layers its group size does not "
          "divide", "torchao int4 weight-only", "cannot convert the weights of T5ForConditionalGeneration",
          "divisible by block_size", trigger="intelrt quantize T5 --method int4 --output NEW", data=("t5", "int4")),
]


@catalogue.cases(CONVERT)
def test_a_model_kind_the_method_cannot_convert_is_named(case: Fault, tmp_path: Path) -> None:
    head, method = case.data
    model = heads.build_head(head, table.models_root())
    seen = check(case, cli("quantize", str(model), "--method", method, "--output", str(tmp_path / "out")),
                 verbose=False)
    assert "LOAD REPORT" not in seen.output, "transformers' report of tracebacks was printed"
    again = cli("-v", "quantize", str(model), "--method", method, "--output", str(tmp_path / "out"))
    assert "Traceback" in again.stderr and "RuntimeError: We encountered some issues" in again.stderr
    assert not (tmp_path / "out" / "config.json").exists()


@catalogue.cases(error("quantize-load-int8-speech-encoder", "quantize", "intelrt.load(SPEECH, quantization='int8')",
                       "cannot convert the weights of Wav2Vec2ForCTC", error="PlanError",
                       trigger="intelrt.load(WAV2VEC2-CTC, quantization='int8')"))
def test_loading_a_model_kind_the_method_cannot_convert_is_a_plan_error(case: Fault) -> None:
    check(case, call(lambda: intelrt.load(heads.build_head("wav2vec2-ctc", table.models_root()), quantization="int8")))
