"""The package layout keeps its promises (issue 14): plugins import only the plugin API, the import
graph has no cycle and follows the layers, each concern and each request option is declared once,
and the host has one typed method per hook.

The import graph is built by grimp (the library behind import-linter) from every import statement,
those inside functions included; imports under ``if TYPE_CHECKING:`` are left out, since they never
run.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import intelrt
from intelrt.hooks import hookspecs
from intelrt.host.manager import PluginHost
from intelrt.hooks.concerns import CONCERNS, concern_named
from intelrt.hooks.request import REQUEST_OPTIONS
from intelrt.hooks.request import NO_MODEL, Request
from intelrt.testing.conformance import checks

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_TREES = [*sorted((ROOT / "plugins").glob("*/intelrt_*")), *sorted((ROOT / "docs" / "examples").glob("*/src")),
                *sorted((ROOT / "docs" / "examples").glob("*/tests"))]
#: What a plugin may import from intelrt (issue 14, docs/plugin-api.md).
PLUGIN_MODULES = ("intelrt", "intelrt.plugin", "intelrt.testing")
#: The layers, top to bottom: a module imports only from its own layer's package or the ones below.
LAYERS = ["intelrt.cli", "intelrt.testing", "intelrt.serving", "intelrt.runtime", "intelrt.training", "intelrt.plugin",
          "intelrt.planning", "intelrt.host", "intelrt.backends", "intelrt.decoding", "intelrt.hooks",
          "intelrt.support", {"intelrt.tiny", "intelrt.errors", "intelrt._version"}]


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

@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("intelrt", exclude_type_checking_imports=True)


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


def test_the_import_graph_has_no_cycle(graph) -> None:  # type: ignore[no-untyped-def]
    cycles = strongly_connected(graph)
    details = []
    for cycle in cycles:
        members = set(cycle)
        edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph.find_modules_directly_imported_by(a))
                 if b in members]
        details.append(", ".join(edges))
    assert not cycles, "import cycles:\n" + "\n".join(details)


def test_the_cycle_finder_finds_a_cycle() -> None:
    grimp = pytest.importorskip("grimp")
    made = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        made.add_import(importer=importer, imported=imported)
    assert strongly_connected(made) == [["p.a", "p.b", "p.c"]]


def test_each_layer_imports_only_the_layers_below_it(graph) -> None:  # type: ignore[no-untyped-def]
    illegal = graph.find_illegal_dependencies_for_layers(layers=LAYERS)
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

def test_every_selection_hook_decides_exactly_one_concern() -> None:
    selection = sorted(h for h in hookspecs.RESULT_TYPES if h.startswith("intelrt_select_"))
    assert sorted(c.hook for c in CONCERNS if c.hook) == selection
    assert len({c.name for c in CONCERNS}) == len(CONCERNS)
    for declared in CONCERNS:
        if declared.option is not None:
            assert declared.option in {o.name for o in REQUEST_OPTIONS}, declared


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
            value = plan.value(declared.name)
            assert value is None or isinstance(value, declared.payload), declared.name
            if value is not None:
                assert declared.payload.from_dict(plan.to_dict()["decisions"][declared.name]["value"]) == value


def test_a_plan_without_a_model_decides_exactly_the_concerns_that_need_none() -> None:
    from intelrt.planning.planner import make_plan

    plan = make_plan(Request.build(NO_MODEL))
    assert set(plan.decisions) <= {c.name for c in CONCERNS if not c.needs_model}
    assert {c.name for c in CONCERNS if not c.needs_model and c.required} <= set(plan.decisions)


def test_the_conformance_suite_reads_the_registry() -> None:
    assert checks.SELECTION == {c.hook: c for c in CONCERNS if c.hook}
    assert {c.name for c in CONCERNS if c.verbatim} == {"dtype", "attention"}
    assert concern("decode").payload is not None


def test_request_fields_are_the_declared_options() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(Request)}
    fields.pop("model")
    fields.pop("from_pretrained_kwargs")
    fields.pop("credentials")  # the names of token= and the like: kept out of from_pretrained_kwargs (issue 16)
    assert list(fields) == [o.name for o in REQUEST_OPTIONS]
    assert fields == {o.name: o.default for o in REQUEST_OPTIONS}
    assert set(Request.build("m").to_dict()) == {"model", "from_pretrained_kwargs", "credentials", *fields}


def test_the_api_page_describes_every_option() -> None:
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("### Request options", 1)[1].split("\n## ", 1)[0]
    missing = [o.name for o in REQUEST_OPTIONS if f"| `{o.name}` |" not in section]
    assert not missing, f"docs/api.md's request options table lacks {missing}"


@pytest.mark.parametrize("function", [intelrt.plan, intelrt.load], ids=["plan", "load"])
def test_plan_and_load_take_exactly_the_declared_options(function) -> None:  # type: ignore[no-untyped-def]
    parameters = inspect.signature(function).parameters
    keywords = {n: p.default for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == {o.name: o.default for o in REQUEST_OPTIONS}
    assert list(keywords) == [o.name for o in REQUEST_OPTIONS]


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


# -- the typed host ------------------------------------------------------------------------------

def test_the_host_has_a_typed_method_for_every_hook() -> None:
    for hook in hookspecs.RESULT_TYPES:
        method = "select" if hook.startswith("intelrt_select_") else hook.removeprefix("intelrt_")
        assert callable(getattr(PluginHost, method, None)), f"PluginHost has no method for {hook}"
        assert "return" in inspect.get_annotations(getattr(PluginHost, method)), method
