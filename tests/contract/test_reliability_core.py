"""Reliability of the core: parsers never crash with a foreign error, secrets never print,
nothing writes the caller's environment behind its back, no error is swallowed."""

from __future__ import annotations

import ast
import json
import logging
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import intelrt
from intelrt.errors import BackendUnavailableError, ConfigurationError, IntelrtError, PlanError
from intelrt.hooks.options import normalize_devices
from intelrt.hooks.request import Request
from intelrt.hooks.types import BackendStatus, DeviceInfo, Finding
from intelrt.host.manager import PluginHost, trace_log
from intelrt.planning.detection import choose_backend
from intelrt.support.distributed import world_size
from intelrt.support.hubcache import hub_offline
from intelrt.support.visibility import parse_device_list
from intelrt.testing.simulation import (
    XPU_PRODUCTS,
    Simulation,
    _from_parent,
    _parse_visibility,
    parse_spec,
)
from intelrt_hpu import diagnosis as hpu_diagnosis
from intelrt_hpu import environment as hpu_environment
from intelrt_hpu.backend import HpuBackend
from intelrt_hpu.detection import mode_note, visibility_note
from intelrt_hpu.facts import parse_ids
from intelrt_xpu import devices as xpu_devices
from intelrt_xpu import diagnosis as xpu_diagnosis
from intelrt_xpu.affinity import HIERARCHIES, read_mask
from intelrt_xpu.backend import XpuBackend
from intelrt_xpu.hubkernels import local_kernels

ROOT = Path(__file__).resolve().parents[2]
id_lists = st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=8, unique=True)
#: What an environment variable can hold (anything but NUL, which no OS environment carries).
env_text = st.text(st.characters(blacklist_characters="\x00"), max_size=30)
#: Device-list-shaped text: digits, separators and the usual mistakes, mixed with anything.
list_text = st.one_of(env_text, st.lists(st.sampled_from(["0", "1", "7", "12", "-1", "", " ", ".", "0.1", "a", "²",
                                                          "١", "01"]), max_size=6).map(",".join))


@given(st.text(max_size=40))
def test_device_list_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        ids = normalize_devices(text)
    except ConfigurationError:
        return
    assert ids is not None and all((isinstance(i, int) and i >= 0) or re.fullmatch(r"[0-9]+\.[0-9]+", i)
                                   for i in ids)  # whole ids, or card.tile of a COMPOSITE Intel GPU
    assert len(set(ids)) == len(ids)


@given(id_lists)
def test_device_list_parser_round_trips(ids: list[int]) -> None:
    assert normalize_devices(",".join(map(str, ids))) == tuple(ids)
    assert normalize_devices(ids) == tuple(ids)


@given(st.text(max_size=30))
def test_simulate_spec_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        kwargs = parse_spec(text)
    except ConfigurationError:
        return
    assert kwargs["kind"] in ("xpu", "hpu") and kwargs["count"] >= 0


@given(st.sampled_from(["xpu", "hpu"]), st.integers(0, 64), st.sampled_from([None, "gaudi1", "gaudi2", "gaudi3"]),
       st.sampled_from([None, *XPU_PRODUCTS]))
def test_simulate_spec_parser_round_trips(kind: str, count: int, generation: str | None, product: str | None) -> None:
    model = generation if kind == "hpu" else product
    spec = f"{kind}:{count}" + (f":{model}" if model else "")
    key = "generation" if kind == "hpu" else "product"
    assert parse_spec(spec) == {"kind": kind, "count": count, **({key: model} if model else {})}
    if kind == "xpu" and generation:  # a Gaudi generation on Intel GPUs is a mistake, not ignored (issue 21)
        with pytest.raises(ConfigurationError, match="GENERATION for xpu must be one of"):
            parse_spec(f"xpu:{count}:{generation}")


@settings(max_examples=50)
@given(env_text)
def test_simulation_child_variable_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        sim = _from_parent(text)
    except ConfigurationError:
        return
    assert sim.kind in ("xpu", "hpu") and sim.count >= 0


@given(st.sampled_from(["xpu", "hpu"]), st.integers(0, 64), st.booleans())
def test_simulation_child_variable_round_trips(kind: str, count: int, bf16: bool) -> None:
    sim = _from_parent(Simulation(kind=kind, count=count, bf16=bf16).describe())
    assert (sim.kind, sim.count, sim.bf16) == (kind, count, bf16)


@given(list_text, st.integers(0, 16))
def test_simulated_driver_visibility_parser_never_crashes(text: str, count: int) -> None:
    ids = _parse_visibility(text, count)
    assert len(set(ids)) == len(ids) and all(0 <= i < count for i in ids)


@given(st.text(max_size=20))
def test_hook_timeout_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        host = PluginHost({"INTELRT_HOOK_TIMEOUT": text}, entry_points=False)
    except ConfigurationError:
        return
    assert host.timeout > 0


@given(st.floats(min_value=0.001, max_value=1e6))
def test_hook_timeout_parser_round_trips(seconds: float) -> None:
    assert PluginHost({"INTELRT_HOOK_TIMEOUT": repr(seconds)}, entry_points=False).timeout == seconds


@settings(max_examples=30)
@given(st.one_of(env_text, st.lists(st.sampled_from(["xpu", "hpu", " xpu", "nosuch", ""]), max_size=3).map(",".join)))
def test_allow_list_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        host = PluginHost({"INTELRT_PLUGINS": text})
    except ConfigurationError as exc:
        assert "INTELRT_PLUGINS names" in str(exc)
        return
    enabled = {r.name for r in host.records if r.status == "enabled" and not r.builtin}
    assert enabled == {n.strip() for n in text.split(",")} & {"xpu", "hpu", "gemma2_eager", "acme"}


@given(env_text)
def test_debug_switch_parser_never_crashes(text: str) -> None:
    try:
        host = PluginHost({"INTELRT_DEBUG": text}, entry_points=False, builtins=False)
        assert host.tracing is (text.lower() in ("1", "true", "yes", "on"))
    finally:
        trace_log.handlers[:] = [h for h in trace_log.handlers if not getattr(h, "_intelrt_trace", False)]
        trace_log.setLevel(logging.NOTSET)


@given(st.lists(st.sampled_from(["xpu", "hpu", " xpu ", "", ","]), max_size=4))
def test_block_list_parser_never_crashes(names: list[str]) -> None:
    host = PluginHost({"INTELRT_DISABLE_PLUGINS": ",".join(names)})
    blocked = {r.name for r in host.records if r.status == "blocked"}
    assert blocked == {n.strip() for n in names if n.strip() in ("xpu", "hpu")}


# -- the visibility variables: ZE_AFFINITY_MASK, HABANA_VISIBLE_MODULES, HABANA_VISIBLE_DEVICES -----------

@given(list_text, st.booleans())
def test_visibility_list_parser_never_raises_and_keeps_only_whole_ids(text: str, subdevices: bool) -> None:
    parsed = parse_device_list("VAR", text, subdevices=subdevices)
    assert all(i >= 0 for i in parsed.ids) and len(set(parsed.ids)) == len(parsed.ids)
    assert parse_device_list("VAR", parsed.text, subdevices=subdevices).entries == parsed.entries or not parsed.entries
    if text.strip() and not parsed.problems:  # well formed: every comma-separated entry was kept
        assert len(parsed.entries) == len(text.split(","))


@given(id_lists, st.booleans())
def test_visibility_list_parser_round_trips(ids: list[int], subdevices: bool) -> None:
    parsed = parse_device_list("VAR", ",".join(map(str, ids)), subdevices=subdevices)
    assert parsed.ids == tuple(ids) and parsed.problems == () and parsed.beyond(len(ids)) is None
    tiles = parse_device_list("VAR", ",".join(f"{i}.1" for i in ids), subdevices=True)
    assert tiles.ids == tuple(ids) and tiles.problems == ()


@given(list_text, st.sampled_from(HIERARCHIES))
def test_xpu_mask_and_gaudi_id_parsers_never_crash(text: str, mode: str) -> None:
    reading = read_mask(text, mode)
    assert all(isinstance(i, int) and i >= 0 for i in reading.ids)
    modules = parse_ids(text)
    assert modules is None or all(isinstance(i, int) and i >= 0 for i in modules)


@given(id_lists, st.sampled_from(HIERARCHIES))
def test_xpu_mask_and_gaudi_id_parsers_round_trip(ids: list[int], mode: str) -> None:
    text = ",".join(map(str, ids))
    reading = read_mask(text, mode)
    assert list(reading.ids) == ids and reading.problems == () and reading.fatal == ()
    assert parse_ids(text) == tuple(ids)


def _status(name: str, count: int) -> BackendStatus:
    devices = tuple(DeviceInfo(i, f"{name} device", 64 * 1024**3, True) for i in range(count))
    return BackendStatus(name, name, count > 0, "test", 60, devices=devices, versions={"torch": "2.13.0"})


@settings(max_examples=60)
@given(st.dictionaries(st.sampled_from(["ZE_AFFINITY_MASK", "INTELRT_ZE_AFFINITY_MASK"]), list_text),
       st.one_of(st.none(), id_lists), st.booleans(), st.integers(0, 8))
def test_xpu_environment_hooks_never_crash_on_any_mask(env: dict[str, str], devices: list[int] | None, strict: bool,
                                                       count: int) -> None:
    request = Request.build("m", devices=devices, strict=strict)
    findings = xpu_diagnosis.diagnose(BackendStatus("xpu", "xpu", False, "test"), env)
    assert all(isinstance(f, Finding) for f in findings or ())
    malformed = xpu_devices.malformed_mask(env, _status("xpu", count), count)
    assert malformed is None or "ZE_AFFINITY_MASK" in malformed.detail
    try:
        items = xpu_devices.run_environment(XpuBackend(_status("xpu", count)), request, env)
    except PlanError:
        return
    assert items is None or all(isinstance(i, (Finding, intelrt.EnvVar)) for i in items)


@settings(max_examples=60)
@given(st.dictionaries(st.sampled_from(["HABANA_VISIBLE_MODULES", "HABANA_VISIBLE_DEVICES", "PT_ENABLE_INT64_SUPPORT",
                                        "PT_HPU_LAZY_MODE"]), list_text),
       st.one_of(st.none(), id_lists), st.booleans(), st.integers(0, 8))
def test_gaudi_environment_hooks_never_crash_on_any_visibility(env: dict[str, str], devices: list[int] | None,
                                                               strict: bool, count: int) -> None:
    request = Request.build("m", devices=devices, strict=strict)
    status = _status("hpu", count)
    assert isinstance(mode_note(env, "1.22.0.740"), str)
    assert visibility_note(env) is None or isinstance(visibility_note(env), str)
    try:
        items = hpu_environment.run_environment(HpuBackend(status), request, env)
    except PlanError:
        return
    assert items is not None and all(isinstance(i, (Finding, intelrt.EnvVar)) for i in items)
    accelerate = dict(status.versions, accelerate="1.15.0")
    findings = hpu_diagnosis.diagnose(BackendStatus("hpu", "hpu", count > 0, "test", versions=accelerate), env, False)
    assert all(isinstance(f, Finding) for f in findings or ())


# -- launcher, backend and hub variables ---------------------------------------------------------------

@given(env_text)
def test_world_size_parser_accepts_or_raises_configuration_error(text: str) -> None:
    try:
        size = world_size({"WORLD_SIZE": text})
    except ConfigurationError:
        return
    assert size >= 1 and (size == 1 or text.strip().isdigit())


@given(st.integers(1, 4096))
def test_world_size_parser_round_trips(size: int) -> None:
    assert world_size({"WORLD_SIZE": str(size)}) == size


BACKENDS = (_status("xpu", 0), _status("hpu", 2), BackendStatus("cpu", "cpu", True, "always", 0))


@given(env_text)
def test_backend_variable_parser_accepts_or_raises_an_intelrt_error(text: str) -> None:
    try:
        status, reason, forced = choose_backend(BACKENDS, "auto", {"INTELRT_BACKEND": text})
    except (ConfigurationError, BackendUnavailableError):
        return
    assert status.available and forced == (text.strip().lower() not in ("", "auto"))  # INTELRT_BACKEND=auto is auto


@given(st.sampled_from(["hpu", "cpu"]), st.sampled_from(["", " ", "\t"]), st.booleans())
def test_backend_variable_parser_round_trips(name: str, pad: str, upper: bool) -> None:
    status, _, forced = choose_backend(BACKENDS, "auto", {"INTELRT_BACKEND": pad + (name.upper() if upper else name) + pad})
    assert status.name == name and forced


@given(env_text)
def test_hub_kernel_variables_parsers_never_crash(text: str) -> None:
    overrides = local_kernels({"LOCAL_KERNELS": text})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in overrides.items())
    # huggingface_hub's own rule (constants._is_true): the upper-cased value is one of these
    assert hub_offline({"HF_HUB_OFFLINE": text}) is (text.upper() in ("1", "ON", "YES", "TRUE"))


def test_offline_follows_huggingface_hub_and_its_transformers_fallback() -> None:
    import huggingface_hub

    assert hub_offline() is huggingface_hub.is_offline_mode() is True  # the suite runs with HF_HUB_OFFLINE=1
    assert hub_offline({"TRANSFORMERS_OFFLINE": "1"}) and not hub_offline({})
    assert not hub_offline({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"})  # the first one set wins


def test_a_hub_model_is_cached_when_huggingface_hub_finds_its_config(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from hub_cache_layout import cache_kernel
    from huggingface_hub import constants

    from intelrt.support.hubcache import is_repo_cached

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    commit = "a" * 40
    repo = tmp_path / "models--org--small"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    assert not is_repo_cached("org/small")  # a snapshot without config.json: loading would download it
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    assert is_repo_cached("org/small") and not is_repo_cached("org/other") and not is_repo_cached("not a repo id!")
    cache_kernel(tmp_path, "kernels-community/rmsnorm", 1)
    assert is_repo_cached("kernels-community/rmsnorm", "kernel") and not is_repo_cached("org/small", "kernel")


@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}", fullmatch=True),
                       st.from_regex(r"/[a-z]{1,10}", fullmatch=True), max_size=3))
def test_local_kernels_parser_round_trips(mapping: dict[str, str]) -> None:
    assert local_kernels({"LOCAL_KERNELS": ":".join(f"{k}={v}" for k, v in mapping.items())}) == mapping


def test_every_parser_error_is_an_intelrt_error() -> None:
    """What the tests above accept: intelrt's own errors, which the CLI turns into one clear line."""
    for error in (ConfigurationError, BackendUnavailableError, PlanError):
        assert issubclass(error, IntelrtError)


# -- secrets and the caller's environment ----------------------------------------------------------------

def test_secrets_are_redacted_from_plan_and_doctor(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from intelrt.planning.diagnosis import diagnose, format_report

    monkeypatch.setenv("HF_TOKEN", "hf_supersecret_value")
    monkeypatch.setenv("MY_API_KEY", "another-secret-value")
    plan = intelrt.plan(tiny_model)
    report = diagnose()
    for text in (str(plan), plan.to_json(), json.dumps(report), format_report(report)):
        assert "hf_supersecret_value" not in text and "another-secret-value" not in text


def test_planning_writes_nothing_to_the_callers_environment(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=4)
    before = dict(os.environ)
    plan = intelrt.plan(tiny_model, devices=[0, 2])
    assert dict(os.environ) == before
    assert plan.env_to_set()["ZE_AFFINITY_MASK"] == "0,2"  # for the run, not for this shell
    changed = intelrt.setup_env(plan, environ=(target := dict(before)))
    assert "ZE_AFFINITY_MASK" not in changed and "ZE_AFFINITY_MASK" not in target  # this process's driver read its mask
    assert plan.child_environment(before)["ZE_AFFINITY_MASK"] == "0,2"  # a started process gets it
    assert dict(os.environ) == before


def _swallowing_handlers(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ExceptHandler):
            continue
        broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in ("Exception", "BaseException"))
        silent = all(isinstance(stmt, (ast.Pass, ast.Continue)) or
                     (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)) for stmt in node.body)
        if node.type is None or (broad and silent):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_bare_except_or_silently_swallowed_exception_in_the_code() -> None:
    offenders = []
    for folder in ("core", "plugins", "benchmarks", "docs/examples"):
        for path in (ROOT / folder).rglob("*.py") if (ROOT / folder).exists() else []:
            offenders += _swallowing_handlers(path)
    assert offenders == [], f"errors hidden from the user at: {offenders}"


# -- the catalogue: docs/reliability.md ------------------------------------------------------------------

CATALOGUE = ROOT / "docs" / "reliability.md"
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
#: What issue 8 says the catalogue must cover, as words its rows must use.
MUST_COVER = ("ZE_AFFINITY_MASK", "HABANA_VISIBLE_MODULES", "HABANA_VISIBLE_DEVICES", "empty", "listed twice",
              "negative", "not a number", "sub-device", "more ids than devices", "devices=", "dtype", "attention",
              "quantization", "torch", "transformers", "accelerate", "kernels", "bitsandbytes", "peft",
              "hangs", "raises", "garbage", "two plugins", "does not exist", "no config.json", "pickle",
              "remote code", "tokenizer", "empty prompt list", "generation argument", "disk full", "read-only")
#: ... and what issue 16 says it must grow by: every case the issue lists.
MUST_COVER_16 = ("base model's directory", "adapter naming itself", "two adapters naming each other", "1e38",
                 "last good checkpoint", "two concurrent trainings", "overwrite", "`.intelrt-saving-*`",
                 "Ctrl-C", "read-only checkpoint", ".jsonl line that is not JSON", "out-of-vocabulary",
                 "negative id", "longer than the model's positions", "garbled trainer_state.json",
                 "truncated optimizer.pt", "truncated adapter weights", "HF_ENDPOINT", "*_KEY", "*_AUTH",
                 "retry warnings", "token passed to load", "pickle renamed .safetensors", "empty weights file",
                 "weights file cut in half")
#: The issue asks for at least this many cases, each a row naming its test.
CATALOGUE_CASES = 250


def _catalogue_rows() -> list[str]:
    lines = CATALOGUE.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.startswith("| ") and NODE.search(line)]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_row_of_the_reliability_catalogue_names_a_test_that_exists() -> None:
    table = [line for line in CATALOGUE.read_text(encoding="utf-8").splitlines()
             if line.startswith("| ") and not line.startswith(("| fault", "| ---"))]
    rows = _catalogue_rows()
    assert len(rows) >= CATALOGUE_CASES, (f"docs/reliability.md has {len(rows)} cases backed by a test; issue 16 "
                                          f"asks for {CATALOGUE_CASES}")
    assert len(set(rows)) == len(rows), "a case is listed twice"
    assert len(rows) == len(table), "every row names its test: " + "\n".join(r for r in table if r not in rows)
    missing = []
    for row in rows:
        for path, name in NODE.findall(row):
            if not (ROOT / path).is_file() or name not in _test_names(ROOT / path):
                missing.append(f"{path}::{name}")
    assert not missing, f"docs/reliability.md names tests that do not exist: {missing}"


def test_the_catalogue_covers_every_fault_the_issue_lists() -> None:
    text = " ".join(_catalogue_rows())
    assert not [word for word in MUST_COVER + MUST_COVER_16 if word not in text]


def test_every_reliability_test_is_in_the_catalogue() -> None:
    named = {name for row in _catalogue_rows() for _path, name in NODE.findall(row)}
    ours = {name for path in (ROOT / "tests").rglob("test_reliability_*.py") for name in _test_names(path)}
    helpers = {"test_every_row_of_the_reliability_catalogue_names_a_test_that_exists",
               "test_the_catalogue_covers_every_fault_the_issue_lists", "test_every_reliability_test_is_in_the_catalogue"}
    assert sorted(ours - named - helpers) == []
