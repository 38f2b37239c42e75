"""H5: ask ``hl-smi`` which module id each Gaudi device index has — only when asked.

``hl-smi -Q index,module_id -f csv`` prints ``index, module_id`` then one row per device, in
hl-smi's order (Habana's "Multiple Dockers Each with a Single Workload" page shows the format).
Module ids are what ``HABANA_VISIBLE_MODULES`` and intelrt's ``devices=`` take. Running a vendor
tool is a side effect with a cost, so detection and planning never call this: ``intelrt doctor
--probe`` does.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping

from .facts import HL_SMI_MAP

TIMEOUT_S = 30.0


class HlSmiError(RuntimeError):
    """hl-smi is missing, failed, or printed something else than the table it documents."""


def module_map(env: Mapping[str, str]) -> list[tuple[int, int]]:
    """``[(index, module_id), ...]`` in hl-smi's order; :class:`HlSmiError` says what went wrong."""
    tool = shutil.which("hl-smi", path=env.get("PATH"))
    if tool is None:
        raise HlSmiError("hl-smi is not on PATH (it comes with the Gaudi driver package)")
    try:
        done = subprocess.run([tool, *HL_SMI_MAP.split()[1:]], env=dict(env), capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise HlSmiError(f"`{HL_SMI_MAP}` did not answer within {TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise HlSmiError(f"could not run {tool}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HlSmiError(f"`{HL_SMI_MAP}` exited with status {done.returncode}: {tail}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].split(",")] if lines else []
    if header != ["index", "module_id"]:
        raise HlSmiError(f"`{HL_SMI_MAP}` printed {lines[:1]!r} instead of the header 'index, module_id'")
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 2 or not all(c.isascii() and c.isdigit() for c in cells):
            raise HlSmiError(f"`{HL_SMI_MAP}` printed the row {line!r}, not two numbers")
        rows.append((int(cells[0]), int(cells[1])))
    return rows
