"""Fault catalogue: loading a model whose files are damaged — every file of the tiny model's
directory missing, empty, cut in half or garbled, through ``intelrt.load`` and ``intelrt run`` — and
keywords ``load()`` passes on that nobody takes.

A damaged file is named with what is wrong and the way out; a file transformers can do without
(``generation_config.json`` missing) loads; one it would drop without a word (an unreadable
``generation_config.json``) is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faults import Catalogue, Fault, call, check, cli, error, works

import intelrt

catalogue = Catalogue(__file__)
DAMAGES = ("missing", "empty", "truncated", "garbled")


def damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    else:
        path.write_bytes(bytes(range(256)) * 4)


#: file → damage → words of the error, or None: loads and generates
EXPECTED: dict[str, dict[str, tuple[str, ...] | None]] = {
    "config.json": {"missing": ("no config.json",), "empty": ("config.json", "cannot read it as JSON"),
                    "truncated": ("config.json", "cannot read it as JSON"),
                    "garbled": ("config.json", "cannot read it as JSON")},
    "model.safetensors": {"missing": ("no weights",), "empty": ("model.safetensors is empty",),
                          "truncated": ("model.safetensors is truncated",),
                          "garbled": ("model.safetensors", "not a safetensors file")},
    "tokenizer.json": {"missing": ("tokenizer cannot be loaded", "tokenizer.json is missing"),
                       "empty": ("tokenizer.json is not valid JSON",),
                       "truncated": ("tokenizer.json is not valid JSON",),
                       "garbled": ("tokenizer.json is not UTF-8 text",)},
    "tokenizer_config.json": {"missing": None, "empty": ("tokenizer_config.json is not valid JSON",),
                              "truncated": ("tokenizer_config.json is not valid JSON",),
                              "garbled": ("tokenizer_config.json is not UTF-8 text",)},
    "generation_config.json": {"missing": None, "empty": ("generation_config.json", "cannot read it as JSON"),
                               "truncated": ("generation_config.json", "cannot read it as JSON"),
                               "garbled": ("generation_config.json", "cannot read it as JSON")},
    "chat_template.jinja": {"missing": None, "garbled": ("chat_template.jinja is not UTF-8 text",)},
}


def _cases(how_run: str) -> list[Fault]:
    made = []
    for name, damages in EXPECTED.items():
        for how, says in damages.items():
            key = name.split(".")[0].replace("_", "-")
            risk = "silent wrong" if name == "generation_config.json" and says else "traceback"
            what = f"{name} {how}" + (" (transformers dropped it without a word)" if risk == "silent wrong" else "")
            trigger = f"{'intelrt.load(DIR)' if how_run == 'api' else 'intelrt run DIR'} with {name} {how}"
            fault = Fault(f"load-{how_run}-{key}-{how}", "load", what,
                          "clear error" if says else "correct behaviour", says or (), risk=risk, trigger=trigger,
                          error="ModelSourceError", data=(name, how))
            made.append(fault)
    return made


@pytest.fixture
def damaged(tiny_model: Path, tmp_path: Path) -> object:
    def make(name: str, how: str) -> Path:
        model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
        damage(model / name, how)
        return model

    return make


@catalogue.cases(_cases("api"))
def test_every_damaged_model_file_through_load(case: Fault, damaged: object, one_torch_thread: None) -> None:
    model = damaged(*case.data)  # type: ignore[operator]
    seen = check(case, call(lambda: intelrt.load(model).generate("Intel GPUs", max_new_tokens=2)))
    if case.outcome == "correct behaviour":
        assert isinstance(seen.value, str)


@catalogue.cases(_cases("run"))
def test_every_damaged_model_file_through_run(case: Fault, damaged: object, one_torch_thread: None) -> None:
    model = damaged(*case.data)  # type: ignore[operator]
    check(case, cli("run", str(model), "--max-new-tokens", "2"))


KEYWORDS = [
    error("load-keyword-nobody-takes", "load", "load(foo=1): transformers' TypeError from the model's __init__",
          "load() got foo=1", "not an intelrt option", trigger="intelrt.load(model, foo=1)",
          error="ConfigurationError", data={"foo": 1}),
    error("load-keyword-misspelt-option", "load", "load(dtpye='float32'), a misspelt option", "dtpye",
          "Did you mean dtype=", trigger="intelrt.load(model, dtpye='float32')", error="ConfigurationError",
          data={"dtpye": "float32"}),
    error("load-keyword-misspelt-from-pretrained", "load", "load(revison='main'), a misspelt from_pretrained keyword",
          "revison", "Did you mean revision=", trigger="intelrt.load(model, revison='main')",
          error="ConfigurationError", data={"revison": "main"}),
    works("load-keyword-config-field", "load", "load(output_hidden_states=True): a field of the config, set by "
          "from_pretrained", trigger="intelrt.load(model, output_hidden_states=True)",
          data={"output_hidden_states": True}),
]


@catalogue.cases(KEYWORDS)
def test_keywords_load_passes_on_that_nobody_takes_are_named(case: Fault, tiny_model: Path) -> None:
    seen = check(case, call(lambda: intelrt.load(tiny_model, **case.data)))
    if case.outcome == "correct behaviour":
        assert seen.value.model.config.output_hidden_states is True


@catalogue.cases(error("load-model-type-unknown", "load", "a model type this transformers does not know",
                       "nosuchmodel", trigger='config.json: "model_type": "nosuchmodel"', exit_code=2))
def test_an_unknown_model_type_says_to_upgrade(case: Fault, tiny_model: Path, tmp_path: Path) -> None:
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "nosuchmodel"}))
    check(case, cli("run", str(model), "--max-new-tokens", "2"))


@catalogue.cases(error("load-pickle-renamed-safetensors", "load", "a pickle checkpoint renamed model.safetensors",
                       "pickle", trigger="torch.save(...) written as model.safetensors", error="UnsafeModelError"))
def test_a_pickle_under_a_safetensors_name_is_refused(case: Fault, tiny_model: Path, tmp_path: Path) -> None:
    import torch

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    torch.save({"w": torch.zeros(2)}, model / "model.safetensors")
    check(case, call(lambda: intelrt.load(model)))
