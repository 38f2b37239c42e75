"""Fault catalogue: ``intelrt.plan`` and ``intelrt.load`` before a model loads — every request
option with values of the wrong type and with bad values, the ``from_pretrained`` keywords the plan
decides, paths that cannot be a model, and config.json values transformers refuses.

Every case ends in an ``IntelrtError`` whose message names the option (or the file) and what to do;
nothing loads, so the cases take milliseconds after the first plan.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, error, works

import intelrt
from intelrt.hooks.options import PLANNED_KWARGS
from intelrt.hooks.request import OPTION_NAMES, REQUEST_OPTIONS

catalogue = Catalogue(__file__)


def _types(option: Any) -> Iterator[tuple[str, object]]:
    """Values of the wrong type for ``option`` (its default's type left out)."""
    for name, value in (("int", 7), ("float", 1.5), ("list", ["x"]), ("object", object()), ("bytes", b"auto")):
        if option.name == "devices" and name == "list":
            continue  # a list is devices' own type; a list of the wrong items is a bad value below
        yield name, value
    if option.flag:
        yield "string", "yes"
    elif option.default is not None:
        yield "none", None


TYPES = [Fault(f"load-{o.name.replace('_', '-')}-{name}", "load", f"load({o.name}=…) given a {name}", "clear error",
               (o.name,), trigger=f"intelrt.load(model, {o.name}={value!r})", error="ConfigurationError",
               data=(o.name, value))
         for o in REQUEST_OPTIONS for name, value in _types(o)]
# bool where a string is expected: dtype=True must not become 'True'
TYPES += [Fault(f"load-{o}-bool", "load", f"load({o}=True) where a name is expected", "clear error", (o,),
                risk="silent wrong", trigger=f"intelrt.load(model, {o}=True)", error="ConfigurationError",
                data=(o, True))
          for o in ("backend", "dtype", "attention", "task", "batching", "workload", "warmup", "sharding", "parallel")]


@catalogue.cases(TYPES)
def test_every_load_option_refuses_values_of_the_wrong_type(case: Fault, tiny_model: Path) -> None:
    name, value = case.data
    check(case, call(lambda: intelrt.load(tiny_model, **{name: value})))


BAD_VALUES: dict[str, list[tuple[str, object, tuple[str, ...]]]] = {
    "backend": [("unknown", "quantum", ("is not a backend intelrt knows",)), ("missing-device", "xpu", ("xpu",))],
    "devices": [("negative", [-1], ("device ids are >= 0",)), ("repeated", [0, 0], ("repeated",)),
                ("bools", [True], ("every id must be an int",)), ("empty-list", [], ("selects nothing",)),
                ("count", 2, ("pass a list of device ids",)), ("on-the-cpu", [0], ("devices",))],
    "dtype": [("unknown", "int3", ("is not one of",)), ("empty", "", ("non-empty",))],
    "attention": [("unknown", "nonsense", ("is not an attention implementation",)),
                  ("nvidia-only", "flash_attention_3", ("only on NVIDIA",))],
    "kernels": [("unknown", "maybe", ("is not one of",))],
    "quantization": [("unknown", "3bit", ("is not one of",))],
    "compile": [("unknown", "nosuchbackend", ("is not a torch.compile backend",))],
    "task": [("unknown", "teleportation", ("task",)), ("empty", "", ("non-empty",))],
    "batching": [("unknown", "sideways", ("is not one of",))],
    "graphs": [("unknown", "sometimes", ("is not one of",))],
    "attention_kernel": [("unknown", "fast", ("is not one of",))],
    "workload": [("unknown", "everything", ("is not one of",))],
    "warmup": [("unknown", "hot", ("is not one of",))],
    "sharding": [("unknown", "zero9", ("is not one of",))],
    "parallel": [("unknown", "pipeline", ("is not one of",))],
}
VALUES = [Fault(f"plan-{o.replace('_', '-')}-{name}", "plan", f"plan({o}={value!r})", "clear error", says,
                trigger=f"intelrt.plan(model, {o}={value!r})", data=(o, value))
          for o, cases in BAD_VALUES.items() for name, value, says in cases]


@catalogue.cases(VALUES)
def test_every_plan_option_refuses_bad_values(case: Fault, tiny_model: Path) -> None:
    name, value = case.data
    check(case, call(lambda: intelrt.plan(tiny_model, **{name: value})))


PLANNED = [Fault(f"load-planned-{key.replace('_', '-')}", "load", f"load({key}=…), which the plan decides",
                 "clear error", (f"{key}= is decided by the plan", instead.split("/")[0].split("=")[0]),
                 trigger=f"intelrt.load(model, {key}=…)", error="ConfigurationError", data=key)
           for key, instead in PLANNED_KWARGS.items() if key not in OPTION_NAMES]  # dtype= is an option itself


@catalogue.cases(PLANNED)
def test_from_pretrained_keywords_the_plan_decides_name_the_option_to_use(case: Fault, tiny_model: Path) -> None:
    check(case, call(lambda: intelrt.load(tiny_model, **{case.data: "cpu"})))


# -- paths that cannot be a model ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("places")
    (root / "a-file").write_text("not a model")
    (root / "empty").mkdir()
    (root / "loop").symlink_to(root / "loop")
    return {"root": str(root)}


PATHS = [
    error("load-path-5000-characters", "load", "a 5,000-character path (it ended in OSError: File name too long)",
          "too long", "5,00", trigger="intelrt.load('/tmp/' + 'a' * 5000)", data="/tmp/" + "a" * 5000),
    error("load-path-5000-characters-relative", "load", "a 5,000-character relative path", "too long",
          trigger="intelrt.load('a' * 5000)", data="a" * 5000),
    error("load-path-nul", "load", "a path with a NUL character", "NUL", trigger="intelrt.load('model\\x00dir')",
          data="model\x00dir"),
    error("load-path-a-file", "load", "a file instead of the model's directory", "is a file",
          trigger="intelrt.load('a-file')", data="{root}/a-file"),
    error("load-path-empty-directory", "load", "an empty directory", "no config.json",
          trigger="intelrt.load('empty/')", data="{root}/empty"),
    error("load-path-missing", "load", "a directory that does not exist", "no such directory",
          trigger="intelrt.load('./my models/qwen')", data="./my models/qwen"),
    error("load-path-symlink-loop", "load", "a symlink that points at itself", "loop",
          trigger="intelrt.load('loop')", data="{root}/loop"),
    error("load-path-empty-string", "load", "an empty model name", "model must be",
          trigger="intelrt.load('')", data=""),
    error("load-path-hub-id-not-cached", "load", "a hub id that is not cached, offline", "HF_HUB_OFFLINE",
          trigger="HF_HUB_OFFLINE=1 intelrt.load('nosuchorg/nosuchmodel')", data="nosuchorg/nosuchmodel"),
]


@catalogue.cases(PATHS)
def test_paths_that_cannot_be_a_model_are_named(case: Fault, places: dict[str, str]) -> None:
    path = case.data.format(**places) if "{root}" in case.data else case.data
    seen = check(case, call(lambda: intelrt.load(path)))
    assert len(seen.message) < 1000  # a 5,000-character path is not quoted whole


# -- config.json values transformers refuses -----------------------------------------------------------------

CONFIG = [
    ("hidden-size-word", {"hidden_size": "sixty-four"}, ("config.json", "hidden_size")),
    ("vocab-size-list", {"vocab_size": [384]}, ("config.json", "vocab_size")),
    ("layers-word", {"num_hidden_layers": "two"}, ("config.json", "num_hidden_layers")),
    ("heads-float", {"num_attention_heads": 2.5}, ("config.json", "num_attention_heads")),
    ("positions-word", {"max_position_embeddings": "long"}, ("config.json", "max_position_embeddings")),
    ("model-type-number", {"model_type": 5}, ("model_type must be a name",)),
    ("architectures-not-a-list", {"architectures": "Qwen3ForCausalLM"}, ("architectures must be a list",)),
    ("not-an-object", [1, 2, 3], ("expected a JSON object",)),
    ("auto-map", {"auto_map": {"AutoModelForCausalLM": "modeling.Model"}}, ("trust_remote_code",)),
]
CONFIGS = [error(f"plan-config-{name}", "plan", f"config.json with {json.dumps(change)[:60]}", *says,
                 risk="silent wrong" if name == "architectures-not-a-list" else "traceback",
                 trigger=f"config.json: {json.dumps(change)[:80]}", data=change) for name, change, says in CONFIG]


@catalogue.cases(CONFIGS)
def test_config_values_transformers_refuses_name_the_file_and_the_field(case: Fault, tiny_model: Path,
                                                                         tmp_path: Path) -> None:
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    change = case.data
    (model / "config.json").write_text(json.dumps({**config, **change} if isinstance(change, dict) else change))
    check(case, call(lambda: intelrt.plan(model)))


@catalogue.cases(works("plan-config-unknown-field", "plan", "config.json with a field transformers does not know "
                       "(kept, as transformers keeps it)", trigger='config.json: {"my_note": "hello"}'))
def test_an_unknown_config_field_is_kept(case: Fault, tiny_model: Path, tmp_path: Path) -> None:
    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "my_note": "hello"}))
    seen = check(case, call(lambda: intelrt.plan(model)))
    assert seen.value.decided.dtype is not None


# -- the environment, read at plan time -----------------------------------------------------------------------

ENV = [
    error("plan-env-intelrt-backend-unknown", "plan", "INTELRT_BACKEND names no backend", "INTELRT_BACKEND", "quantum",
          trigger="INTELRT_BACKEND=quantum intelrt.plan(model)", data={"INTELRT_BACKEND": "quantum"}),
    error("plan-env-world-size-word", "plan", "WORLD_SIZE that is not a number (it was read as 1)", "WORLD_SIZE",
          risk="silent wrong", trigger="WORLD_SIZE=two intelrt.plan(model, parallel='tensor')",
          data={"WORLD_SIZE": "two"}),
    error("plan-env-disable-the-cpu", "plan", "every backend blocked (INTELRT_DISABLE_PLUGINS=cpu,cuda,xpu,hpu)",
          "no backend", trigger="INTELRT_DISABLE_PLUGINS=cpu,cuda,xpu,hpu intelrt.plan(model)",
          data={"INTELRT_DISABLE_PLUGINS": "cpu,cuda,xpu,hpu"}),
]


@catalogue.cases(ENV)
def test_launcher_and_host_variables_are_checked_at_plan_time(case: Fault, tiny_model: Path) -> None:
    options = {"parallel": "tensor"} if "WORLD_SIZE" in case.data else {}
    check(case, call(lambda: intelrt.plan(tiny_model, **options), env=case.data))

