"""Catalogue rows for bad inputs (issue 8): versions below their floors and missing extras
(simulated), choices a backend cannot run, broken model directories and generation arguments.
Each gets an intelrt error that says what was wrong and how to fix it, or a finding."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import ConfigurationError, ModelSourceError, PlanError, UnsafeModelError
from intelrt.planning.diagnosis import diagnose

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
PROMPT = "Intel GPUs are"


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> intelrt.Loaded:
    return intelrt.load(tiny_model)


def _copy(tiny_model: Path, target: Path, **config_changes: Any) -> Path:
    shutil.copytree(tiny_model, target)
    if config_changes:
        config = json.loads((target / "config.json").read_text())
        config.update(config_changes)
        (target / "config.json").write_text(json.dumps(config))
    return target


# -- versions below their floors and missing extras (simulated installs) --------------------------

@pytest.mark.parametrize(("simulated", "package", "version"), [
    ({"torch_version": "2.5.1"}, "torch", "2.5.1"),
    ({"packages": {"transformers": "4.46.0"}}, "transformers", "4.46.0"),
    ({"packages": {"accelerate": "1.2.0"}}, "accelerate", "1.2.0"),
    ({"packages": {"huggingface_hub": "0.30.0"}}, "huggingface_hub", "0.30.0"),
    ({"packages": {"filelock": "3.13.1"}}, "filelock", "3.13.1"),
])
def test_dependency_below_its_floor_is_a_doctor_error_and_a_plan_warning(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                         simulated: dict[str, Any], package: str,
                                                                         version: str) -> None:
    simulate("xpu", count=1, **simulated)
    title = f"{package} {version} is older than intelrt needs"
    [planned] = [f for f in intelrt.plan(tiny_model).findings if f.title == title]
    assert planned.severity == "warning" and f"pip install --upgrade '{package}>=" in planned.fix
    [reported] = [f for f in diagnose()["findings"] if f["title"] == title]
    assert reported["severity"] == "error"


@pytest.mark.claim("X9")
@pytest.mark.parametrize(("packages", "message"), [
    ({"bitsandbytes": None}, "bitsandbytes, which is not installed: pip install 'intelrt[bitsandbytes]' (or pip "
                             "install 'bitsandbytes>=0.47')"),
    ({"bitsandbytes": "0.45.0"}, "bitsandbytes 4-bit on Intel Data Center GPU Max needs bitsandbytes >= 0.47, and this "
                                 "is 0.45.0"),
])
def test_X9_bitsandbytes_missing_or_too_old_for_intel_gpus(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                           packages: dict[str, Any], message: str) -> None:
    simulate("xpu", count=1, packages=packages)
    with pytest.raises(PlanError, match=re.escape(message)):
        intelrt.plan(tiny_model, quantization="4bit")


def test_missing_optional_extras_are_named_with_the_install_command(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=0, packages={"bitsandbytes": None, "kernels": None})  # no Intel GPU: the CPU plans
    with pytest.raises(PlanError, match=r"bitsandbytes, which is not installed: pip install 'intelrt\[bitsandbytes\]'"):
        intelrt.plan(tiny_model, quantization="8bit")
    with pytest.raises(PlanError, match=r"kernels=True needs the kernels package: pip install 'intelrt\[kernels\]'"):
        intelrt.plan(tiny_model, kernels="on")


def test_lora_without_peft_names_the_extra_and_full_training_needs_no_peft(simulate, loaded: intelrt.Loaded,  # type: ignore[no-untyped-def]
                                                                           tmp_path: Path) -> None:
    # A real process without peft imports Trainer without it; import it before hiding peft, or
    # transformers would keep a Trainer that lacks PeftModel after the simulation ends.
    import transformers.trainer  # noqa: F401

    simulate("xpu", count=0, packages={"peft": None})
    with pytest.raises(ConfigurationError, match=r"not installed: pip install 'intelrt\[peft\]'"):
        loaded.train(["some text to train on"], lora=True, output_dir=tmp_path / "lora", max_steps=1)
    result = loaded.train(["Gaudi runs PyTorch eager by default."] * 4, output_dir=tmp_path / "full", max_steps=1,
                          block_size=8, save_strategy="no", disable_tqdm=True)
    assert result.steps == 1 and not result.adapter and (tmp_path / "full" / "model.safetensors").is_file()


# -- choices a backend cannot run -------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "simulated", "request_kwargs", "message"), [
    ("xpu", {"bf16": False}, {"dtype": "bfloat16"}, r"dtype='bfloat16', but .* \(xpu device 0\) has no bfloat16"),
    ("hpu", {"generation": "gaudi1"}, {"dtype": "float16"}, "first-generation Gaudi has no float16 support"),
    ("xpu", {}, {"attention": "flash_attention_3"}, "FlashAttention-3 runs only on NVIDIA GPUs"),
    ("hpu", {}, {"attention": "flash_attention_2"}, "does not run on Gaudi"),
    ("xpu", {"count": 0}, {"attention": "flash_attention_2"}, "needs a GPU; on the CPU use 'sdpa'"),
    ("hpu", {"generation": "gaudi1"}, {"quantization": "4bit"}, "does not run on Gaudi 1 .first-generation Gaudi"),
    ("hpu", {}, {"compile": "inductor"}, "only 'hpu_backend' and 'eager' run on Gaudi"),
    ("xpu", {"count": 0}, {"backend": "cuda"}, "is not a CUDA build"),
])
def test_a_choice_the_backend_cannot_run_is_refused_with_the_alternative(simulate, tiny_model: Path, kind: str,  # type: ignore[no-untyped-def]
                                                                         simulated: dict[str, Any],
                                                                         request_kwargs: dict[str, Any],
                                                                         message: str) -> None:
    count = simulated.pop("count", 8 if kind == "hpu" else 1)
    simulate(kind, count=count, env=INT64 if kind == "hpu" else None, **simulated)
    with pytest.raises(intelrt.IntelrtError, match=message):
        intelrt.plan(tiny_model, **request_kwargs)


# -- model directories --------------------------------------------------------------------------

@pytest.mark.claim("C5")
def test_C5_an_adapter_whose_base_needs_remote_code_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    base = _copy(tiny_model, tmp_path / "base", auto_map={"AutoModelForCausalLM": "evil.Model"})
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    with pytest.raises(UnsafeModelError, match="trust_remote_code=True"):
        intelrt.plan(adapter)


@pytest.mark.parametrize(("break_it", "error", "message"), [
    (lambda d: (d / "config.json").write_text("{not json"), ModelSourceError, "cannot read it as JSON"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), ModelSourceError, "expected a JSON object, got list"),
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "qwen3"})), intelrt.PlanError,
     "names no architectures, so the task is unknown"),
    (lambda d: (d / "model.safetensors").unlink(), ModelSourceError, "holds config.json but no weights"),
])
def test_a_broken_model_directory_is_a_clear_error(tiny_model: Path, tmp_path: Path, break_it: Any,
                                                   error: type[Exception], message: str) -> None:
    model = _copy(tiny_model, tmp_path / "model")
    break_it(model)
    with pytest.raises(error, match=message):
        intelrt.load(model)


def test_a_file_or_a_broken_adapter_directory_is_a_clear_error(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="is a file; pass the directory that holds config.json"):
        intelrt.plan(tiny_model / "config.json")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    with pytest.raises(ModelSourceError, match="names no base_model_name_or_path"):
        intelrt.plan(adapter)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(ModelSourceError, match="is an adapter of .*gone, which cannot be found"):
        intelrt.plan(adapter)


# -- generation arguments -------------------------------------------------------------------------

@pytest.mark.parametrize(("prompt", "kwargs", "message"), [
    ("", {}, "the prompt is empty after tokenization"),
    ([PROMPT, None], {}, "every prompt must be a str; got NoneType"),
    (PROMPT, {"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 1"),
    (PROMPT, {"max_new_tokens": True}, "max_new_tokens must be an int >= 1"),
    (PROMPT, {"do_sample": "yes"}, "do_sample must be True or False"),
    (PROMPT, {"do_sample": True, "temperature": "hot"}, "temperature must be a number > 0"),
    (PROMPT, {"do_sample": True, "top_k": "a"}, "top_k must be an int >= 0"),
])
def test_generation_arguments_of_the_wrong_type_are_configuration_errors(loaded: intelrt.Loaded, prompt: Any,
                                                                         kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        loaded.generate(prompt, **kwargs)
    assert loaded.generate(PROMPT, max_new_tokens=2)  # the model still works afterwards
