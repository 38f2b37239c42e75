"""`intelrt launch --dry-run` on simulated machines: the exact command and the one environment
every rank shares (issue 5; SPEC X2, X11, H3, H5, H10, C2)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from intelrt import hookimpl
from intelrt.cli import main
from intelrt.errors import PlanError
from intelrt.hooks.types import EnvVar, Finding
from intelrt.host.manager import PluginHost
from intelrt.training.launching import launch_command

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "ddp_tiny.py")


def dry_run(capsys: pytest.CaptureFixture[str], *options: str, script_args: tuple[str, ...] = ("--out", "x"),
            ) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["launch", "--dry-run", "--json", *options, SCRIPT, *script_args])
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # with --json, an error is JSON on stdout too
    return code, (data if code == 0 else None), captured.err + (data["error"]["message"] if code else "")


@pytest.mark.claim("X11")
def test_X11_xpu_two_of_four_gpus_share_one_mask_and_use_xccl(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys, "--simulate", "xpu:4", "--devices", "0,2")
    assert code == 0, err
    assert out is not None
    argv = out["command"]
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2"  # defaults to the selected devices
    assert argv[-3:] == [SCRIPT, "--out", "x"]
    assert out["env"]["ZE_AFFINITY_MASK"] == "0,2"  # one mask for the whole launch: every rank inherits it
    assert re.findall(r"(?<![A-Z_])ZE_AFFINITY_MASK=\S*", out["shell"]) == ["ZE_AFFINITY_MASK=0,2"]
    assert "LOCAL_RANK" not in out["env"]
    assert out["collective"]["value"] == "xccl"


def test_xpu_dry_run_text_shows_command_environment_and_collective(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--dry-run", "--simulate", "xpu:4", "--devices", "0,2", SCRIPT]) == 0
    text = capsys.readouterr().out
    assert "2 processes on xpu devices 0,2 via torchrun; collective xccl" in text
    assert "each rank picks its device by LOCAL_RANK" in text
    assert "  ZE_AFFINITY_MASK=0,2  [set by xpu]" in text
    assert text.rstrip().splitlines()[-1].startswith("  ZE_AFFINITY_MASK=0,2 ")  # the copy-paste command line


@pytest.mark.claim("H5")
@pytest.mark.claim("H3")
def test_H5_H3_gaudi_half_server_gets_modules_int64_and_its_own_port(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys, "--simulate", "hpu:8", "--devices", "4,5,6,7")
    assert code == 0, err
    assert out is not None
    env, argv = out["env"], out["command"]
    assert env["HABANA_VISIBLE_MODULES"] == "4,5,6,7" and env["PT_ENABLE_INT64_SUPPORT"] == "1"
    assert out["collective"]["value"] == "hccl" and out["nproc"] == 4
    port = env["MASTER_PORT"]
    assert argv[argv.index("--master-port") + 1] == port  # torchrun ignores MASTER_PORT unless passed
    assert not [f for f in out["findings"] if f["severity"] == "warning"]


@pytest.mark.claim("H5")
def test_H5_gaudi_unsupported_device_set_shows_the_partial_server_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--dry-run", "--simulate", "hpu:8", "--devices", "1,2", SCRIPT]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^warning: .*1,2.*supported only for 2 or 4 .*4,5.* Fix: ", text, re.MULTILINE), text
    assert "HABANA_VISIBLE_MODULES=1,2" in text


class _Refuses:
    """A plugin whose launch environment says this launch cannot work."""

    @hookimpl
    def intelrt_launch_env(self, nproc: int) -> list[EnvVar | Finding]:
        return [EnvVar("INTELRT_TEST_LAUNCH", "yes", "tests the launch environment"),
                Finding("error", "cannot launch", f"{nproc} processes are too many", fix="use fewer")]


def test_a_plugin_error_finding_refuses_the_launch_and_launch_env_reaches_the_command() -> None:
    host = PluginHost()
    with pytest.raises(PlanError, match=r"refusing to launch: cannot launch — 1 processes are too many.*use fewer"):
        launch_command(SCRIPT, host=_with(host, _Refuses()))
    host = PluginHost()
    command = launch_command(SCRIPT, nproc=2, host=_with(host, _Quiet()))
    assert command.env_to_set()["INTELRT_TEST_LAUNCH"] == "yes"
    assert command.environment({})["INTELRT_TEST_LAUNCH"] == "yes"
    assert command.shell().startswith("INTELRT_TEST_LAUNCH=yes ")


class _Quiet:
    @hookimpl
    def intelrt_launch_env(self) -> list[EnvVar]:
        return [EnvVar("INTELRT_TEST_LAUNCH", "yes", "tests the launch environment")]


def _with(host: PluginHost, plugin: object) -> PluginHost:
    host.register(plugin, "launch-test")
    return host


def test_accelerate_launch_counts_processes_and_keeps_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys, "--simulate", "xpu:4:max1100", "--via", "accelerate")  # 4 one-tile GPUs
    assert code == 0, err
    assert out is not None
    argv = out["command"]
    assert argv[1:3] == ["-m", "accelerate.commands.launch"]
    assert argv[argv.index("--num_processes") + 1] == "4" and "--multi_gpu" in argv


def test_multi_node_uses_a_c10d_rendezvous(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys, "--nnodes", "2", "--nproc", "2", "--rdzv-endpoint", "node0:29400")
    assert code == 0, err
    assert out is not None
    argv = out["command"]
    for flag, value in (("--nnodes", "2"), ("--rdzv-backend", "c10d"), ("--rdzv-endpoint", "node0:29400")):
        assert argv[argv.index(flag) + 1] == value
    assert "--standalone" not in argv


def test_cpu_defaults_to_one_process_on_a_free_port(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys)
    assert code == 0, err
    assert out is not None
    assert out["nproc"] == 1 and "--standalone" in out["command"] and out["collective"]["value"] == "gloo"


@pytest.mark.parametrize("options, message", [
    (("--simulate", "xpu:4", "--nproc", "9"), r"nproc=9, but only 8 xpu device\(s\)"),  # 4 Max 1550s, FLAT
    (("--nnodes", "2"), r"--rdzv-endpoint"),
    (("--rdzv-endpoint", "nohostport"), r"HOST:PORT"),
    (("--devices", "0"), r"cpu backend has none to select"),
])
def test_bad_launch_requests_are_clear_errors(capsys: pytest.CaptureFixture[str], options: tuple[str, ...],
                                              message: str) -> None:
    code, _, err = dry_run(capsys, *options)
    assert code == 2
    assert re.search(message, err), err


def test_simulate_needs_dry_run_and_the_script_must_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--simulate", "xpu:2", SCRIPT]) == 2
    assert "only works with --dry-run" in capsys.readouterr().err
    assert main(["launch", "--dry-run", "no_such_script.py"]) == 2
    assert "no_such_script.py: no such script" in capsys.readouterr().err
