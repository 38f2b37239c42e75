"""docs/quantization.md's generated table, from intelrt's rows and every installed backend's columns.

    python -m intelrt.cli.quantization_page docs/quantization.md

The table's rows and its CPU and CUDA columns are intelrt's (``quantization/methods.py``); every
other column is the ``quantization_columns`` of a backend the plugin host finds (the Intel
plugins', a third party's), in the order of the backends' names.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..hooks.quantization import QuantizationColumns
from ..host.manager import PluginHost, get_host
from ..quantization.methods import render_page


def contributed_columns(host: PluginHost | None = None) -> list[QuantizationColumns]:
    """The quantization columns of every backend the host knows, by backend name."""
    classes = sorted((cls for _, cls in (host or get_host()).backend_classes()), key=lambda cls: cls.name)
    return [cls.quantization_columns for cls in classes if cls.quantization_columns is not None]


def main(argv: list[str] | None = None) -> int:
    page = Path((argv if argv is not None else sys.argv[1:])[0])
    page.write_text(render_page(page.read_text(encoding="utf-8"), contributed_columns()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
