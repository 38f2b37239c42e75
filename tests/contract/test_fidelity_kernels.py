"""Hub kernels as transformers 5.24 really uses them: the version range, and which layers a plan's
KernelConfig kernelizes (SPEC X8, C4).

transformers' ``kernelize`` runs ``kernels.use_kernel_mapping(config.kernel_mapping,
inherit_mapping=config.inherit_mapping)`` around ``kernels.kernelize`` after registering its own
default mapping globally (``integrations/hub_kernels.py``). The kernels version installed here
(0.17.2) is outside transformers' range, so transformers' own ``kernelize`` refuses to run; the
tests drive the ``kernels`` calls it makes, with transformers' own ``KernelConfig`` and mapping
conversion.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from hub_cache_layout import cache_kernel

import intelrt
from intelrt.plugin import hub_kernels_problem
from intelrt.runtime.pretrained_kwargs import kernel_config

ROOT = Path(__file__).resolve().parents[2]
TINY_KERNELS = {"kernels-community/rmsnorm": 1, "kernels-community/activation": 1, "kernels-community/rotary": 2}


def _transformers_kernels_range() -> str:
    extra = [r for r in metadata.requires("transformers") or [] if r.startswith("kernels") and 'extra == "kernels"' in r]
    assert len(extra) == 1, extra
    return extra[0].split(";")[0].removeprefix("kernels").strip()


@pytest.mark.claim("X8")
def test_X8_the_kernels_extra_is_the_range_transformers_accepts() -> None:
    from packaging.specifiers import SpecifierSet
    from transformers.utils.import_utils import KERNELS_MAX_VERSION, KERNELS_MIN_VERSION

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    ours = re.search(r'^kernels = \["kernels([^"]*)"\]', text, re.M)
    assert ours is not None
    accepted = SpecifierSet(_transformers_kernels_range())
    assert SpecifierSet(ours.group(1)) == accepted
    assert accepted == SpecifierSet(f">={KERNELS_MIN_VERSION},<{KERNELS_MAX_VERSION}")


@pytest.mark.claim("X8")
def test_X8_plan_and_doctor_say_plainly_why_hub_kernels_are_off_here(simulate: Any, tiny_model: Path) -> None:
    """The kernels installed here is outside that range: transformers ignores it, and intelrt says so."""
    from transformers.utils.import_utils import is_kernels_available

    installed = metadata.version("kernels")
    assert is_kernels_available() is False  # transformers' own verdict
    problem = hub_kernels_problem()
    assert problem is not None and f"kernels {installed} is installed" in problem.why
    assert problem.fix == f"pip install 'kernels{_transformers_kernels_range()}'"
    simulate("xpu", 1)
    assert intelrt.plan(tiny_model).decisions["kernels"].reason == str(problem)
    from intelrt.planning.diagnosis import diagnose

    [finding] = [f for f in diagnose()["findings"] if f["title"].startswith("hub kernels are unusable here")]
    assert finding["severity"] == "warning" and finding["fix"] == problem.fix


@pytest.mark.claim("C4")
def test_C4_the_kernel_config_kernelizes_only_the_layers_the_plan_names(simulate: Any, tiny_model: Path,
                                                                        tmp_path: Path) -> None:
    """transformers registers its default mapping for every layer it knows (here the SiLU it
    would fetch from the hub); with the plan's KernelConfig the mapping kernelize sees holds the
    plan's layers only. transformers' default (inherit_mapping=True) would add the rest."""
    from kernels import LayerRepository, Mode, register_kernel_mapping, use_kernel_mapping
    from kernels.layer.globals import _KERNEL_MAPPING
    from transformers import KernelConfig
    from transformers.utils.kernel_config import add_to_mapping

    cache_kernel(tmp_path, "kernels-community/rmsnorm", 1)  # only RMSNorm is available offline
    simulate("xpu", 1, packages={"kernels": "0.18.2"}, env={"KERNELS_CACHE": str(tmp_path)})
    plan = intelrt.plan(tiny_model)
    config = kernel_config(plan)
    assert isinstance(config, KernelConfig) and config.inherit_mapping is False
    assert list(config.kernel_mapping) == ["RMSNorm"]
    user: dict[str, Any] = {}
    for layer, entry in config.kernel_mapping.items():
        add_to_mapping(layer, "xpu", entry["xpu"], Mode.INFERENCE, user)
    default = {"SiLU": {"xpu": {Mode.INFERENCE: LayerRepository(repo_id="kernels-community/activation",
                                                                layer_name="Silu", version=1)}}}
    token = _KERNEL_MAPPING.set({})
    try:
        register_kernel_mapping(default)  # what transformers' set_use_kernels registers first
        with use_kernel_mapping(user, inherit_mapping=config.inherit_mapping):
            planned = set(_KERNEL_MAPPING.get())
        with use_kernel_mapping(user, inherit_mapping=KernelConfig(kernel_mapping={}).inherit_mapping):
            inherited = set(_KERNEL_MAPPING.get())
    finally:
        _KERNEL_MAPPING.reset(token)
    assert planned == {"RMSNorm"}
    assert inherited == {"RMSNorm", "SiLU"}  # transformers' default: SiLU fetched from the hub at load
