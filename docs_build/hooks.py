"""mkdocs hooks (``hooks:`` in mkdocs.yml) that make parts of the site from the code at build time:

- the charts under ``charts/`` (SVG), drawn from ``docs/data/*.json`` by :mod:`charts`;
- sample output: a page's ``<!-- sample output: intelrt ARGS -->`` is replaced by what
  ``intelrt ARGS`` prints when the site is built (offline, the embedded tiny model), in a
  collapsible block. A command that fails fails the build (``mkdocs build --strict``, ``make docs``).

mkdocs's own hook events (https://www.mkdocs.org/dev-guide/plugins/#events): ``on_files`` adds the
generated files (``File.generated``, mkdocs >= 1.6), ``on_page_markdown`` rewrites a page's source.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import charts  # noqa: E402 - this folder is not a package; mkdocs loads the hook by path

SAMPLE = re.compile(r"^<!-- sample output(?P<open>, open)?: (?P<command>intelrt [^>]*?) -->$", re.M)
"""``<!-- sample output: intelrt ARGS -->`` (collapsed) or ``<!-- sample output, open: … -->``."""
WIDTH = "100"
"""Columns the samples are printed for (tables wrap to fit, as on a terminal this wide)."""
_samples: dict[str, str] = {}


def on_files(files: Files, config: Any) -> Files:
    for name, svg in charts.render_all().items():
        files.append(File.generated(config, f"charts/{name}", content=svg))
    return files


def on_pre_build(config: Any) -> None:
    """Run every page's sample commands once (one after the other: side by side on a small
    machine, each would report the others' time)."""
    docs = Path(config["docs_dir"])
    commands = sorted({m["command"] for page in docs.rglob("*.md") for m in SAMPLE.finditer(page.read_text("utf-8"))})
    _samples.clear()
    _samples.update(run_samples(commands))


def run_samples(commands: list[str]) -> dict[str, str]:
    """``command`` → what a reader sees: intelrt's progress lines (stderr), then the result (stdout).
    Other libraries' stderr lines are left out; the home directory shows as ``~``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": WIDTH, "NO_COLOR": "1"}
    home = str(Path.home())
    out: dict[str, str] = {}
    for command in commands:
        process = subprocess.run([sys.executable, "-m", "intelrt.cli", *shlex.split(command)[1:]],  # noqa: S603
                                 capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600)
        stdout, stderr = process.stdout, process.stderr
        if process.returncode != 0:
            raise RuntimeError(f"docs sample `{command}` exited with status {process.returncode}:\n{stderr}")
        progress = [line for line in stderr.splitlines() if line.startswith("intelrt")]
        out[command] = "\n".join([f"$ {command}", *progress, stdout.rstrip()]).replace(home, "~")
    return out


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    def sample(match: re.Match[str]) -> str:
        command = match["command"]
        body = textwrap.indent(f"```text\n{_samples[command]}\n```", "    ")
        fold = "???+" if match["open"] else "???"
        return f'{fold} example "Output of `{command}` (generated when this site was built)"\n\n{body}\n'

    return SAMPLE.sub(sample, markdown)
