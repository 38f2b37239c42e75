"""Install a throw-away plugin distribution for a test: a real module and a real entry point.

The host discovers it exactly as it discovers an installed package (``importlib.metadata``),
so tests of plugin loading exercise the real discovery path.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path


def install_plugin(root: Path, *, distribution: str, entry_point: str, module: str, source: str,
                   version: str = "1.0") -> Path:
    """Write ``module.py`` and a ``<distribution>.dist-info`` with an ``intelrt`` entry point under
    ``root``, and put ``root`` first on ``sys.path``. Returns ``root``. Undo with :func:`uninstall`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[intelrt]\n{entry_point} = {module}\n")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return root


def uninstall(root: Path, *modules: str) -> None:
    """Take ``root`` off ``sys.path`` and forget the given modules."""
    while str(root) in sys.path:
        sys.path.remove(str(root))
    for name in modules:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
