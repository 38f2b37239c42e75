"""The package layout keeps its promises (issues 14, 25): plugins import only the plugin API, the
import graphs of intelrt and of its Intel plugins have no cycle, intelrt's follows the layers —
``TYPE_CHECKING`` imports included — and the plan holds the registry's decisions in its order.

The import graph is built by grimp (the library behind import-linter) from every import statement,
those inside functions included.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import intelrt
from intelrt.hooks import signature
from intelrt.hooks.backend import Backend
from intelrt.hooks.concerns import CONCERNS, Decided
from intelrt.hooks.request import ENGINE_OPTIONS, NO_MODEL, REQUEST_OPTIONS, Request
from intelrt.host.manager import PluginHost

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_TREES = [*sorted((ROOT / "plugins").glob("*/intelrt_*")), *sorted((ROOT / "docs" / "examples").glob("*/src")),
                *sorted((ROOT / "docs" / "examples").glob("*/tests"))]
#: What a plugin may import from intelrt (issue 14, docs/plugin-api.md).
PLUGIN_MODULES = ("intelrt", "intelrt.plugin", "intelrt.testing")
#: The layers, top to bottom: a module imports only from its own layer's package or the ones below.
LAYERS = ["intelrt.cli", "intelrt.testing", "intelrt.serving", "intelrt.runtime", "intelrt.decoding", "intelrt.training",
          "intelrt.plugin", "intelrt.planning", "intelrt.host", "intelrt.backends", "intelrt.quantization",
          "intelrt.hooks",
          "intelrt.support", {"intelrt.tiny", "intelrt.errors", "intelrt._version"}]
PACKAGES = ["intelrt", "intelrt_xpu", "intelrt_hpu"]


# -- plugins import the plugin API only ---------------------------------------------------------

def intelrt_imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every ``intelrt`` import in ``source``, nested ones included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name == "intelrt" or name.startswith("intelrt."):
                yield node.lineno, name


def private_imports(source: str) -> list[str]:
    allowed = [f"{m}." for m in PLUGIN_MODULES if m != "intelrt"]
    return [f"line {line}: {name}" for line, name in intelrt_imports(source)
            if name not in PLUGIN_MODULES and not name.startswith(tuple(allowed))]


def test_the_private_import_check_catches_every_form() -> None:
    source = ("import intelrt\nfrom intelrt import hookimpl\nfrom intelrt.plugin import Decision\n"
              "import intelrt.testing.simulation\nif True:\n    from intelrt.planning import request\n"
              "def f():\n    import intelrt.backends.decode_rules as p\n")
    assert private_imports(source) == ["line 6: intelrt.planning", "line 8: intelrt.backends.decode_rules"]


@pytest.mark.parametrize("tree", PLUGIN_TREES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_import_only_intelrt_the_plugin_api_and_testing(tree: Path) -> None:
    found = [f"{path.relative_to(ROOT)} {problem}" for path in sorted(tree.rglob("*.py"))
             for problem in private_imports(path.read_text(encoding="utf-8"))]
    assert not found, ("plugins may import intelrt, intelrt.plugin and intelrt.testing only "
                       "(docs/plugin-api.md); add what they need to intelrt.plugin:\n" + "\n".join(found))


def test_the_plugin_api_exports_what_its_all_lists() -> None:
    import intelrt.plugin as api

    assert api.__all__ and len(set(api.__all__)) == len(api.__all__)
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing
    page = (ROOT / "docs" / "plugin-api.md").read_text(encoding="utf-8")
    undocumented = [name for name in api.__all__ if f"`{name}`" not in page and f"`{name}(" not in page]
    assert not undocumented, f"docs/plugin-api.md does not describe {undocumented}"


# -- the import graph ---------------------------------------------------------------------------

def _graph(package: str, *, type_checking: bool):  # type: ignore[no-untyped-def]
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph(package, exclude_type_checking_imports=not type_checking)


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    """intelrt's import graph as it runs (``TYPE_CHECKING`` imports never run)."""
    return _graph("intelrt", type_checking=False)


def strongly_connected(graph) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """Tarjan's strongly connected components of more than one module (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_the_import_graph_holds_the_function_level_imports(graph) -> None:  # type: ignore[no-untyped-def]
    # Loaded.train imports fine-tuning inside the method: the graph must see it, or a cycle through
    # such an import would go unnoticed.
    assert graph.direct_import_exists(importer="intelrt.runtime.loaded", imported="intelrt.training.fine_tuning")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_import_graph_has_no_cycle(package: str) -> None:
    graph = _graph(package, type_checking=False)
    cycles = strongly_connected(graph)
    details = []
    for cycle in cycles:
        members = set(cycle)
        edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph.find_modules_directly_imported_by(a))
                 if b in members]
        details.append(", ".join(edges))
    assert not cycles, "import cycles:\n" + "\n".join(details)


TYPE_ONLY_CYCLES: list[list[str]] = []
"""Import cycles through ``TYPE_CHECKING`` imports alone: none. The last one (a Backend's methods take
the Plan, and the Plan holds its Backend) went with ``hooks.backend.PlanArgument``."""


def test_no_import_cycle_even_through_type_only_imports() -> None:
    graph = _graph("intelrt", type_checking=True)
    assert strongly_connected(graph) == TYPE_ONLY_CYCLES


def test_the_cycle_finder_finds_a_cycle() -> None:
    grimp = pytest.importorskip("grimp")
    made = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        made.add_import(importer=importer, imported=imported)
    assert strongly_connected(made) == [["p.a", "p.b", "p.c"]]


def test_each_layer_imports_only_the_layers_below_it() -> None:
    # TYPE_CHECKING imports included: the contract's types live in hooks/, below every user of them
    illegal = _graph("intelrt", type_checking=True).find_illegal_dependencies_for_layers(layers=LAYERS)
    shown = []
    for dependency in sorted(illegal, key=lambda d: (d.importer, d.imported)):
        for route in dependency.routes:
            shown.append(f"{dependency.importer} -> {dependency.imported}: "
                         + " -> ".join([*route.heads, *route.middle, *route.tails]))
    assert not illegal, "imports against the layers (docs/architecture.md):\n" + "\n".join(shown)


def test_every_subpackage_says_what_it_holds() -> None:
    for init in sorted((ROOT / "core" / "intelrt").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and doc.strip(), f"{init.parent.name}/ has no docstring saying what it holds"


# -- one declaration per concern and per request option ----------------------------------------

def test_plans_serialise_and_print_their_decisions_in_registry_order(tiny_model: Path) -> None:
    plan = intelrt.plan(tiny_model)
    names = [c.name for c in CONCERNS]
    assert list(plan.to_dict()["decisions"]) == [n for n in names if n in plan.decisions]
    # a decision's row starts in the first column; wrapped reasons and notes are indented further
    printed = [line.split()[0] for line in str(plan).splitlines()[3:] if line.startswith("  ") and
               not line.startswith("   ") and line.split() and line.split()[0] in names]
    assert printed == [n for n in names if n in plan.decisions]
    for declared in CONCERNS:
        if declared.payload is not None and declared.name in plan.decisions:
            value = getattr(plan.decided, declared.name)
            assert value is None or isinstance(value, declared.payload), declared.name
            if value is not None:
                assert declared.payload.from_dict(plan.to_dict()["decisions"][declared.name]["value"]) == value


def test_a_plan_without_a_model_decides_exactly_the_concerns_that_need_none() -> None:
    from intelrt.planning.planner import make_plan

    plan = make_plan(Request.build(NO_MODEL))
    assert set(plan.decisions) <= {c.name for c in CONCERNS if not c.needs_model}
    assert {c.name for c in CONCERNS if not c.needs_model and c.required} <= set(plan.decisions)
    assert plan.decided.placement is None and plan.decided.dtype == "float32"


def test_every_concern_option_is_a_request_option_and_every_check_a_backend_method() -> None:
    names = {o.name for o in REQUEST_OPTIONS}
    for declared in CONCERNS:
        assert set(declared.options) <= names, declared
        assert declared.hook is None or hasattr(Backend, f"select_{declared.name}"), declared
        if declared.answer is not None or declared.verbatim:
            assert hasattr(Backend, f"check_{declared.name}"), f"a forced {declared.name} has no check_ method"


def test_every_selection_hook_is_written_out_in_the_hookspecs() -> None:
    """A reader (and mypy, an IDE, grep) finds each selection hook where it is declared: one ``def``
    per concern in hooks/hookspecs.py, taking what the host passes, nothing injected at import."""
    from intelrt.hooks import hookspecs

    source = inspect.getsource(hookspecs)
    tree = ast.parse(source)
    written = {node.name: [a.arg for a in node.args.args] for node in tree.body if isinstance(node, ast.FunctionDef)}
    for declared in CONCERNS:
        if declared.hook is not None:
            assert written.get(declared.hook) == ["backend", "request", "model", "env", "decided"], declared.hook
    assert "globals()" not in source and "setattr(" not in source


def test_the_host_calls_each_concern_by_its_written_out_method() -> None:
    """host/manager.py binds each concern to its backend method, generic rule and checks in one table
    (no ``getattr(backend, f"select_{name}")``): the table covers exactly the hooked concerns, and
    a concern forced as a value has both checks."""
    from intelrt.host import manager

    assert set(manager.CALLS) == {c.name for c in CONCERNS if c.hook is not None}
    for declared in CONCERNS:
        if declared.hook is not None and (declared.answer is not None or declared.verbatim):
            calls = manager.CALLS[declared.name]
            assert calls.check is not None and calls.generic_check is not None, declared.name
    source = inspect.getsource(manager)
    assert 'getattr(backend, f"' not in source and 'getattr(GENERIC, f"' not in source


@pytest.mark.parametrize("path", signature.FILES, ids=lambda path: path.name)
def test_plan_and_load_spell_out_the_request_options_as_generated(path: Path) -> None:
    """plan()'s and load()'s request option parameters, and the calls that pass them on, are
    rendered from ``Request``'s fields (issue 41: each fact once) between marker comments."""
    source = path.read_text(encoding="utf-8")
    assert not signature.missing_regions(source), f"{path.name} lacks a region: {signature.missing_regions(source)}"
    assert signature.render(source) == source, (
        f"{path.relative_to(ROOT)}'s request options differ from Request's fields: run {signature.COMMAND}")


def test_a_changed_declaration_or_a_hand_edited_region_shows() -> None:
    """The check above can fail: a default changed in the declaration renders differently, and a
    region edited by hand is rendered back to the declaration."""
    source = signature.FILES[0].read_text(encoding="utf-8")
    declared = signature.request_parameters()
    changed = [replace(p, default=True) if p.name == "strict" else p for p in declared]
    assert "strict: bool = False," in source and "strict: bool = True," in signature.render(source, changed)
    edited = source.replace("strict: bool = False,", "strict: bool = True,", 1)  # plan()'s, in its region
    assert edited != source and signature.render(edited) == source
    unclosed = source.replace(signature.end("keywords"), "")
    with pytest.raises(ValueError, match="is not closed"):
        signature.render(unclosed)
    assert signature.missing_regions(unclosed) == ["keywords"]


@pytest.mark.parametrize("function", [intelrt.plan, intelrt.load], ids=["plan", "load"])
def test_only_load_takes_keywords_beside_the_generated_ones(function) -> None:  # type: ignore[no-untyped-def]
    """The generated parameters are all of plan()'s keywords; load() adds the engine's (never planned)."""
    parameters = inspect.signature(function).parameters
    keywords = {n: p.default for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    engine = {name: None for name in ENGINE_OPTIONS} if function is intelrt.load else {}
    assert keywords == {**{p.name: p.default for p in signature.request_parameters()}, **engine}
    assert list(keywords) == [o.name for o in REQUEST_OPTIONS] + list(engine)


@pytest.mark.parametrize("command", ["plan", "run", "train"])
def test_the_cli_offers_every_option(command: str) -> None:
    from intelrt.cli.app import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    flags = {flag for action in sub._actions for flag in action.option_strings}
    missing = [o.cli_flag for o in REQUEST_OPTIONS if o.cli_flag not in flags]
    assert not missing
    helpless = [a.option_strings[0] for a in sub._actions if a.option_strings and a.dest in
                {o.name for o in REQUEST_OPTIONS} and not a.help]
    assert not helpless


# -- the backends --------------------------------------------------------------------------------

DEVICE_KINDS = frozenset({"cpu", "cuda", "xpu", "hpu", "mps"})
"""The torch device types (and backend names) a question about the device compares with."""
VENDOR_MODULES = frozenset({"cuda", "xpu", "hpu", "mps"})


def _dotted(node: ast.AST) -> list[str]:
    """The names along an attribute chain, innermost last (``x.device.type``: type, device, x)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names


def _is_device_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in DEVICE_KINDS
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_device_kind(e) for e in node.elts)


def _is_identity(node: ast.AST) -> bool:
    """A device's type or a backend's name: ``device.type``, ``x.device.type``, ``backend.device_type``,
    ``backend.name``, ``getattr(device, "type")``, ``str(device)``."""
    if isinstance(node, ast.Attribute) and node.attr in ("type", "device_type"):
        return node.attr == "device_type" or any("device" in n for n in _dotted(node.value))
    if isinstance(node, ast.Attribute) and node.attr == "name":
        return any("backend" in n.lower() for n in _dotted(node.value))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        if node.func.id == "getattr" and len(node.args) > 1:
            key = node.args[1]
            return isinstance(key, ast.Constant) and key.value in ("type", "device_type", "name")
        if node.func.id == "str":
            return _is_identity(node.args[0]) or any("device" in n for n in _dotted(node.args[0]))
    return False


def device_questions(source: str, *, vendor_modules: bool) -> list[int]:
    """The lines where ``source`` asks which device or backend it runs on: a comparison with a device
    kind (``== "cuda"``, ``in ("cpu",)``) or of a device's type or a backend's name (``device.type``,
    ``getattr(device, "type")``, ``str(device)``, ``backend.name``, ``backend.device_type``), a
    ``startswith`` of a device kind, and (``vendor_modules``) a reach into one vendor's torch module
    (``torch.cuda``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_device_kind(p) or _is_identity(p)
                                                 for p in (node.left, *node.comparators)):
            found.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and node.func.attr in ("startswith", "endswith") and _is_device_kind(node.args[0]):
            found.add(node.lineno)
        elif vendor_modules and isinstance(node, ast.Attribute) and node.attr in VENDOR_MODULES \
                and isinstance(node.value, ast.Name) and node.value.id == "torch":
            found.add(node.lineno)
    return sorted(found)


def test_the_device_question_check_catches_every_spelling() -> None:
    spellings = ['device.type == "cuda"', 'x.device.type != "cpu"', 'getattr(device, "type", None) != "cuda"',
                 'device.type in ("cuda", "xpu")', 'str(device).startswith("cuda")', '"cpu" == kind',
                 'backend.name != "xpu"', 'self.backend.device_type == other', 'str(model.device) == want',
                 'torch.cuda.synchronize()', 'getattr(plan.backend, "name") == "hpu"']
    for spelling in spellings:
        assert device_questions(spelling, vendor_modules=True) == [1], spelling
    fine = ['fmt.type == "text"', 'part.type != "image_url"', 'backend.computes_on_host', 'kind == wanted',
            'torch.get_device_module(device)']
    assert all(device_questions(text, vendor_modules=True) == [] for text in fine)


def _questions_under(roots: list[Path], *, vendor_modules: bool) -> list[str]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            found += [f"{path.relative_to(ROOT)}:{n}: {lines[n - 1].strip()}"
                      for n in device_questions("\n".join(lines), vendor_modules=vendor_modules)]
    return found


def test_no_plugin_or_backend_asks_which_backend_it_is() -> None:
    """A backend's code runs only for its own backend: no comparison of a backend's name or device
    type, however spelled, in intelrt's backends or the Intel plugins (third-party selection hooks
    may still check); its own vendor's torch module it may use."""
    roots = [ROOT / "core" / "intelrt" / "backends", *sorted((ROOT / "plugins").glob("*/intelrt_*"))]
    found = _questions_under(roots, vendor_modules=False)
    found += [f"{path.relative_to(ROOT)}:{n}" for root in roots for path in sorted(root.rglob("*.py"))
              for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if "def mine(" in line or "def owns(" in line or "def _mine(" in line]
    assert not found, "backend guards:\n" + "\n".join(found)


def test_the_engine_and_the_server_never_ask_which_device_they_run_on() -> None:
    """``decoding/`` and ``serving/`` ask the plan's backend (``Backend.memory_info``, ``synchronize``,
    ``computes_on_host`` …), never the device's type or one vendor's torch module (docs/architecture.md)."""
    roots = [ROOT / "core" / "intelrt" / "decoding", ROOT / "core" / "intelrt" / "serving"]
    found = _questions_under(roots, vendor_modules=True)
    assert not found, "the run stage asks which device it is on:\n" + "\n".join(found)


def test_every_installed_backend_is_a_backend_object_with_its_facts() -> None:
    host = PluginHost()
    classes = dict((cls.name, (plugin, cls)) for plugin, cls in host.backend_classes())
    assert {"cpu", "cuda", "xpu", "hpu"} <= set(classes)
    for name, (_plugin, cls) in classes.items():
        assert issubclass(cls, Backend) and cls.name == name and isinstance(cls.device_type, str)
    assert (classes["hpu"][1].compiler, classes["hpu"][1].indexed_devices) == ("hpu_backend", False)
    assert classes["cpu"][1].ranks_are_devices is False and classes["cuda"][1].max_padded_batch == 256
    assert Decided().dtype is None


def test_the_contract_tier_starts_no_process() -> None:
    """tests/contract promises no subprocesses (conftest.py, the Makefile's ``check``): a test that starts
    one belongs in tests/integration (issue 41 moved six files' such tests there)."""
    spawning = ("subprocess", "multiprocessing", "Popen", "os.system", "os.spawn", "os.fork", "pexpect")
    found = []
    for path in sorted((ROOT / "tests" / "contract").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [ast.unparse(node)] if isinstance(node, ast.Attribute) else [])
            if any(name == spawn or name.startswith(spawn + ".") or name.endswith("." + spawn)
                   for name in names for spawn in spawning):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "the contract tier starts processes:\n" + "\n".join(sorted(set(found)))


def test_every_module_has_its_place_in_the_architecture_page() -> None:
    """docs/architecture.md names every module of core/intelrt (testing/ aside: its own page), so that
    the page stays the map a newcomer reads (issue 41)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "core" / "intelrt"
    missing = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
               if path.name != "__init__.py" and "testing" not in path.relative_to(package).parts
               and path.name not in page]
    assert not missing, f"docs/architecture.md names none of {missing}"

