"""The command line's error contract (issue 21), for a catalogue of bad inputs per command.

Every case ends with the documented exit status (2: usage or configuration, 1: a run that failed),
one paragraph ``intelrt: error: …`` on stderr and no traceback; with ``--json`` the same error is
``{"error": {"type", "message", "fix"}}`` on stdout. Counts out of bounds are refused before
anything loads. The closed pipe, Ctrl-C and the unreachable hub run as real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from intelrt.cli import main

#: The installed `intelrt` script, as users run it. (Run as `python -m intelrt.cli`, CPython 3.11 now
#: and then ends an interrupted process by SIGINT after main() returned 130.)
INTELRT = [shutil.which("intelrt", path=os.path.dirname(sys.executable)) or "intelrt"]
SCRIPT = str(Path(__file__).parents[1] / "scripts" / "ddp_tiny.py")


@pytest.fixture(scope="module")
def bad(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Broken inputs a user can have on disk, built from the tiny model."""
    root = tmp_path_factory.mktemp("bad")

    def copy(name: str) -> Path:
        return Path(shutil.copytree(tiny_model, root / name))

    corrupt = copy("corrupt-weights")
    (corrupt / "model.safetensors").write_bytes((tiny_model / "model.safetensors").read_bytes()[:1000])
    unknown = copy("unknown-type")
    config = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "model_type": "nosuchmodel"}))
    no_weights = copy("no-weights")
    (no_weights / "model.safetensors").unlink()
    broken_config = copy("broken-config")
    (broken_config / "config.json").write_text("{not json")
    remote_code = copy("remote-code")
    (remote_code / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "x.Model"}}))
    binary = root / "data.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    a_file = root / "a-file"
    a_file.write_text("not a directory")
    return {"corrupt": str(corrupt), "unknown": str(unknown), "no_weights": str(no_weights),
            "broken_config": str(broken_config), "remote_code": str(remote_code), "binary": str(binary),
            "file": str(a_file), "missing": str(root / "missing.txt"), "tiny": str(tiny_model)}


#: (argv with {placeholders}, exit status, words the message must contain)
CASES: list[tuple[list[str], int, str]] = [
    (["plugins", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["plugins", "extra"], 2, "unrecognized arguments: extra"),
    (["doctor", "--simulate", "bogus"], 2, "KIND[:COUNT[:GENERATION]]"),
    (["doctor", "--simulate", "xpu:100000000"], 2, "COUNT must be <= 64"),
    (["doctor", "--simulate", "xpu:2:gaudi3"], 2, "GENERATION for xpu must be one of"),
    (["plan", "--dtype", "int3"], 2, "dtype='int3' is not one of"),
    (["plan", "--kernels", "maybe"], 2, "argument --kernels: invalid choice"),
    (["plan", "--backend", "xpu"], 2, "backend 'xpu' was asked for"),
    (["plan", "--backend", "nosuch"], 2, "is not a backend intelrt knows"),
    (["plan", "--compile", "nosuchbackend"], 2, "is not a torch.compile backend"),
    (["plan", "--devices", "a,b"], 2, "every id must be a whole number"),
    (["plan", "--quantization", "3bit"], 2, "quantization='3bit' is not one of"),
    (["plan", "--attention", "nonsense"], 2, "is not an attention implementation"),
    (["plan", "--quantization", "4bit", "--compile", "on"], 2, "cannot run on the CPU"),
    (["plan", "--simulate", "tpu:2"], 2, "KIND[:COUNT[:GENERATION]]"),
    (["plan", "my models/qwen"], 2, "no such directory"),
    (["plan", "nosuchorg/nosuchmodel"], 2, "not in the local hub cache"),
    (["plan", "{file}"], 2, "is a file"),
    (["plan", "{broken_config}"], 2, "cannot read it as JSON"),
    (["plan", "{remote_code}"], 2, "trust_remote_code"),
    (["run", "--max-new-tokens", "-3"], 2, "argument --max-new-tokens: must be >= 1, got -3"),
    (["run", "--max-new-tokens", "ten"], 2, "must be a whole number"),
    (["run", "--max-new-tokens", "1000000000"], 2, "was built for 512 positions"),
    (["run", "--simulate", "xpu:2"], 2, "--simulate only plans"),
    (["run", "--simulate", "bogus"], 2, "--simulate only plans"),
    (["run", "--prompt", " "], 2, "argument --prompt: must not be empty"),
    (["run", "{corrupt}", "--max-new-tokens", "2"], 2, "is truncated or not a safetensors file"),
    (["run", "{unknown}", "--max-new-tokens", "2"], 2, "model type `nosuchmodel`"),
    (["run", "{no_weights}"], 2, "no weights"),
    (["run", "--compile", "nosuchbackend"], 2, "is not a torch.compile backend"),
    (["run", "--task", "feature-extraction"], 2, "intelrt run needs a text-generation model"),
    (["train", "--demo", "--epochs", "nan"], 2, "argument --epochs: must be a finite number > 0, got 'nan'"),
    (["train", "--demo", "--epochs", "inf"], 2, "must be a finite number > 0"),
    (["train", "--demo", "--epochs", "-1"], 2, "must be a finite number > 0"),
    (["train", "--demo", "--batch-size", "0"], 2, "argument --batch-size: must be >= 1, got 0"),
    (["train", "--demo", "--learning-rate", "-1"], 2, "argument --learning-rate: must be a finite number > 0"),
    (["train", "--demo", "--max-steps", "0"], 2, "argument --max-steps: must be >= 1"),
    (["train", "--demo", "--save-steps", "0"], 2, "argument --save-steps: must be >= 1"),
    (["train", "--demo", "--block-size", "1"], 2, "argument --block-size: must be >= 2"),
    (["train", "--demo", "--seed", "-1"], 2, "argument --seed: must be >= 0"),
    (["train", "--demo", "--seed", str(2**32)], 2, "argument --seed: must be <= 4294967295"),
    (["train", "--demo", "--block-size", "100000"], 2, "was built for 512 positions"),
    (["train", "--data", "{missing}", "--output", "out"], 2, "missing.txt: no such file"),
    (["train", "--demo", "--output", "{file}"], 2, "is a file"),
    (["train", "--data", "{binary}", "--output", "{out}", "--max-steps", "1"], 2, "not UTF-8 text"),
    (["train", "--demo", "--4bit", "--quantization", "8bit"], 2, "--4bit and --quantization 8bit disagree"),
    (["train", "--demo", "--simulate", "xpu:2"], 2, "--simulate only plans"),
    (["train", "--demo", "--task", "sequence-classification"], 2, "intelrt train needs a text-generation model"),
    (["launch", "--nproc", "0", SCRIPT], 2, "argument --nproc: must be >= 1"),
    (["launch", "--nproc", "100000", SCRIPT], 2, "argument --nproc: must be <= 1024"),
    (["launch", "--nnodes", "0", SCRIPT], 2, "argument --nnodes: must be >= 1"),
    (["launch", "--node-rank", "-1", SCRIPT], 2, "argument --node-rank: must be >= 0"),
    (["launch", "--via", "mpi", SCRIPT], 2, "argument --via: invalid choice"),
    (["launch", "no_such_script.py"], 2, "no_such_script.py: no such script"),
    (["launch", "--simulate", "xpu:2", SCRIPT], 2, "only works with --dry-run"),
    (["launch", "--dry-run", "--simulate", "xpu:1", "--nproc", "8", SCRIPT], 2, "nproc=8, but only"),
    (["launch", "--nnodes", "2", "--rdzv-endpoint", "nohostport", SCRIPT], 2, "HOST:PORT"),
    (["launch"], 2, "the following arguments are required: script"),
    (["launch", "--rdzv-id", "job7", SCRIPT], 2, "--rdzv-id names torchrun's rendezvous"),
    (["bench", "--tiny", "--requests", "0"], 2, "argument --requests: must be >= 1, got 0"),
    (["bench", "--tiny", "--new-tokens", "-1"], 2, "argument --new-tokens: must be >= 1"),
    (["bench", "--tiny", "--output", "/no/such/dir/bench.json"], 2, "does not exist"),
    (["bench", "--tiny", "--only-verify", "--variants", "--repeats", "5"], 2,
     "--only-verify runs only the float32 comparison, so --variants, --repeats would do nothing"),
    (["bench", "--device", "tpu"], 2, "argument --device: invalid choice: 'tpu'"),
    (["nosuchcommand"], 2, "invalid choice: 'nosuchcommand'"),
    ([], 2, "the following arguments are required: COMMAND"),
]


def _argv(case: list[str], paths: dict[str, str], tmp_path: Path) -> list[str]:
    return [a.format(**paths, out=str(tmp_path / "out")) for a in case]


def _with_json(argv: list[str]) -> list[str]:
    return [*argv[:1], "--json", *argv[1:]]  # right after the command: before launch's script


@pytest.mark.parametrize("case, code, words", CASES, ids=[" ".join(c[0]) or "(nothing)" for c in CASES])
def test_bad_input_exits_with_one_paragraph_and_a_json_error(case: list[str], code: int, words: str,
                                                             bad: dict[str, str], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             one_torch_thread: None) -> None:
    argv = _argv(case, bad, tmp_path)
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert err.count("intelrt: error: ") == 1 and words in err, err
    assert "Traceback" not in err
    paragraph = err[err.index("intelrt: error: "):].strip()
    assert "\n\n" not in paragraph

    if not argv:
        return
    assert main(_with_json(argv)) == code
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert set(error) == {"type", "message", "fix"} and all(isinstance(v, str) and v for v in error.values())
    assert words in error["message"] or words in error["fix"], error
    assert "Traceback" not in err and "intelrt: error" not in err


def test_verbose_shows_the_traceback_and_verbose_goes_before_or_after_the_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--backend", "xpu"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    for argv in (["-v", "plan", "--backend", "xpu"], ["plan", "--backend", "xpu", "-v"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "BackendUnavailableError" in err
        assert err.rstrip().splitlines()[-1].startswith("  fix:") or "intelrt: error:" in err


def _process(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([*INTELRT, *args], text=True, env={**os.environ, **(env or {})}, **kwargs)


@pytest.mark.parametrize("command", [["plugins"], ["plugins", "--json"], ["doctor"]])
def test_a_closed_output_pipe_ends_the_command_quietly(command: list[str]) -> None:
    """``intelrt plugins | head``: the reader is gone before anything is written."""
    read, write = os.pipe()
    os.close(read)
    process = _process(*command, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, err = process.communicate(timeout=120)
    progress = "intelrt: checking this machine"  # doctor's progress is on stderr, which is still open
    assert process.returncode == 1 and [line for line in err.splitlines() if not line.startswith(progress)] == [], err


@pytest.fixture
def training_data(tmp_path: Path) -> Path:
    data = tmp_path / "data.txt"
    data.write_text("Intel GPUs run PyTorch through the XPU backend.\n" * 50, encoding="utf-8")
    return data


def _interrupt_after_loading(process: subprocess.Popen[str]) -> Iterator[str]:
    """Send Ctrl-C once the command says it is loading the model; yield its stderr lines."""
    assert process.stderr is not None
    for line in process.stderr:
        yield line
        if line.startswith("intelrt: loading"):
            time.sleep(0.5)
            process.send_signal(signal.SIGINT)
            break
    yield from process.stderr


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], said: list[str]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, f"exit {process.returncode}: {''.join(said)}"
        assert time.monotonic() < deadline, "".join(said)
        time.sleep(0.1)


@pytest.mark.usefixtures("ctrl_c_raises")
@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_exits_130_without_a_traceback(tiny_model: Path, training_data: Path, tmp_path: Path,
                                              as_json: bool) -> None:
    process = _process("train", str(tiny_model), "--data", str(training_data), "--output", str(tmp_path / "out"),
                       "--lora", "--epochs", "1000", *(["--json"] if as_json else []),
                       env={"OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = "".join(_interrupt_after_loading(process))
    out = process.stdout.read() if process.stdout else ""
    assert process.wait(timeout=120) == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    if as_json:
        assert json.loads(out)["error"]["type"] == "Interrupted"
    else:
        assert "intelrt: error: interrupted (Ctrl-C)" in err


def test_a_background_train_ignores_ctrl_c_and_stops_cleanly_on_sigterm(tiny_model: Path, training_data: Path,
                                                                       tmp_path: Path) -> None:
    """``intelrt train … &`` from a script: the shell starts it with SIGINT ignored, so the Ctrl-C
    typed for the foreground job does not stop it; ``kill PID`` (SIGTERM) does, like Ctrl-C: exit
    143, one line, no checkpoint cut short, the output directory's lock released."""
    out = tmp_path / "out"
    process = subprocess.Popen(["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", *INTELRT, "train", str(tiny_model),
                                "--data", str(training_data), "--output", str(out), "--lora", "--epochs", "1000",
                                "--save-steps", "1"],
                               text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    said: list[str] = []

    def read() -> None:
        for line in process.stderr or ():
            said.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _wait_for(lambda: any(line.startswith("intelrt: loading") for line in said), process, said)
        process.send_signal(signal.SIGINT)  # the terminal's Ctrl-C, for another job
        _wait_for(lambda: (out / "checkpoint-2").is_dir(), process, said)  # …trains on
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = "".join(said)
    assert code == 143, err
    assert "intelrt: error: stopped (SIGTERM)" in err and "Traceback" not in err, err
    left = sorted(p.name for p in out.iterdir())
    assert not [name for name in left if name.startswith(".intelrt-")], left
    checkpoints = [out / name for name in left if name.startswith("checkpoint-")]
    # checkpoint-2 (or a later one) may have been cut short by the SIGTERM: then it is gone
    assert "checkpoint-1" in left and all((c / "trainer_state.json").is_file() for c in checkpoints), left


@pytest.mark.slow
def test_unreachable_hub_is_a_runtime_failure_with_a_fix(tmp_path: Path) -> None:
    """A hub id that is not cached, with the hub unreachable (a closed local port): exit 1, one
    paragraph naming the network, no 60-line LocalEntryNotFoundError."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_ETAG_TIMEOUT="2")
    result = subprocess.run([*INTELRT, "run", "nosuchorg/nosuchmodel"], capture_output=True, text=True, env=env,
                            timeout=180)
    assert result.returncode == 1, result.stderr
    assert "intelrt: error: nosuchorg/nosuchmodel: config.json could not be downloaded" in result.stderr
    assert "fix: check the network" in result.stderr and "Traceback" not in result.stderr
    assert "intelrt: nosuchorg/nosuchmodel is not in the local hub cache: downloading it" in result.stderr


@pytest.fixture
def failing_compile_backend() -> Iterator[str]:
    """A torch.compile backend that cannot compile anything, registered with torch's own registry."""
    from torch._dynamo.backends import registry

    name = "intelrt_test_cannot_compile"

    def cannot_compile(graph: Any, inputs: Any) -> Any:
        raise RuntimeError("this backend cannot compile anything")

    registry.register_backend(cannot_compile, name=name)
    yield name
    registry._COMPILER_FNS.pop(name, None)


def test_a_crash_inside_torch_compile_is_a_runtime_failure_with_a_fix(tiny_model: Path, failing_compile_backend: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """torch's BackendCompilerFailed, raised while transformers' generate runs the compiled model
    (8-bit weights keep intelrt's fast loop, which falls back by itself, out of the way)."""
    argv = ["run", str(tiny_model), "--compile", failing_compile_backend, "--quantization", "8bit",
            "--max-new-tokens", "2", "--json"]
    assert main(argv) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "CompileFailed" and "this backend cannot compile anything" in error["message"]
    assert "--compile none" in error["fix"]


def test_an_error_quoting_a_secret_shows_it_masked(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_print_me")
    for extra in ([], ["--json"]):
        assert main(["plan", "hf_do_not_print_me/model", *extra]) == 2
        out, err = capsys.readouterr()
        assert "hf_do_not_print_me" not in out + err and "***/model" in out + err
