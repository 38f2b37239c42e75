"""FP8 on Gaudi: Intel Neural Compressor's measure → quantize flow, as Optimum Habana runs it.

Optimum Habana's ``examples/text-generation/utils.py`` ``setup_quantization`` reads an INC JSON
configuration (``QUANT_CONFIG``) with ``neural_compressor.torch.quantization.FP8Config.from_json_file``;
a ``MEASURE`` configuration goes through ``prepare(model, config)``, the model runs calibration
prompts, and ``finalize_calibration(model)`` writes the activation statistics to
``dump_stats_path``; a second run with a ``QUANTIZE`` configuration goes through
``convert(model, config)``, which reads those statistics and swaps the linears for FP8 ones
(INC's ``3.x_api/pytorch/inference/fp8`` examples: ``FP8Config.from_json_file``, then ``prepare``
when ``config.measure``, ``convert`` when ``config.quantize``)
(``quantization_config/maxabs_measure.json`` and ``maxabs_quant.json``: observer ``maxabs``,
``scale_method`` ``maxabs_hw``, ``lm_head`` left out). vLLM-Gaudi runs the same flow for
``--quantization inc`` (``QUANT_CONFIG``). The configurations are written here as data; applying
them needs Gaudi and ``neural-compressor-pt`` (``intelrt[inc]``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import PlanError

log = logging.getLogger(__name__)

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


CONFIG_VAR = "QUANT_CONFIG"
"""Optimum Habana's and vLLM-Gaudi's variable naming INC's JSON configuration for the run (its
``mode`` says whether the run measures or quantizes)."""
MODES = {"MEASURE": "measure", "QUANTIZE": "quantize"}


def _read_config(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"{CONFIG_VAR}={path}: cannot read it as INC's JSON configuration ({exc}); point it at a "
                        "maxabs_measure.json / maxabs_quant.json style file, or unset it") from None
    if not isinstance(data, dict) or str(data.get("mode", "")).upper() not in MODES:
        raise PlanError(f"{CONFIG_VAR}={path}: INC's configuration must be a JSON object whose \"mode\" is MEASURE or "
                        "QUANTIZE (Optimum Habana's quantization_config/maxabs_*.json)")
    return data


QDQ_SCALE_METHOD = "maxabs_pow2"
"""The CPU's scale method: INC aligns scales to Gaudi's hardware (``maxabs_hw``) on Gaudi only
(``fp_utils.get_fp8_hw_alligned_scales_by_device``); powers of two are the nearest it offers."""


def qdq(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` for INC's CPU path: quantize-dequantize (``use_qdq``; ``Fp8cfg.parse``: "only QDQ
    mode is supported on CPU device"), scales as powers of two rather than Gaudi-aligned."""
    config = {**config, "use_qdq": True}
    if config.get("scale_method") == "maxabs_hw":
        config["scale_method"] = QDQ_SCALE_METHOD
    return config


def fp8_flow(env: Mapping[str, str] | None = None, stats_path: str = DEFAULT_STATS, *,
             qdq_mode: bool = False) -> dict[str, Any]:
    """The plan's details for ``quantization='fp8'`` (Gaudi; the CPU with ``qdq_mode``, INC's
    quantize-dequantize path): both configurations, the stage this run is in and the configuration
    file it applies (``config``; ``None``: written at load time).

    As Optimum Habana runs it: ``QUANT_CONFIG`` in ``env`` names the configuration, whose ``mode``
    is the stage (its ``dump_stats_path`` the statistics); without it, the stage is ``measure``
    until ``stats_path`` holds INC's statistics, then ``quantize``."""
    named = (env or {}).get(CONFIG_VAR)
    if named:
        data = _read_config(named)
        if qdq_mode and not data.get("use_qdq"):
            raise PlanError(f"{CONFIG_VAR}={named}: on the CPU Intel Neural Compressor runs FP8 only as "
                            "quantize-dequantize (its Fp8cfg.parse: \"only QDQ mode is supported on CPU device\"): "
                            "add \"use_qdq\": true to that file (and a scale_method other than maxabs_hw)")
        stats = str(data.get("dump_stats_path") or stats_path)
        which = MODES[str(data["mode"]).upper()]
        flow: dict[str, Any] = {"flow": "measure-then-quantize", "stats_path": stats, "measure": measure_config(stats),
                                "quantize": quantize_config(stats), "config": named}
        if qdq_mode:
            flow["measure"], flow["quantize"] = qdq(flow["measure"]), qdq(flow["quantize"])
        flow[which] = data
        flow["stage"] = which
        return flow
    flow = {"flow": "measure-then-quantize", "stats_path": stats_path, "measure": measure_config(stats_path),
            "quantize": quantize_config(stats_path), "config": None}
    if qdq_mode:
        flow["measure"], flow["quantize"] = qdq(flow["measure"]), qdq(flow["quantize"])
    flow["stage"] = stage(flow)
    return flow


def stage(details: Mapping[str, Any]) -> str:
    """``measure`` or ``quantize``: whether INC's statistics for this flow exist already (INC
    writes ``<dump_stats_path>_hooks_maxabs.json`` and friends beside the path's folder)."""
    stats = Path(str(details.get("stats_path", DEFAULT_STATS)))
    folder = stats.parent if stats.parent != Path("") else Path(".")
    return "quantize" if folder.is_dir() and any(folder.glob(f"{stats.name}*maxabs*")) else "measure"


def stage_note(details: Mapping[str, Any]) -> str:
    """What this run of the flow does, and the next step (the plan's note)."""
    if details.get("stage") == "quantize":
        return (f"INC stage quantize: the linears become FP8 with the scales measured in {details['stats_path']} "
                "(convert)")
    return (f"INC stage measure: this run prepares the model to record activation ranges (prepare); generate on "
            f"calibration prompts, then Loaded.save_quantized(DIR) writes the statistics ({details['stats_path']}) "
            f"and DIR/inc_fp8_quantize.json — or run intelrt quantize MODEL --method fp8 --calibration FILE --output "
            f"DIR —; then {CONFIG_VAR}=DIR/inc_fp8_quantize.json runs FP8")


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
        from neural_compressor.torch.algorithms.fp8_quant.utils import logger as inc_logger
    except ImportError:
        raise PlanError(f"quantization='fp8' uses Intel Neural Compressor, which is not installed: pip install "
                        f"'{EXTRA}' (neural-compressor-pt; Intel's Gaudi containers ship it)") from None
    _restore_trace(inc_logger.trace)
    return quantization


def _restore_trace(inc_trace: Any) -> None:
    """INC and auto-round each set ``logging.Logger.trace`` when imported (INC's
    ``fp8_quant/utils/logger.py``, auto-round's ``logger.py``); auto-round's takes no keywords, and
    INC calls it with ``stacklevel=``, so after an AutoRound run in the process INC's FP8 flow raises
    ``TypeError``. INC's own takes any keywords, auto-round's calls included: put it back."""
    if logging.Logger.trace is not inc_trace:  # type: ignore[attr-defined]
        logging.Logger.trace = inc_trace  # type: ignore[attr-defined]


def apply_fp8(model: Any, details: Mapping[str, Any]) -> Any:
    """The stage of INC's flow the plan names, on a loaded Gaudi ``model``, as INC's own examples
    and Optimum Habana run it: ``FP8Config.from_json_file(QUANT_CONFIG)``, then ``prepare`` when
    it measures, ``convert`` when it quantizes. Returns the model."""
    inc = _inc()
    which = str(details.get("stage", "measure"))
    path = details.get("config")
    if not path:
        folder = Path(tempfile.mkdtemp(prefix="intelrt-inc-"))
        path = str(write_config(details, which, folder))
    config = inc.FP8Config.from_json_file(str(path))
    log.info("intelrt: INC FP8 stage %s with %s", which, path)
    return inc.prepare(model, config) if which == "measure" else inc.convert(model, config)


def save_measurement(model: Any, details: Mapping[str, Any], directory: str | os.PathLike[str]) -> Path:
    """End the measure stage: INC writes the activation statistics (``finalize_calibration``, into
    ``dump_stats_path``) and the QUANTIZE configuration reading them goes to
    ``directory/inc_fp8_quantize.json``, for ``QUANT_CONFIG``. Returns that file."""
    if details.get("stage") != "measure":
        raise PlanError("this model was converted to FP8 (INC's quantize stage); INC keeps FP8 models in no checkpoint "
                        "format: keep the statistics and the QUANT_CONFIG file that made it")
    _inc().finalize_calibration(model)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    return write_config(details, "quantize", target)
