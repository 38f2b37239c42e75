"""X4/X5 attention on Intel GPUs under the simulated XPU runtime, and the CLI refusal of FA3.

Kernel availability is arranged the way kernels finds kernels: a version ref and snapshot in a
hub cache (``KERNELS_CACHE``) or a ``LOCAL_KERNELS`` override; the installed kernels version is
what ``simulate(packages=...)`` reports (transformers 5.24 accepts kernels >=0.18.2,<0.19).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hub_cache_layout import cache_kernel

import intelrt
from intelrt.errors import PlanError

FA2 = "kernels-community/flash-attn2"
KERNELS_OK = {"kernels": "0.18.2"}


@pytest.mark.claim("X4")
@pytest.mark.parametrize(("torch_version", "expected"), [
    ("2.8.0", "with torch 2.8.0 (>= 2.8) SDPA on XPU handles it natively, without repeating the key/value heads"),
    ("2.7.1", "torch 2.7.1 < 2.8, so transformers repeats the key/value heads before SDPA on XPU"),
])
def test_X4_sdpa_is_the_default_with_the_gqa_note_for_this_torch(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                 torch_version: str, expected: str) -> None:
    simulate("xpu", count=1, torch_version=torch_version)
    decision = intelrt.plan(tiny_model).decisions["attention"]
    assert (decision.value, decision.plugin, decision.claim, decision.forced) == ("sdpa", "xpu", "X4", False)
    assert "SDPA is transformers' default" in decision.reason
    gqa = decision.notes[0]
    assert gqa.startswith("this model uses grouped-query attention") and expected in gqa


@pytest.mark.claim("X5")
def test_X5_flash_attention_2_runs_through_the_cached_hub_kernel(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache_kernel(tmp_path, FA2, 4)  # torch 2.13 → transformers asks for version 4
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)})
    decision = intelrt.plan(tiny_model, attention="flash_attention_2").decisions["attention"]
    assert (decision.value, decision.plugin, decision.claim, decision.forced) == ("flash_attention_2", "xpu", "X5", True)
    assert FA2 in decision.reason
    assert f"kernel: {FA2} v4 from the hub cache" in decision.notes


@pytest.mark.claim("X5")
def test_X5_the_kernel_version_follows_torch(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache_kernel(tmp_path, FA2, 3)  # only version 3 cached: right for torch < 2.10, not for 2.13
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)}, torch_version="2.9.0")
    assert intelrt.plan(tiny_model, attention="flash_attention_2").decided.attention == "flash_attention_2"


@pytest.mark.claim("X5")
def test_X5_flash_attention_2_from_a_local_kernel(simulate, tiny_model: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    simulate("xpu", count=1, packages=KERNELS_OK,
             env={"LOCAL_KERNELS": f"{FA2}={tmp_path}", "KERNELS_CACHE": str(tmp_path / "empty")})
    decision = intelrt.plan(tiny_model, attention="flash_attention_2").decisions["attention"]
    assert f"kernel: {FA2} from LOCAL_KERNELS ({tmp_path})" in decision.notes


@pytest.mark.claim("X5")
def test_X5_offline_without_the_kernel_explicit_is_an_error_auto_stays_on_sdpa(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                               tmp_path: Path) -> None:
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path)})
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(PlanError, match=r"runs the hub kernel kernels-community/flash-attn2, which cannot be loaded: "
                                        r"kernels-community/flash-attn2 v4 is not cached and HF_HUB_OFFLINE is set"):
        intelrt.plan(tiny_model, attention="flash_attention_2")
    auto = intelrt.plan(tiny_model).decisions["attention"]
    assert auto.value == "sdpa"
    assert "flash_attention_2 is not available: kernels-community/flash-attn2 v4 is not cached" in auto.notes[1]


@pytest.mark.claim("X5")
def test_X5_online_the_kernel_is_fetched_at_load_time_and_the_plan_says_so(simulate, tiny_model: Path,  # type: ignore[no-untyped-def]
                                                                           tmp_path: Path) -> None:
    simulate("xpu", count=1, packages=KERNELS_OK, env={"KERNELS_CACHE": str(tmp_path), "HF_HUB_OFFLINE": None})
    decision = intelrt.plan(tiny_model, attention="flash_attention_2").decisions["attention"]
    assert f"kernel: {FA2} v4, downloaded at load time (not cached yet)" in decision.notes


@pytest.mark.claim("X5")
def test_X5_flash_attention_2_with_a_kernels_version_transformers_ignores(simulate, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    from transformers.utils.import_utils import is_kernels_available

    simulate("xpu", count=1)  # the installed kernels (0.17.2 in this venv) as it is
    with pytest.raises(PlanError, match=r"transformers 5\.\S+ uses kernels<0\.19,>=0\.18\.2 only") as refused:
        intelrt.plan(tiny_model, attention="flash_attention_2")
    # the plan's reason is the library's: transformers itself refuses this kernels version
    assert is_kernels_available() is False and "pip install 'kernels<0.19,>=0.18.2'" in str(refused.value)


@pytest.mark.claim("X5")
@pytest.mark.parametrize(("attention", "name"), [("flash_attention_3", "FlashAttention-3"),
                                                 ("flash_attention_4", "FlashAttention-4"),
                                                 ("kernels-community/vllm-flash-attn3", "kernels-community/vllm-flash-attn3")])
def test_X5_flash_attention_3_and_4_are_refused_naming_nvidia(simulate, tiny_model: Path, attention: str,  # type: ignore[no-untyped-def]
                                                              name: str) -> None:
    simulate("xpu", count=1, packages=KERNELS_OK)
    with pytest.raises(PlanError, match=f"{name} runs only on NVIDIA GPUs, not on Intel GPUs"):
        intelrt.plan(tiny_model, attention=attention)


