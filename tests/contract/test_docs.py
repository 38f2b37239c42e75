"""The docs are checked against the code (datasette's test_docs.py style): every hook has a
reference page that matches its spec and a test of its own (the test running the page's example
through the real host, which ``test_every_hook_has_a_generated_reference_page_with_a_running_example``
requires), every doctor finding and every environment variable is documented, and the code in the
docs runs.

Each ``test_hook_<name>_reference_example`` runs the example on that hook's reference page
through the real plugin host and checks what the page says it does.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.errors import BackendUnavailableError, PlanError
from intelrt.hooks import hookspecs
from intelrt.hooks.backend import Backend
from intelrt.hooks.concerns import CONCERNS
from intelrt.hooks.request import REQUEST_OPTIONS, Request
from intelrt.host.manager import PluginHost
from intelrt.planning.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Code whose findings and environment variables the docs must cover (intelrt and its Intel plugins).
SOURCE_ROOTS = [ROOT / "core" / "intelrt", *sorted((ROOT / "plugins").glob("*/intelrt_*"))]


def _reference() -> types.ModuleType:
    """docs/reference.py, the mkdocs hook that renders the reference pages from the code."""
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _reference()
HOOKS = REFERENCE.hook_names()


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


# -- the hook reference ------------------------------------------------------------------------

@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_generated_reference_page_with_a_running_example(hook: str) -> None:
    page = REFERENCE.hook_page(hook)
    params = inspect.signature(getattr(hookspecs, hook)).parameters
    assert f"def {hook}(" in page and all(f"    {name}: " in page for name in params)
    assert all(f"- `{name}` — " in _section(page, "Arguments") for name in params), \
        f"the docstring of {hook} does not describe each argument with :param name:"
    assert "**Returns:**" in page, f"the docstring of {hook} says no :returns:"
    example = REFERENCE.example_of(hook)
    assert (DOCS / "hooks" / "examples" / f"{example}.py").is_file()
    test = f"test_hook_{hook.removeprefix('intelrt_')}_reference_example" if example == hook else \
        "test_backend_reference_example"
    assert test in page and test in globals(), f"no test runs the example of {hook}"


def test_the_reference_says_which_hooks_stop_at_the_first_answer() -> None:
    selection = [h for h in HOOKS if h.startswith("intelrt_select_")]
    assert selection == sorted(c.hook for c in CONCERNS if c.hook)
    assert all("**firstresult:** yes" in REFERENCE.hook_page(h) for h in selection)
    assert all("**firstresult:** no" in REFERENCE.hook_page(h) for h in HOOKS if h not in selection)


def test_the_backend_page_lists_every_fact_and_method_of_the_contract() -> None:
    page = REFERENCE.backend_page()
    facts = [name for name, value in vars(Backend).items() if not name.startswith("_") and not callable(value)
             and not isinstance(value, (property, classmethod))] + ["name", "device_type"]
    missing = [name for name in facts if f"| `{name}` |" not in page]
    assert not missing, f"class attributes of Backend without a docstring under them: {missing}"
    methods = [name for name, value in vars(Backend).items() if not name.startswith("_")
               and (callable(value) or isinstance(value, classmethod)) and not isinstance(value, property)]
    assert all(f"| `{name}(" in page for name in methods)


def test_the_options_table_of_the_api_page_is_generated_from_the_request() -> None:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    assert "<!-- request-options -->" in page
    table = REFERENCE.expand_markers("<!-- request-options -->")
    assert all(f"| `{o.name}` |" in table for o in REQUEST_OPTIONS)


# -- troubleshooting and environment variables ---------------------------------------------------

def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for root in SOURCE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            if "testing" in path.relative_to(root).parts:
                continue  # simulation and test tooling
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _constants() -> dict[str, str]:
    """Module-level string constants (``MASK_VAR = "ZE_AFFINITY_MASK"``) of every source file."""
    found: dict[str, str] = {}
    for _path, tree in _sources():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return found


def _text(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def _finding_titles() -> list[tuple[str, str]]:
    """(where and title, regex) for every ``Finding(...)`` title: literal text, ``.+`` for what varies."""
    constants = _constants()
    titles = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Finding"):
                continue
            args = dict(enumerate(node.args)) | {k.arg: k.value for k in node.keywords if k.arg}
            title = args.get(1, args.get("title"))
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(title, ast.JoinedStr):
                parts = []
                for part in title.values:
                    fixed = _text(part.value, constants) if isinstance(part, ast.FormattedValue) else _text(part, constants)
                    parts.append(re.escape(fixed) if fixed is not None else ".+")
                titles.append((f"{where}: {ast.unparse(title)}", "".join(parts)))
            elif _text(title, constants) is not None:
                titles.append((f"{where}: {_text(title, constants)!r}", re.escape(_text(title, constants) or "")))
            else:  # a title built at run time cannot be checked: write it as a literal or an f-string
                titles.append((f"{where}: {ast.unparse(title) if title else None}", "(?!)"))
    return titles


def test_troubleshooting_documents_every_finding_with_a_fix() -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    sections = re.split(r"^#{2,4} ", text, flags=re.M)
    headings = {s.split("\n", 1)[0].replace("`", "").strip(): s for s in sections}
    titles = _finding_titles()
    assert len(titles) > 20  # the scan sees the findings of intelrt, xpu and hpu
    missing = [where for where, regex in titles
               if not any(re.fullmatch(regex, h) for h in headings)]
    assert not missing, "docs/troubleshooting.md has no heading for these findings (use a heading per title, " \
                        "with CAPITALS for what varies):\n" + "\n".join(missing)
    for where, regex in titles:
        section = next(s for h, s in headings.items() if re.fullmatch(regex, h))
        assert "**Fix:**" in section, f"the troubleshooting entry for {where} says no fix"


def _environment_variables() -> dict[str, str]:
    """Every variable the code reads (``env.get("X")``, ``"X" in env``, ``env["X"]``) or sets (``EnvVar("X", ...)``)."""
    constants = _constants()
    name = re.compile(r"^[A-Z][A-Z0-9_]*[A-Z0-9]$")
    found: dict[str, str] = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            candidates: list[ast.expr] = []
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault", "getenv") \
                        and re.search("env", ast.unparse(func.value), re.I):
                    candidates.append(node.args[0])
                if getattr(func, "id", getattr(func, "attr", "")) in ("EnvVar", "getenv"):
                    candidates.append(node.args[0])
            elif isinstance(node, ast.Subscript) and re.search("env", ast.unparse(node.value), re.I):
                candidates.append(node.slice)
            elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                    and re.search("env", ast.unparse(node.comparators[0]), re.I):
                candidates.append(node.left)
            for candidate in candidates:
                value = _text(candidate, constants)
                if value and name.match(value):
                    found.setdefault(value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_environment_page_lists_every_variable_read_or_set_with_its_claim() -> None:
    rows = [line for line in (DOCS / "environment.md").read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    variables = _environment_variables()
    assert {"ZE_AFFINITY_MASK", "PT_ENABLE_INT64_SUPPORT", "INTELRT_PLUGINS", "HF_HUB_OFFLINE"} <= set(variables)
    for variable, where in sorted(variables.items()):
        row = next((r for r in rows if r.startswith(f"| `{variable}` |")), None)
        assert row is not None, f"{variable} (read or set at {where}) has no row in docs/environment.md"
        assert re.search(r"\b[XHCST]\d+\b", row), f"docs/environment.md: {variable} has no SPEC claim id"


# -- the embedding page's training loop runs ---------------------------------------------------

def test_embedding_page_training_loop_runs_on_the_tiny_model(tiny_model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / "embedding.md").read_text(encoding="utf-8")
    code = _section(text, "A custom training loop")
    block = re.search(r"```python\n(.*?)```", code, re.S)
    assert block is not None
    source = re.sub(r"^MODEL = .*$", f"MODEL = {str(tiny_model)!r}", block.group(1), count=1, flags=re.M)
    used = set(re.findall(r"intelrt\.(\w+)\(", source))
    assert used == {"detect", "plan", "setup_env", "training_arguments", "compile"}
    monkeypatch.chdir(tmp_path)
    exec(compile(source, "docs/embedding.md", "exec"), {"__name__": "embedding_example"})  # noqa: S102
    losses = [float(x) for x in re.findall(r"^loss (\S+)$", capsys.readouterr().out, re.M)]
    assert len(losses) == 2 and all(0 < loss < 100 for loss in losses)


# -- the reference examples, one test per hook --------------------------------------------------

def _example(name: str) -> types.ModuleType:
    path = DOCS / "hooks" / "examples" / f"{name}.py"
    module = types.ModuleType(f"docs_example_{name}")
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def _host(hook: str) -> PluginHost:
    """Built-ins, installed plugins, and the page's example registered as plugin ``example``."""
    host = PluginHost()
    host.register(_example(hook), "example")
    return host


def _model(root: Path, model_type: str = "qwen3", **config: Any) -> str:
    arch = {"qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM"}[model_type]
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": [arch], "vocab_size": 256, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, **config}))
    return str(root)


def _plan(host: PluginHost, model: str, env: dict[str, str] | None = None, **choices: Any) -> Any:
    return make_plan(Request.build(model, **choices), host=host, env=env or {})


@contextlib.contextmanager
def _vendor_module(name: str, **attrs: Any) -> Iterator[types.ModuleType]:
    """A stand-in vendor runtime module (the vendor boundary; intelrt's code is untouched)."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    try:
        yield module
    finally:
        sys.modules.pop(name, None)


def test_backend_reference_example(tmp_path: Path) -> None:
    """The MyNPU backend of the Backend page: detected (unavailable without its runtime, with the
    reason), planned on, its compile wrapper switching backends, its graph capturer recording once."""
    host = _host("backend")
    model = _model(tmp_path / "m")
    backend = intelrt.detect(host=host, env={}).get("mynpu")
    assert backend is not None and not backend.available and backend.plugin == "example"
    with pytest.raises(BackendUnavailableError, match=r"MyNPU runtime \(module mynpu_runtime\) is not installed"):
        _plan(host, model, backend="mynpu")
    log: list[str] = []

    class Graph:
        def replay(self) -> str:
            log.append("replay")
            return "replayed"

    @contextlib.contextmanager
    def graph_capture(graph: Graph) -> Iterator[None]:
        log.append("capture")
        yield

    with _vendor_module("mynpu_runtime", device_count=lambda: 2, device_name=lambda i: f"MyNPU {i}", Graph=Graph,
                        graph_capture=graph_capture):
        plan = _plan(host, model, backend="mynpu", compile="on")
        capture = host.graph_capturer(plan.backend, "mynpu")
        assert capture is not None and host.graph_capturer(plan.backend, "cuda") is None
        replay = capture(lambda: log.append("step"), warmup=2)
    assert plan.backend.name == "mynpu" and plan.backend.device_count == 2
    assert plan.backend_reason == "forced by backend=" and plan.decided.compile.compiler == "mynpu"
    assert log == ["step", "step", "capture", "step"] and replay() == "replayed"
    calls: list[dict[str, Any]] = []

    def torch_compile(model: Any = None, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return model

    wrapper = host.compile_wrapper(plan.backend, torch_compile)
    assert wrapper is not None
    wrapper("model", backend="inductor", mode="max-autotune")
    wrapper("model", backend="eager")
    assert calls == [{"backend": "mynpu", "mode": "max-autotune"}, {"backend": "eager"}]


def test_hook_setup_env_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_setup_env")
    simulate("xpu", count=1)
    model = _model(tmp_path / "m")
    setting = {s.name: s for s in _plan(host, model).env}["SYCL_CACHE_PERSISTENT"]
    assert (setting.value, setting.action, setting.plugin) == ("1", "set", "example")
    kept = {s.name: s for s in _plan(host, model, {"SYCL_CACHE_PERSISTENT": "0"}).env}["SYCL_CACHE_PERSISTENT"]
    assert (kept.value, kept.action) == ("0", "kept")  # the user's value wins (SPEC C2)


def test_hook_select_dtype_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_select_dtype")
    simulate("xpu", count=1)
    model = _model(tmp_path / "m", torch_dtype="float16")
    dtype = _plan(host, model).decisions["dtype"]
    assert (dtype.value, dtype.plugin) == ("float16", "example")
    forced = _plan(host, model, dtype="bfloat16").decisions["dtype"]
    assert (forced.value, forced.forced) == ("bfloat16", True) and forced.plugin != "example"


def test_hook_select_placement_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_select_placement")
    simulate("xpu", count=2)
    model = _model(tmp_path / "m")
    placement = _plan(host, model, {"MYLAB_LONG_CONTEXT": "1"}).decisions["placement"]
    assert (placement.value.device_map, placement.plugin) == ("auto", "example")
    assert _plan(host, model).decisions["placement"].plugin != "example"


def test_hook_select_attention_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_select_attention")
    simulate("xpu", count=1)
    gemma2 = _model(tmp_path / "g", "gemma2", attn_logit_softcapping=50.0)
    attention = _plan(host, gemma2).decisions["attention"]
    assert (attention.value, attention.plugin) == ("eager", "example")
    forced = _plan(host, gemma2, attention="flex_attention").decisions["attention"]
    assert (forced.value, forced.forced) == ("flex_attention", True)
    with pytest.raises(PlanError, match="Gemma2ForCausalLM does not support attention='sdpa'"):
        _plan(host, gemma2, attention="sdpa")  # the class refuses it: said at plan time, not at load


def test_hook_select_kernels_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_select_kernels")
    simulate("xpu", count=1)
    kernels = _plan(host, _model(tmp_path / "m"), kernels=True).decisions["kernels"]
    assert kernels.plugin == "example"
    assert kernels.value.kernel_mapping == {"RMSNorm": {"xpu": "my-org/rmsnorm-xpu:RMSNorm"}}


def test_hook_select_quantization_reference_example(simulate, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host = _host("intelrt_select_quantization")
    simulate("xpu", count=1)
    with pytest.raises(PlanError, match="not validated on our Intel GPU fleet") as refused:
        _plan(host, _model(tmp_path / "m"), quantization="8bit")
    assert any("plugin 'example'" in note for note in refused.value.__notes__)


def test_hook_select_compile_reference_example(tmp_path: Path) -> None:
    host = _host("intelrt_select_compile")
    model = _model(tmp_path / "m")
    compiled = _plan(host, model, {"MYLAB_SERVING": "1"}).decisions["compile"]
    assert compiled.plugin == "example" and compiled.value.enabled is True
    off = _plan(host, model, {"MYLAB_SERVING": "1"}, compile="none").decisions["compile"]
    assert off.value.enabled is False and off.forced


def test_hook_select_decode_reference_example(tmp_path: Path) -> None:
    host = _host("intelrt_select_decode")
    model = _model(tmp_path / "m")
    decode = _plan(host, model, {"MYLAB_EVAL": "1"}).decisions["decode"]
    assert (decode.value.method, decode.plugin) == ("generate", "example")
    assert _plan(host, model).decisions["decode"].plugin != "example"


def test_hook_select_batching_reference_example(tmp_path: Path) -> None:
    host = _host("intelrt_select_batching")
    batching = _plan(host, _model(tmp_path / "m"), {"MYLAB_EVAL": "1"}).decisions["batching"]
    assert batching.plugin == "example"
    assert (batching.value.method, batching.value.engine, batching.value.max_batch) == ("padded", "generate", 8)


def test_hook_select_collective_reference_example(tmp_path: Path) -> None:
    host = _host("intelrt_select_collective")
    collective = _plan(host, _model(tmp_path / "m"), {"OMPI_COMM_WORLD_SIZE": "2"}).decisions["collective"]
    assert (collective.value, collective.plugin) == ("mpi", "example")


def test_hook_select_buckets_reference_example(tmp_path: Path) -> None:
    from intelrt.testing.simulation import simulate

    host = _host("intelrt_select_buckets")
    model = _model(tmp_path / "m")
    env = {"PT_ENABLE_INT64_SUPPORT": "1"}
    with simulate("hpu", 2, env=env):
        site = _plan(host, model, {**env, "SITE_PROMPTS": "short"}, workload="server").decisions["buckets"]
        gaudi = _plan(host, model, env, workload="server").decisions["buckets"]
    assert (site.value.prompt_lengths, site.value.warmup, site.plugin) == ((128, 256), True, "example")
    assert gaudi.plugin == "hpu" and "buckets" not in _plan(host, model, backend="cpu").decisions


def test_hook_select_parallelism_reference_example(tmp_path: Path) -> None:
    host = _host("intelrt_select_parallelism")
    model = _model(tmp_path / "m")
    with pytest.raises(PlanError, match="this site runs CPU ranks with DDP only; pass sharding='ddp'"):
        _plan(host, model, backend="cpu", sharding="fsdp")
    ddp = _plan(host, model, backend="cpu", sharding="ddp").decisions["parallelism"]
    assert (ddp.value.training, ddp.value.world_size, ddp.plugin) == ("ddp", 2, "example")


def test_hook_training_arguments_reference_example(tmp_path: Path) -> None:
    from intelrt.training.arguments import training_settings

    host = _host("intelrt_training_arguments")
    big = _plan(host, _model(tmp_path / "big", hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                             vocab_size=32000))
    settings = {s.name: s for s in training_settings(big, {}, host=host, env={})}
    assert settings["gradient_checkpointing"].value is True and settings["gradient_checkpointing"].source == "example"
    yours = {s.name: s for s in training_settings(big, {"gradient_checkpointing": False}, host=host, env={})}
    assert (yours["gradient_checkpointing"].value, yours["gradient_checkpointing"].source) == (False, "user")
    small = _plan(host, _model(tmp_path / "small"))
    assert "gradient_checkpointing" not in {s.name for s in training_settings(small, {}, host=host, env={})}


def test_hook_launch_env_reference_example(tmp_path: Path) -> None:
    from intelrt.training.launching import launch_command

    host = _host("intelrt_launch_env")
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    command = launch_command(script, nproc=2, env={}, host=host, backend="cpu")
    threads = {s.name: s for s in command.env}["OMP_NUM_THREADS"]
    assert (threads.value, threads.plugin) == (str(max(1, (os.cpu_count() or 1) // 2)), "example")
    kept = launch_command(script, nproc=2, env={"OMP_NUM_THREADS": "1"}, host=host, backend="cpu")
    assert {s.name: s for s in kept.env}["OMP_NUM_THREADS"].value == "1"  # yours wins (SPEC C2)


def test_hook_diagnose_reference_example() -> None:
    from intelrt.planning.diagnosis import diagnose

    host = _host("intelrt_diagnose")
    report = diagnose(env={"ZE_AFFINITY_MASK": "0", "ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, host=host)
    finding = next(f for f in report["findings"] if f["title"] == "two device filters are set")
    assert finding["severity"] == "warning" and "devices=" in finding["fix"]
    assert not any(f["title"] == "two device filters are set" for f in diagnose(env={}, host=host)["findings"])
