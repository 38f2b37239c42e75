"""FP8 on Gaudi: Intel Neural Compressor's measure → quantize flow, as Optimum Habana runs it.

Optimum Habana's ``examples/text-generation/utils.py`` ``setup_quantization`` reads an INC JSON
configuration (``QUANT_CONFIG``) with ``neural_compressor.torch.quantization.FP8Config.from_json_file``;
a ``MEASURE`` configuration goes through ``prepare(model, config)``, the model runs calibration
prompts, and ``finalize_calibration(model)`` writes the activation statistics to
``dump_stats_path``; a second run with a ``QUANTIZE`` configuration goes through
``convert(model, config)``, which reads those statistics and swaps the linears for FP8 ones
(``quantization_config/maxabs_measure.json`` and ``maxabs_quant.json``: observer ``maxabs``,
``scale_method`` ``maxabs_hw``, ``lm_head`` left out). vLLM-Gaudi runs the same flow for
``--quantization inc`` (``QUANT_CONFIG``). The configurations are written here as data; applying
them needs Gaudi and ``neural-compressor-pt`` (``intelrt[inc]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import PlanError

EXTRA = "intelrt[inc]"
STAGES = ("measure", "quantize")
DEFAULT_STATS = "./hqt_output/measure"
"""Optimum Habana's ``dump_stats_path``."""


def measure_config(stats_path: str = DEFAULT_STATS) -> dict[str, Any]:
    """INC's MEASURE configuration (Optimum Habana ``maxabs_measure.json``)."""
    return {"method": "HOOKS", "mode": "MEASURE", "observer": "maxabs",
            "allowlist": {"types": [], "names": []}, "blocklist": {"types": [], "names": ["lm_head"]},
            "dump_stats_path": stats_path}


def quantize_config(stats_path: str = DEFAULT_STATS) -> dict[str, Any]:
    """INC's QUANTIZE configuration (Optimum Habana ``maxabs_quant.json``: hardware-aligned scales)."""
    return {"method": "HOOKS", "mode": "QUANTIZE", "observer": "maxabs", "scale_method": "maxabs_hw",
            "allowlist": {"types": [], "names": []}, "blocklist": {"types": [], "names": ["lm_head"]},
            "dump_stats_path": stats_path}


def fp8_flow(stats_path: str = DEFAULT_STATS) -> dict[str, Any]:
    """The plan's details for ``quantization='fp8'`` on Gaudi: both configurations and the stage a
    run is in (``measure`` until ``stats_path`` holds INC's statistics, then ``quantize``)."""
    return {"flow": "measure-then-quantize", "stats_path": stats_path, "measure": measure_config(stats_path),
            "quantize": quantize_config(stats_path)}


def stage(details: Mapping[str, Any]) -> str:
    """``measure`` or ``quantize``: whether INC's statistics for this flow exist already (INC
    writes ``<dump_stats_path>_hooks_maxabs.json`` and friends beside the path's folder)."""
    stats = Path(str(details.get("stats_path", DEFAULT_STATS)))
    folder = stats.parent if stats.parent != Path("") else Path(".")
    return "quantize" if folder.is_dir() and any(folder.glob(f"{stats.name}*maxabs*")) else "measure"


def write_config(details: Mapping[str, Any], which: str, directory: str | os.PathLike[str]) -> Path:
    """Write the ``measure`` or ``quantize`` configuration as the JSON file ``QUANT_CONFIG`` names."""
    if which not in STAGES:
        raise PlanError(f"INC's FP8 flow has the stages {', '.join(STAGES)}, not {which!r}")
    path = Path(directory) / f"inc_fp8_{which}.json"
    path.write_text(json.dumps(details[which], indent=2) + "\n", encoding="utf-8")
    return path


def _inc() -> Any:
    try:
        from neural_compressor.torch import quantization
    except ImportError:
        raise PlanError(f"quantization='fp8' on Gaudi uses Intel Neural Compressor, which is not installed: pip install "
                        f"'{EXTRA}' (neural-compressor-pt; Intel's Gaudi containers ship it)") from None
    return quantization


def apply_fp8(model: Any, details: Mapping[str, Any], calibrate: Callable[[Any], None] | None = None) -> tuple[Any, str]:
    """Run the stage of INC's flow this run is in on a loaded Gaudi ``model``: ``measure`` prepares
    it, runs ``calibrate(model)`` and writes the statistics (the caller loads the model again to
    quantize); ``quantize`` converts it to FP8. Returns (model, stage)."""
    inc = _inc()
    now = stage(details)
    if now == "measure":
        if calibrate is None:
            raise PlanError("INC's FP8 flow first measures activation ranges on calibration prompts: pass calibrate= "
                            "(a function that runs the prepared model on them)")
        config = inc.FP8Config.from_dict(dict(details["measure"])) if hasattr(inc.FP8Config, "from_dict") else \
            inc.FP8Config(**dict(details["measure"]))
        model = inc.prepare(model, config)
        calibrate(model)
        inc.finalize_calibration(model)
        return model, now
    config = inc.FP8Config.from_dict(dict(details["quantize"])) if hasattr(inc.FP8Config, "from_dict") else \
        inc.FP8Config(**dict(details["quantize"]))
    return inc.convert(model, config), now
