"""Security defaults (issue 8): no remote code and no pickle unless asked (C5), plugin code runs only
from the ``intelrt`` entry-point group and the allow-list (C6), nothing is written to the
caller's ``os.environ`` except by ``setup_env()`` / ``load()`` (C2), secrets never printed."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import intelrt
from intelrt.cli import main
from intelrt.errors import ConfigurationError
from intelrt.host.manager import PluginHost
from intelrt.planning.diagnosis import diagnose, format_report
from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs
from intelrt.testing.distributions import install_plugin, uninstall

SECRET = "hf_Zq7distinctiveTokenValue"  # distinctive: cannot appear in any key or message by chance


@pytest.mark.claim("C5")
def test_C5_remote_code_and_pickle_stay_off_unless_asked(tiny_model: Path) -> None:
    kwargs = from_pretrained_kwargs(intelrt.plan(tiny_model))
    assert kwargs["trust_remote_code"] is False and kwargs["use_safetensors"] is True
    opted_in = from_pretrained_kwargs(intelrt.plan(tiny_model, trust_remote_code=True, allow_pickle=True))
    assert opted_in["trust_remote_code"] is True and "use_safetensors" not in opted_in
    with pytest.raises(ConfigurationError, match="use_safetensors= is decided by the plan; pass allow_pickle="):
        intelrt.plan(tiny_model, use_safetensors=False)  # pickle only through the explicit opt-in


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[list[str]]:
    """Three would-be plugins: one in the ``intelrt`` group, one in another group, one only importable."""
    source = ("import os\nos.environ['INTELRT_TEST_PLUGIN_RAN'] = __name__\n"
              "from intelrt import hookimpl\n\n@hookimpl\ndef intelrt_detect(env):\n    return []\n")
    install_plugin(tmp_path / "listed", distribution="intelrt-listed", entry_point="listed",
                   module="intelrt_test_listed", source=source)
    other = install_plugin(tmp_path / "other", distribution="intelrt-other", entry_point="other",
                           module="intelrt_test_other", source=source)
    info = next(other.glob("*.dist-info"))
    (info / "entry_points.txt").write_text("[intelrt_plugins]\nother = intelrt_test_other\n")
    (tmp_path / "other" / "intelrt_test_loose.py").write_text(source)
    modules = ["intelrt_test_listed", "intelrt_test_other", "intelrt_test_loose"]
    yield modules
    uninstall(tmp_path / "listed", *modules)
    uninstall(tmp_path / "other", *modules)
    os.environ.pop("INTELRT_TEST_PLUGIN_RAN", None)


@pytest.mark.claim("C6")
def test_C6_plugin_code_runs_only_from_the_entry_point_group_and_the_allow_list(installed: list[str]) -> None:
    names = {r.name: r.status for r in PluginHost({"INTELRT_PLUGINS": "xpu"}).records}
    assert names["listed"] == "not allowed" and "other" not in names
    assert not any(m in sys.modules for m in installed), "a plugin outside the allow-list ran its code"
    names = {r.name: r.status for r in PluginHost({"INTELRT_DISABLE_PLUGINS": "listed"}).records}
    assert names["listed"] == "blocked" and not any(m in sys.modules for m in installed)
    names = {r.name: r.status for r in PluginHost({}).records}
    assert names["listed"] == "enabled" and "other" not in names and "loose" not in names
    assert "intelrt_test_listed" in sys.modules
    assert "intelrt_test_other" not in sys.modules and "intelrt_test_loose" not in sys.modules


@pytest.mark.claim("C2")
def test_C2_planning_doctor_and_the_cli_write_nothing_to_os_environ(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    simulate("xpu", count=4, env={"ZE_AFFINITY_MASK": "0,1,1"})
    before = dict(os.environ)
    plan = intelrt.plan(tiny_model, devices=[0, 1])  # in-process, only the inherited mask's devices are reachable
    intelrt.detect()
    diagnose()
    from intelrt.planning.planner import plan_backend

    plan_backend(devices=[1])
    assert main(["plan", str(tiny_model), "--devices", "1", "--json"]) == 0
    main(["doctor", "--json"])
    main(["plugins"])
    capsys.readouterr()
    assert dict(os.environ) == before
    changed = intelrt.setup_env(plan, environ=(copy := dict(before)))  # the one door, here into a copy
    assert set(changed) == {"ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "INTELRT_ZE_AFFINITY_MASK"}
    assert copy["ZE_AFFINITY_MASK"] == "0,1" and dict(os.environ) == before


@pytest.mark.claim("C2")
def test_C2_gaudi_planning_writes_nothing_to_os_environ(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("hpu", 8, env={"PT_ENABLE_INT64_SUPPORT": "1"})
    before = dict(os.environ)
    plan = intelrt.plan(tiny_model, devices=[0, 1])
    diagnose()
    assert dict(os.environ) == before and plan.env_to_set()["HABANA_VISIBLE_MODULES"] == "0,1"


def test_secrets_are_never_printed_by_doctor_or_plan_in_the_cli(tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, SECRET + name)
    outputs = []
    for argv in (["doctor", "--json"], ["doctor"], ["plan", str(tiny_model), "--json"], ["plan", str(tiny_model)]):
        main(argv)
        outputs.append(capsys.readouterr().out)
    report = json.loads(outputs[0])
    assert report["environment"]["HF_TOKEN"] == "***"  # the variable is shown, its value is not
    assert not [out for out in outputs if SECRET in out]
    assert SECRET not in format_report(diagnose())


def test_a_token_passed_to_load_is_redacted_from_plans_and_logs(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model, token=SECRET)
    assert SECRET not in plan.to_json() and SECRET not in str(plan)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("intelrt")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        intelrt.load(tiny_model, token=SECRET)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert "'token': '***'" in stream.getvalue() and SECRET not in stream.getvalue()


def test_HF_TOKEN_secret_intelrt_doctor_json_contains_no_secret() -> None:
    """The issue's own check, as a user runs it: ``HF_TOKEN=secret intelrt doctor --json``."""
    env = {**os.environ, "HF_TOKEN": "secret", "HF_API_TOKEN": SECRET}
    done = subprocess.run([sys.executable, "-m", "intelrt.cli", "doctor", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    json.loads(done.stdout)  # the report was printed (exit 1 only means an error finding)
    assert "secret" not in done.stdout and SECRET not in done.stdout and "secret" not in done.stderr
