"""Model files that are not what they claim (issue 16): intelrt reads every safetensors header itself
— 8 bytes of little-endian header length, a JSON header, tensors tiling the rest of the file —
before anything loads, and follows adapter chains with cycle detection. A pickle under a
``.safetensors`` name is an ``UnsafeModelError``; an empty, truncated or garbled file and an adapter
chain that loops are ``ModelSourceError``s; each names the file or the adapters."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import intelrt
from intelrt.errors import ModelSourceError, UnsafeModelError
from intelrt.planning.model_source import check_safetensors


def _copy(tiny_model: Path, target: Path) -> Path:
    shutil.copytree(tiny_model, target)
    return target


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "intelrt.cli", *args], capture_output=True, text=True, timeout=120)


def _pickle(path: Path) -> None:
    import torch

    torch.save({"weight": torch.zeros(4)}, path)


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _header(path: Path) -> tuple[int, dict[str, object], bytes]:
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    return length, json.loads(data[8:8 + length]), data[8 + length:]


def _rewrite(path: Path, header: dict[str, object], body: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + body)


def _garbled_header(path: Path) -> None:
    length, _, body = _header(path)
    path.write_bytes(length.to_bytes(8, "little") + b"{not json" + b" " * (length - 9) + body)


def _header_longer_than_the_file(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes((len(data) * 4).to_bytes(8, "little") + data[8:])


def _trailing_bytes(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0" * 64)


def _wrong_shape(path: Path) -> None:
    _, header, body = _header(path)
    name = next(k for k in header if k != "__metadata__")
    entry = dict(header[name])  # type: ignore[call-overload]
    entry["shape"] = [int(d) * 2 for d in entry["shape"]]
    _rewrite(path, {**header, name: entry}, body)


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(16).randbytes(4096))


# -- the files of a model directory ------------------------------------------------------------------------

def test_a_pickle_renamed_safetensors_next_to_a_pytorch_bin_is_refused_naming_it(tiny_model: Path, tmp_path: Path
                                                                                  ) -> None:
    """It passed intelrt's own check (a ``.safetensors`` name was enough) and stopped in transformers."""
    model = _copy(tiny_model, tmp_path / "m")
    _pickle(model / "pytorch_model.bin")
    shutil.copy(model / "pytorch_model.bin", model / "x.safetensors")
    for call in (intelrt.plan, intelrt.load):
        with pytest.raises(UnsafeModelError, match=r"x\.safetensors is not a safetensors file: it is a pickle"):
            call(model)
    done = _cli("run", str(model))
    assert done.returncode == 2 and "x.safetensors is not a safetensors file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pickle_renamed_model_safetensors_is_refused_even_with_allow_pickle(tiny_model: Path, tmp_path: Path
                                                                              ) -> None:
    model = _copy(tiny_model, tmp_path / "m")
    _pickle(model / "model.safetensors")
    with pytest.raises(UnsafeModelError, match=r"model\.safetensors is not a safetensors file"):
        intelrt.plan(model)
    with pytest.raises(UnsafeModelError, match=r"under a \.safetensors name"):
        intelrt.plan(model, allow_pickle=True)  # opting into pickle means *.bin, not a file that lies about itself


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: p.write_bytes(b""), r"model\.safetensors is empty \(0 bytes\)"),
    (lambda p: p.write_bytes(b"\x10\x00\x00"), r"is truncated: 3 bytes, less than a safetensors header"),
    (_truncate, r"model\.safetensors is truncated: tensor '.+' ends at byte"),
    (lambda p: _truncate(p, 0.001), r"is truncated or not a safetensors file: its header claims"),
    (_header_longer_than_the_file, r"is truncated or not a safetensors file: its header claims"),
    (_garbled_header, r"is not a safetensors file: its header is not JSON"),
    (_trailing_bytes, r"is not a valid safetensors file: its tensors cover"),
    (_wrong_shape, r"is not a valid safetensors file: tensor '.+' \(F32 \[.+\]\) does not fit"),
    (_random_bytes, r"model\.safetensors is (truncated or )?not a (valid )?safetensors file"),
], ids=["empty", "shorter-than-a-header", "truncated-half", "truncated-into-the-header", "header-too-long",
        "header-not-json", "trailing-bytes", "shape-not-its-bytes", "random-bytes"])
def test_an_empty_truncated_or_garbled_safetensors_file_is_a_model_source_error(
        tiny_model: Path, tmp_path: Path, damage: Callable[[Path], None], message: str) -> None:
    """Each ended in a ``SafetensorError`` traceback from the loader."""
    model = _copy(tiny_model, tmp_path / "m")
    damage(model / "model.safetensors")
    with pytest.raises(ModelSourceError, match=message):
        intelrt.plan(model)
    with pytest.raises(ModelSourceError, match=message):
        intelrt.load(model)


def test_the_cli_names_a_truncated_model_file_without_a_traceback(tiny_model: Path, tmp_path: Path) -> None:
    model = _copy(tiny_model, tmp_path / "m")
    _truncate(model / "model.safetensors")
    done = _cli("run", str(model))
    assert done.returncode == 2 and f"{model}/model.safetensors is truncated" in done.stderr
    assert "Traceback" not in done.stderr and "SafetensorError" not in done.stderr


def test_one_truncated_shard_of_a_sharded_model_is_named(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 2
    intelrt.plan(sharded)  # intact: accepted
    _truncate(shards[1])
    with pytest.raises(ModelSourceError, match=rf"{shards[1].name} is truncated"):
        intelrt.plan(sharded)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}(\.[a-z0-9]{1,4}){0,2}", fullmatch=True),
                       st.tuples(st.sampled_from(["float32", "float16", "bfloat16", "int64", "int8", "bool"]),
                                 st.lists(st.integers(0, 5), max_size=3)), min_size=1, max_size=5),
       st.floats(0.0, 0.999))
def test_every_file_safetensors_writes_passes_and_every_cut_of_it_is_refused(
        tmp_path: Path, tensors: dict[str, tuple[str, list[int]]], cut: float) -> None:
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "t.safetensors"
    save_file({name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, (dtype, shape) in tensors.items()},
              str(path))
    check_safetensors(path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(ModelSourceError, match="t.safetensors"):
        check_safetensors(path)


# -- adapters and their chains ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adapter(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real LoRA adapter of the tiny model (one training step)."""
    import torch

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("adapter") / "lora"
    intelrt.load(tiny_model).train(["Intel GPUs run PyTorch."] * 8, lora=True, output_dir=out, max_steps=1,
                                   block_size=8, disable_tqdm=True, save_strategy="no")
    return out


def _adapter_copy(adapter: Path, target: Path, base: str) -> Path:
    shutil.copytree(adapter, target)
    config = json.loads((target / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base
    (target / "adapter_config.json").write_text(json.dumps(config))
    return target


def test_a_truncated_adapter_weights_file_is_named(adapter: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(adapter, tmp_path / "a")
    _truncate(copy / "adapter_model.safetensors")
    with pytest.raises(ModelSourceError, match=r"adapter_model\.safetensors is truncated"):
        intelrt.load(copy)


def test_an_adapter_naming_itself_as_its_base_is_a_model_source_error(adapter: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What training into the base model's own directory used to leave: ``intelrt run`` died with
    ``RecursionError``."""
    looped = _adapter_copy(adapter, tmp_path / "self", str(tmp_path / "self"))
    for call in (intelrt.plan, intelrt.load):
        with pytest.raises(ModelSourceError, match=r"names its own directory as its base model"):
            call(looped)
    with monkeypatch.context() as here:
        here.chdir(_adapter_copy(adapter, tmp_path / "dot", "."))
        with pytest.raises(ModelSourceError, match=r"names its own directory"):
            intelrt.plan(".")
    done = _cli("run", str(looped))
    assert done.returncode == 2 and "names its own directory as its base model" in done.stderr
    assert "RecursionError" not in done.stderr and "Traceback" not in done.stderr


def test_adapters_naming_each_other_are_a_model_source_error(adapter: Path, tmp_path: Path) -> None:
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _adapter_copy(adapter, first, str(second))
    _adapter_copy(adapter, second, str(first))
    with pytest.raises(ModelSourceError, match=rf"adapters name each other as their base model: {first} -> {second} -> {first}"):
        intelrt.plan(first)
    _adapter_copy(adapter, third, str(first))  # leads into the loop
    with pytest.raises(ModelSourceError, match=r"adapters name each other"):
        intelrt.load(third)


def test_a_loop_of_three_adapters_is_a_model_source_error(adapter: Path, tmp_path: Path) -> None:
    names = [tmp_path / n for n in ("x", "y", "z")]
    for this, base in zip(names, names[1:] + names[:1], strict=True):
        _adapter_copy(adapter, this, str(base))
    with pytest.raises(ModelSourceError, match=rf"{names[0]} -> {names[1]} -> {names[2]} -> {names[0]}"):
        intelrt.plan(names[0])


def test_an_adapter_of_an_adapter_is_refused_with_the_way_to_merge(adapter: Path, tmp_path: Path) -> None:
    """transformers puts one adapter on a full model; the second level failed inside it."""
    stacked = _adapter_copy(adapter, tmp_path / "stacked", str(adapter))
    with pytest.raises(ModelSourceError, match=r"which is itself an adapter .*merge_and_unload"):
        intelrt.load(stacked)
    assert intelrt.load(adapter).generate("Intel", max_new_tokens=2)  # one level loads
