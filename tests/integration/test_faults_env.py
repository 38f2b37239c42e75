"""Fault catalogue: environment variables intelrt and the vendor stacks read, set as a shell leaves
them — and the run-level options that were silently ignored or wrong.

- Blame: a ``ZE_AFFINITY_MASK`` the Level Zero driver cannot read made ``intelrt plan`` fail with
  "torch.compile failed … run with --compile none" (transformers' quantizers import torchao, whose
  Triton check counts the devices under ``torch/_dynamo``, and the simulated driver — strict like the
  real one — fails to start there); ``PT_HPU_LAZY_MODE`` odd or lazy on a stock torch turned a Gaudi
  plan into a CPU plan quoting the bridge's assertion without naming the variable; an allow-list or
  block-list keeping the detected backend's plugin out said "no accelerator found".
- Silently wrong: a typo in ``INTELRT_DISABLE_PLUGINS``, a ``WORLD_SIZE`` left in the shell without a
  rank, ``intelrt launch -m mod --dry-run`` (the module ran), ``launch --dry-run`` on a busy
  ``MASTER_PORT`` (exit 0), a ``.csv`` trained as prose with its header, a ``.jsonl`` of blank texts
  trained, ``train()``'s own defaults reported as "set by you", ``intelrt serve --host 0.0.0.0``
  without an API key.
- Noise: two torch warnings ("… is an Enum subclass …") printed by importing torchao on every command.

The driver and noise cases run ``intelrt`` in a fresh process (what happens at the first import of
torchao, once per process); the others in-process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, Seen, call, check, cli, error, works

import intelrt

catalogue = Catalogue(__file__)


def process(*argv: str, env: dict[str, str] | None = None, timeout: float = 180) -> Seen:
    """``intelrt ARGV`` in a new process (offline, one torch thread)."""
    done = subprocess.run([sys.executable, "-m", "intelrt.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return Seen(done.stdout, done.stderr, done.returncode, argv=tuple(argv), env=dict(env or {}))


DRIVER = [
    error(f"env-ze-affinity-mask-{name}-plan", "env", f"ZE_AFFINITY_MASK={mask} (an entry the driver cannot read) "
          "for plan: blamed on torch.compile", "the device driver failed to start", f"ZE_AFFINITY_MASK={mask!r}",
          "correct it", risk="wrong culprit", trigger=f"ZE_AFFINITY_MASK={mask} intelrt plan --simulate xpu:2",
          data=mask)
    for name, mask in (("word", "gpu1"), ("empty-entry", "0,,1"))]


@catalogue.cases(DRIVER)
def test_a_driver_that_cannot_read_its_mask_is_named_not_torch_compile(case: Fault) -> None:
    seen = check(case, process("plan", "--simulate", "xpu:2", env={"ZE_AFFINITY_MASK": case.data}), verbose=False)
    assert "torch.compile" not in seen.message and "--compile none" not in seen.message
    again = process("-v", "plan", "--simulate", "xpu:2", env={"ZE_AFFINITY_MASK": case.data})
    assert again.code == seen.code and "Traceback" in again.stderr


@catalogue.cases(works("cli-no-torch-warnings-from-torchao", "cli", "every command printed two torch warnings "
                       "from importing torchao (\"… is an Enum subclass …\"), even plan", risk="silent wrong",
                       trigger="intelrt plan (a fresh process); intelrt -v plan shows them"))
def test_dependency_warnings_stay_out_of_normal_output(case: Fault) -> None:
    seen = check(case, process("plan"), verbose=False)
    assert "Enum subclass" not in seen.stderr and "_pytree" not in seen.stderr, seen.stderr[-2000:]
    assert "Enum subclass" in process("-v", "plan").stderr, "-v no longer shows them: the case proves nothing"


GAUDI_AND_LISTS = [
    works("env-lazy-mode-odd-value", "env", "PT_HPU_LAZY_MODE=2: a Gaudi plan became a CPU plan quoting the "
          "bridge's assertion, the variable never named", "PT_HPU_LAZY_MODE='2' asks for lazy mode",
          "neither 0 (eager) nor 1", "set PT_HPU_LAZY_MODE=0", risk="wrong culprit",
          trigger="PT_HPU_LAZY_MODE=2 intelrt plan --simulate hpu:8",
          data=(["plan", "--simulate", "hpu:8"], {"PT_HPU_LAZY_MODE": "2"})),
    works("env-lazy-mode-on-stock-torch", "env", "PT_HPU_LAZY_MODE=1 on a stock torch build",
          "PT_HPU_LAZY_MODE='1' asks for lazy mode", "stock PyTorch", risk="wrong culprit",
          trigger="PT_HPU_LAZY_MODE=1 intelrt plan --simulate hpu:8",
          data=(["plan", "--simulate", "hpu:8"], {"PT_HPU_LAZY_MODE": "1"})),
    works("env-allow-list-leaves-out-the-detected-backend", "env", "INTELRT_PLUGINS leaving out the plugin of the "
          "machine's accelerator (\"no accelerator found\")", "plugin 'hpu' (intelrt-hpu) is not loaded",
          "left out by INTELRT_PLUGINS=xpu", risk="wrong culprit",
          trigger="INTELRT_PLUGINS=xpu intelrt plan --simulate hpu:8",
          data=(["plan", "--simulate", "hpu:8"], {"INTELRT_PLUGINS": "xpu"})),
    works("env-block-list-typo", "env", "a typo in INTELRT_DISABLE_PLUGINS (blocked nothing, without a word)",
          "INTELRT_DISABLE_PLUGINS names hpuu, which no plugin has", risk="silent wrong",
          trigger="INTELRT_DISABLE_PLUGINS=hpuu intelrt plugins", data=(["plugins"], {"INTELRT_DISABLE_PLUGINS": "hpuu"})),
    works("env-block-list-typo-doctor", "env", "… for doctor: a finding", "warning: INTELRT_DISABLE_PLUGINS names no "
          "plugin", risk="silent wrong", trigger="INTELRT_DISABLE_PLUGINS=hpuu intelrt doctor",
          data=(["doctor"], {"INTELRT_DISABLE_PLUGINS": "hpuu"})),
    error("env-block-list-excludes-the-backend-asked-for", "env", "--backend hpu with the hpu plugin blocked (\"not "
          "a backend intelrt knows\", the block-list unnamed)", "plugin 'hpu' (intelrt-hpu) is not loaded",
          "blocked by INTELRT_DISABLE_PLUGINS=hpu", risk="wrong culprit",
          trigger="INTELRT_DISABLE_PLUGINS=hpu intelrt plan --backend hpu --simulate hpu:8",
          data=(["plan", "--backend", "hpu", "--simulate", "hpu:8"], {"INTELRT_DISABLE_PLUGINS": "hpu"})),
    error("env-world-size-without-rank", "env", "WORLD_SIZE=4 left in the shell, no rank (planned as a rank of 4)",
          "WORLD_SIZE=4 is set but no rank is", "Unset WORLD_SIZE", risk="silent wrong",
          trigger="WORLD_SIZE=4 intelrt plan", data=(["plan"], {"WORLD_SIZE": "4"})),
    error("env-rank-past-world-size", "env", "RANK=5 with WORLD_SIZE=2", "RANK=5 is not below WORLD_SIZE=2",
          risk="silent wrong", trigger="WORLD_SIZE=2 RANK=5 intelrt plan",
          data=(["plan"], {"WORLD_SIZE": "2", "RANK": "5"})),
]


@catalogue.cases(GAUDI_AND_LISTS)
def test_variables_that_steer_backends_and_plugins_are_named(case: Fault) -> None:
    argv, env = case.data
    seen = cli(*argv, env=env)
    if argv == ["doctor"]:
        assert "findings:\n  none" not in seen.stdout
    seen.stdout = " ".join(seen.stdout.split())  # the plan's reasons are wrapped at the terminal's width
    check(case, seen)


# -- launch ------------------------------------------------------------------------------------------

@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``ran_it`` on the path of this process and its children: it writes ``ran`` when it runs."""
    (tmp_path / "ran_it.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('yes')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


@catalogue.cases(
    error("launch-dry-run-after-the-module", "launch", "intelrt launch -m MOD --dry-run: the flag went to the module, "
          "and the job ran", "--dry-run comes after the script", "put it before the script", "--",
          risk="silent wrong", trigger="intelrt launch -m ran_it --dry-run", data=["launch", "-m", "ran_it", "--dry-run"]),
    works("launch-dry-run-for-the-module-after-dashes", "launch", "… with `--` before it: the module's own flag",
          "--module ran_it --dry-run", trigger="intelrt launch --dry-run -m ran_it -- --dry-run",
          data=["launch", "--dry-run", "-m", "ran_it", "--", "--dry-run"]))
def test_a_dry_run_flag_after_the_script_never_runs_the_job(case: Fault, module: Path) -> None:
    check(case, cli(*case.data))
    assert not (module / "ran").exists(), "the module ran"


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        yield int(held.getsockname()[1])


@catalogue.cases(error("launch-dry-run-busy-master-port", "launch", "launch --dry-run with a MASTER_PORT another "
                       "process listens on (exit 0, not a word; the launch itself refuses it)", "is in use on this "
                       "machine", "pick a free one", risk="silent wrong",
                       trigger="MASTER_PORT=<held> intelrt launch --dry-run -m ran_it"))
def test_a_dry_run_refuses_what_the_launch_would(case: Fault, module: Path, busy_port: int) -> None:
    check(case, cli("launch", "--dry-run", "-m", "ran_it", env={"MASTER_PORT": str(busy_port)}))


# -- train ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tiny_model: Path, one_torch_thread: None) -> Any:
    return intelrt.load(tiny_model)


DATA = [
    error("train-csv-as-text", "train", "a .csv file trained as plain text, header and commas included", "is a csv "
          "file", "header and separators", "load_dataset('csv'", risk="silent wrong", error="ConfigurationError",
          trigger="train('notes.csv')", data=("notes.csv", "text,label\nIntel GPUs run PyTorch.,1\n" * 4)),
    error("train-tsv-as-text", "train", "… a .tsv file", "is a tsv file", "delimiter=", risk="silent wrong",
          error="ConfigurationError", trigger="train('notes.tsv')", data=("notes.tsv", "text\tlabel\nx\t1\n")),
    error("train-jsonl-of-blank-texts", "train", "a .jsonl whose texts are all blank trained (the same list is "
          "refused)", "holds no text", risk="silent wrong", error="ConfigurationError",
          trigger='train(\'blank.jsonl\') with {"text": ""} rows',
          data=("blank.jsonl", '{"text": ""}\n{"text": "   "}\n{"text": "\\n"}\n')),
]


@catalogue.cases(DATA)
def test_data_files_read_the_wrong_way_are_refused(case: Fault, loaded: Any, tmp_path: Path) -> None:
    name, body = case.data
    (tmp_path / name).write_text(body, encoding="utf-8")
    check(case, call(lambda: loaded.train(tmp_path / name, output_dir=tmp_path / "out", max_steps=1)))
    assert not (tmp_path / "out" / "config.json").exists()


@catalogue.cases(works("train-defaults-not-set-by-you", "train", "train()'s own defaults (logging_steps, "
                       "report_to, batch size, epochs) reported as \"set by you\"", risk="silent wrong",
                       trigger="train(texts, max_steps=1, block_size=8).settings"))
def test_train_reports_its_own_defaults_as_its_own(case: Fault, loaded: Any, tmp_path: Path) -> None:
    seen = check(case, call(lambda: loaded.train(["Intel GPUs run PyTorch."] * 8, output_dir=tmp_path / "out",
                                                 max_steps=1, block_size=8, disable_tqdm=True, save_strategy="no")))
    by_name = {s.name: s for s in seen.value.settings}
    for name in ("logging_steps", "report_to", "per_device_train_batch_size", "num_train_epochs"):
        assert by_name[name].source == "intelrt" and "set by you" not in by_name[name].reason, by_name[name]
    for name in ("max_steps", "disable_tqdm", "save_strategy"):
        assert by_name[name].reason == "set by you"
    saved = json.loads((tmp_path / "out" / "intelrt_train.json").read_text())["settings"]
    assert {"name": "logging_steps", "source": "intelrt"}.items() <= next(s for s in saved
                                                                          if s["name"] == "logging_steps").items()


# -- serve ---------------------------------------------------------------------------------------------

@catalogue.cases(works("serve-all-interfaces-without-api-key", "serve", "intelrt serve --host 0.0.0.0 without an API "
                       "key: anyone on the network could use it, without a word", "without an API key",
                       "--api-key", risk="leak", trigger="intelrt serve --host 0.0.0.0 --port FREE"))
def test_serving_beyond_this_machine_without_a_key_warns(case: Fault) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    server = subprocess.Popen([sys.executable, "-m", "intelrt.cli", "serve", "--host", "0.0.0.0", "--port", port],
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert server.stderr is not None
        while time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "ready" in line or "API key" in line:
                break
    finally:
        server.terminate()
        server.wait(timeout=60)
    check(case, Seen(stderr="".join(lines), code=0, argv=("serve", "--host", "0.0.0.0")), verbose=False)
