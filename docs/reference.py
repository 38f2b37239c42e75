"""The reference pages the docs build generates from the code (an mkdocs hook, ``mkdocs.yml: hooks``).

* ``hooks/<hook>.md`` for every hook, from its hookspec: signature, firstresult, docstring, and
  the example in ``docs/hooks/examples/<hook>.py`` (which ``tests/contract/test_docs.py`` runs);
* ``hooks/backend.md``: the ``Backend`` class — its facts and methods, from their docstrings;
* the marker ``<!-- hook-table -->`` (a table of every hook) and ``<!-- request-options -->`` (a
  table of every request option, from ``Request``'s fields) in the pages that hold them.

Each fact stays where the code declares it; this page only renders it (as pytest's reference
is rendered from its hookspecs).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
EXAMPLES = DOCS / "hooks" / "examples"
BACKEND_EXAMPLE = "backend"
"""The example of ``intelrt_backends`` and of the ``Backend`` page."""


def _hookspecs() -> Any:
    from intelrt.hooks import hookspecs

    return hookspecs


def hook_names() -> list[str]:
    specs = _hookspecs()
    return sorted(name for name in dir(specs) if name.startswith(f"{specs.PROJECT}_")
                  and callable(getattr(specs, name)))


def _short(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return re.sub(r"\b(?:collections\.abc|typing|intelrt\.[\w.]+)\.", "", text)


def signature(hook: str) -> str:
    """``def hook(arg: Type, ...) -> Result`` as the hookspec declares it."""
    sig = inspect.signature(getattr(_hookspecs(), hook))
    params = ",\n".join(f"    {p.name}: {_short(p.annotation)}" for p in sig.parameters.values())
    body = f"\n{params},\n" if params else ""
    return f"def {hook}({body}) -> {_short(sig.return_annotation)}"


def firstresult(hook: str) -> bool:
    import pluggy

    specs = _hookspecs()
    pm = pluggy.PluginManager(specs.PROJECT)
    pm.add_hookspecs(specs)
    return bool(getattr(pm.hook, hook).spec.opts.get("firstresult"))


def render_docstring(doc: str) -> str:
    """reST-ish docstring → Markdown: ``:param x:`` → a list of arguments, ``:returns:`` → a line."""
    text = inspect.cleandoc(doc)
    params: list[tuple[str, str]] = []
    returns = ""
    body: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        match = re.match(r":param (\w+):\s*(.*)", line)
        if match:
            params.append((match.group(1), match.group(2)))
            current = None
            continue
        if line.startswith(":returns:"):
            returns = line.removeprefix(":returns:").strip()
            current = None
            continue
        if params and line.startswith(" ") and current is None and not returns:
            name, value = params[-1]
            params[-1] = (name, f"{value} {line.strip()}")
            continue
        if returns and line.startswith(" "):
            returns += " " + line.strip()
            continue
        body.append(line)
    out = "\n".join(body).strip()
    out = re.sub(r":(?:class|func|data|meth):`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", out)
    if params:
        out += "\n\n## Arguments\n\n" + "\n".join(f"- `{name}` — {value}" for name, value in params)
    if returns:
        out += f"\n\n**Returns:** {returns}"
    return out


def example_file(name: str) -> Path:
    return EXAMPLES / f"{name}.py"


def example_of(hook: str) -> str:
    return BACKEND_EXAMPLE if hook == "intelrt_backends" else hook


def hook_page(hook: str) -> str:
    spec = getattr(_hookspecs(), hook)
    first = firstresult(hook)
    order = ("yes — plugins are asked in order (`tryfirst` ones first) and the first non-`None` answer wins; "
             "only then the chosen backend and intelrt's generic rule are asked" if first else
             "no — every plugin's answers are collected")
    name = example_of(hook)
    code = example_file(name).read_text(encoding="utf-8").split('"""', 2)[-1].strip()
    test = f"test_hook_{hook.removeprefix('intelrt_')}_reference_example" if name == hook else \
        "test_backend_reference_example"
    return (f"# `{hook}`\n\n```python\n{signature(hook)}\n```\n\n**firstresult:** {order}.\n\n"
            f"{render_docstring(spec.__doc__ or '')}\n\n## Example\n\n```python\n{code}\n```\n\n"
            f"This example is `docs/hooks/examples/{name}.py`, run by `tests/contract/test_docs.py::{test}`.\n")


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each class attribute (``name: T = ...`` then a string), from the source."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def backend_page() -> str:
    import intelrt.hooks.backend as module
    from intelrt.hooks.backend import Backend

    facts = _attribute_docs(Backend)
    rows = []
    for name, doc in facts.items():
        default = getattr(Backend, name, None)
        shown = f"`{default!r}`" if name in vars(Backend) else "—"
        rows.append(f"| `{name}` | {shown} | {' '.join(doc.split())} |")
    methods = []
    for name, member in vars(Backend).items():
        function = getattr(member, "__func__", member)
        if name.startswith("_") or not callable(function) or isinstance(member, property):
            continue
        params = ", ".join(p for p in inspect.signature(function).parameters if p not in ("self", "cls"))
        result = _short(inspect.signature(function).return_annotation)
        doc = " ".join(render_docstring(function.__doc__).split()) if function.__doc__ else (
            "the automatic value of this concern (generic rule when `None`)" if name.startswith("select_") else
            "refuse (`PlanError`) or endorse the value the user forced" if name.startswith("check_") else "")
        methods.append(f"| `{name}({params})` | `{result}` | {doc} |")
    properties = [f"| `{n}` | {' '.join(inspect.cleandoc(p.fget.__doc__ or '').split())} |"
                  for n, p in vars(Backend).items() if isinstance(p, property) and p.fget is not None]
    code = example_file(BACKEND_EXAMPLE).read_text(encoding="utf-8").split('"""', 2)[-1].strip()
    return ("# `Backend`\n\n" + render_docstring(inspect.getdoc(Backend) or "") + "\n\n"
            + inspect.cleandoc(module.__doc__ or "") + "\n\n"
            "## Facts (class attributes)\n\n| attribute | default | what it says |\n| --- | --- | --- |\n"
            + "\n".join(rows) + "\n\n## What the host reads of the detection\n\n| property | what it is |\n"
            "| --- | --- |\n" + "\n".join(properties)
            + "\n\n## Methods (each optional: `None` leaves the concern to the generic rule)\n\n"
            "| method | returns | what it answers |\n| --- | --- | --- |\n" + "\n".join(methods)
            + f"\n\n## Example\n\n```python\n{code}\n```\n\nThis example is "
            "`docs/hooks/examples/backend.py`, run by `tests/contract/test_docs.py::test_backend_reference_example`.\n")


def hook_table() -> str:
    specs = _hookspecs()
    rows = ["| hook | firstresult | returns | what it is for |", "| --- | --- | --- | --- |"]
    for hook in hook_names():
        doc = inspect.cleandoc(getattr(specs, hook).__doc__ or "").split("\n\n", 1)[0]
        rows.append(f"| [`{hook}`]({hook}.md) | {'yes' if firstresult(hook) else 'no'} | "
                    f"`{_short(inspect.signature(getattr(specs, hook)).return_annotation)}` | "
                    f"{' '.join(render_docstring(doc).split())} |")
    return "\n".join(rows)


def request_options_table() -> str:
    from intelrt.hooks.request import REQUEST_OPTIONS

    rows = ["| argument | default | values |", "| --- | --- | --- |"]
    for option in REQUEST_OPTIONS:
        rows.append(f"| `{option.name}` | `{option.default!r}` | {option.help} |")
    return "\n".join(rows)


MARKERS = {"<!-- hook-table -->": hook_table, "<!-- request-options -->": request_options_table}


def generated_pages() -> dict[str, str]:
    """``{path under docs/: Markdown}`` for every generated page."""
    pages = {f"hooks/{hook}.md": hook_page(hook) for hook in hook_names()}
    pages["hooks/backend.md"] = backend_page()
    return pages


def expand_markers(markdown: str) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


# -- the mkdocs hook ----------------------------------------------------------------------------

NAV_SECTION = "Hook reference"
"""The nav entry whose children are the generated pages (after its hand-written overview)."""


def _fill_nav(items: list[Any]) -> bool:
    for item in items:
        if isinstance(item, dict):
            for title, children in item.items():
                if title == NAV_SECTION and isinstance(children, list):
                    children[1:] = [{"Backend": "hooks/backend.md"}] + [{hook: f"hooks/{hook}.md"}
                                                                        for hook in hook_names()]
                    return True
                if isinstance(children, list) and _fill_nav(children):
                    return True
    return False


def on_config(config: Any) -> Any:
    if not _fill_nav(config["nav"] or []):
        raise ValueError(f"mkdocs.yml: no nav section {NAV_SECTION!r} for the generated hook reference")
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, content in generated_pages().items():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand_markers(markdown)
