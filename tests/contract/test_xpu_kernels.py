"""X8 hub kernels on Intel GPUs: the plan's mapping keyed by "xpu", built into a real
transformers KernelConfig and validated by transformers against a model that registers the layers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hub_cache_layout import cache_kernel
from torch import nn

import intelrt
from intelrt.errors import PlanError
from intelrt.plugin import KernelChoice
from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs, kernel_config

KERNELS_OK = {"kernels": "0.18.2"}
# transformers 5.24's XPU kernels for the tiny Qwen3's layers (RMSNorm, SiLU activation, rotary)
TINY_KERNELS = {"kernels-community/rmsnorm": 1, "kernels-community/activation": 1, "kernels-community/rotary": 2}



def layers_model(*names: str) -> nn.Module:
    """A module tree whose layers carry hub layer names through kernels' own decorator (what
    transformers applies to its layers when it accepts the installed kernels)."""
    from kernels import use_kernel_forward_from_hub

    model = nn.Module()
    for i, name in enumerate(names):
        layer = use_kernel_forward_from_hub(name)(type(f"Layer{i}", (nn.Identity,), {}))
        model.add_module(f"layer{i}", layer())
    return model


@pytest.mark.claim("X8")
def test_X8_cached_kernels_give_a_kernel_config_keyed_by_xpu_that_transformers_accepts(  # type: ignore[no-untyped-def]
        simulate, tiny_model: Path, tmp_path: Path) -> None:
    from kernels import Mode
    from transformers import KernelConfig
    from transformers.utils.kernel_config import add_to_mapping

    for repo, version in TINY_KERNELS.items():
        cache_kernel(tmp_path, repo, version)
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)})
    plan = intelrt.plan(tiny_model)
    decision = plan.decisions["kernels"]
    assert (decision.plugin, decision.claim, decision.forced) == ("xpu", "X8", False)
    assert decision.value == KernelChoice(
        use_kernels=True, use_local_kernel=False,
        kernel_mapping={"SiLU": {"xpu": "kernels-community/activation:Silu"},
                        "RMSNorm": {"xpu": "kernels-community/rmsnorm:RMSNorm"},
                        "rotary_pos_emb": {"xpu": ["kernels-community/rotary:apply_rotary_transformers",
                                                   {"version": 2}]}})
    assert any("model.train() / model.eval() re-kernelize for the mode" in n for n in decision.notes)

    config = kernel_config(plan)
    assert isinstance(config, KernelConfig) and config.use_local_kernel is False
    assert from_pretrained_kwargs(plan)["kernel_config"].kernel_mapping == config.kernel_mapping
    # transformers validates the mapping against the model's registered layers and device keys
    config.sanitize_kernel_mapping(layers_model("RMSNorm", "SiLU", "rotary_pos_emb"))
    with pytest.raises(ValueError, match="Layer RMSNorm is not registered in the model"):
        kernel_config(plan).sanitize_kernel_mapping(layers_model("SiLU", "rotary_pos_emb"))
    # ... and turns each "xpu" entry into the kernels repository it loads on an Intel GPU
    built: dict[str, Any] = {}
    for layer, entry in config.kernel_mapping.items():
        name, meta = entry["xpu"] if isinstance(entry["xpu"], tuple) else (entry["xpu"], {"version": 1})
        add_to_mapping(layer, "xpu", name, Mode.INFERENCE, built, version=meta["version"])
    rotary = built["rotary_pos_emb"]["xpu"][Mode.INFERENCE]
    assert type(rotary).__name__ == "LayerRepository" and rotary.layer_name == "apply_rotary_transformers"
    assert (rotary._repo_id, rotary._version) == ("kernels-community/rotary", 2)  # the version the plan carried


@pytest.mark.claim("X8")
def test_X8_only_kernels_available_offline_are_mapped(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache_kernel(tmp_path, "kernels-community/rmsnorm", 1)
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)})
    decision = intelrt.plan(tiny_model).decisions["kernels"]
    assert decision.value.use_kernels is True and list(decision.value.kernel_mapping) == ["RMSNorm"]
    assert any(n.startswith("SiLU keeps its PyTorch forward: kernels-community/activation v1 is not cached")
               for n in decision.notes)


@pytest.mark.claim("X8")
def test_X8_nothing_cached_offline_auto_is_off_forced_is_an_error(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)})
    auto = intelrt.plan(tiny_model).decisions["kernels"]
    assert auto.value == KernelChoice.off()
    assert auto.reason.startswith("no XPU hub kernel for this model is available offline")
    assert kernel_config(intelrt.plan(tiny_model)) is None
    with pytest.raises(PlanError, match=r"kernels=True: .*kernels-community/rmsnorm v1 is not cached and HF_HUB_OFFLINE is set"):
        intelrt.plan(tiny_model, kernels=True)


@pytest.mark.claim("X8")
def test_X8_local_kernels_use_the_local_kernel_config(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    local = {repo: tmp_path / repo.split("/")[1] for repo in TINY_KERNELS}
    for path in local.values():
        path.mkdir()
    simulate("xpu", count=1, packages=KERNELS_OK,
             env={"LOCAL_KERNELS": ":".join(f"{r}={p}" for r, p in local.items()),
                  "KERNELS_CACHE": str(tmp_path / "empty")})
    plan = intelrt.plan(tiny_model, kernels=True)
    value = plan.decided.kernels
    assert value is not None and value.use_local_kernel is True and value.kernel_mapping is not None
    assert value.kernel_mapping["RMSNorm"] == {"xpu": f"{local['kernels-community/rmsnorm']}:RMSNorm"}
    config = kernel_config(plan)
    assert config.use_local_kernel is True
    config.sanitize_kernel_mapping(layers_model("RMSNorm", "SiLU", "rotary_pos_emb"))


@pytest.mark.claim("X8")
def test_X8_a_kernels_version_transformers_ignores_turns_kernels_off(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1)  # the venv's kernels 0.17.2: outside transformers 5.24's range
    decision = intelrt.plan(tiny_model).decisions["kernels"]
    assert decision.value.use_kernels is False and "uses kernels<0.19,>=0.18.2 only" in decision.reason
    assert "is_kernels_available() is False" in decision.reason
    assert decision.reason.endswith("pip install 'kernels<0.19,>=0.18.2'")
    with pytest.raises(PlanError, match=r"kernels=True: transformers .* every hub-kernel path is off"):
        intelrt.plan(tiny_model, kernels=True)


@pytest.mark.claim("X8")
def test_X8_kernels_off_by_the_user_and_without_the_package(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, packages={"kernels": None})
    assert intelrt.plan(tiny_model, kernels=False).decisions["kernels"].reason == "turned off by the user"
    with pytest.raises(PlanError, match=r"the kernels package is not installed: pip install 'intelrt\[kernels\]'"):
        intelrt.plan(tiny_model, kernels=True)
    assert torch.xpu.is_available()  # still the simulated machine
