"""``intelrt doctor`` findings for Intel GPUs, each with its fix."""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import (
    BackendStatus,
    Finding,
    at_least,
    hub_kernels_problem,
    hub_offline,
    package_version,
)

from .collective import xccl_missing
from .detection import XPU_INDEX
from .devices import SET_ON_COMMAND_LINE, malformed_mask
from .facts import (
    ACCELERATE_XPU_OFF_AT_OR_BELOW,
    MARK_VAR,
    MASK_VAR,
    TRANSFORMERS_TORCH_FLOOR,
    XCCL_TORCH_FLOOR,
    XCCL_WHEELS_TORCH,
    accelerate_uses_xpu,
    torch_version,
    xccl_built,
)
from .hubkernels import FA2_REPO, fa2_version, fetch_hint, locate

_INSTALL = f"pip install torch --index-url {XPU_INDEX} (then pip install 'transformers[torch]')"


def _build(status: BackendStatus) -> list[Finding]:
    if status.versions.get("xpu_build") not in (None, "None"):
        return [Finding("warning", "no Intel GPU visible", status.reason,
                        fix=f"check the driver with `xpu-smi discovery`, and {MASK_VAR} if it is set", claim="X1")]
    import torch

    other = torch.version.cuda or getattr(torch.version, "hip", None)
    return [Finding("info" if other else "warning", "torch is not an XPU build", status.reason,
                    fix=f"for Intel GPUs install torch's XPU build: {_INSTALL}", claim="X1")]


def _floors(status: BackendStatus) -> list[Finding]:
    version = torch_version(status)
    if not at_least(version, TRANSFORMERS_TORCH_FLOOR):
        return [Finding("error", f"torch {version} is too old for Intel GPUs",
                        f"transformers uses XPU from torch {TRANSFORMERS_TORCH_FLOOR}, accelerate above "
                        f"{ACCELERATE_XPU_OFF_AT_OR_BELOW} (the XPU wheel 2.6.0+xpu passes)", fix=_INSTALL,
                        claim="X1")]
    if not accelerate_uses_xpu(version):
        return [Finding("warning", f"torch {version} is too old for accelerate on Intel GPUs",
                        f"accelerate uses XPU only with torch above {ACCELERATE_XPU_OFF_AT_OR_BELOW} as packaging "
                        "orders versions (Trainer, device_map='auto'; the XPU wheel 2.6.0+xpu passes, a 2.6.0 "
                        f"without its local label does not), and the xccl collective backend needs torch >= "
                        f"{XCCL_TORCH_FLOOR}", fix=_INSTALL, claim="X1")]
    return []


def _mask(env: Mapping[str, str], status: BackendStatus) -> list[Finding]:
    mask = env.get(MASK_VAR)
    if mask is None:
        return []
    xpu_build = status.versions.get("xpu_build") not in (None, "None")
    malformed = malformed_mask(env, status, status.device_count if xpu_build and status.available else None)
    problems = [malformed] if malformed is not None else []
    if env.get(MARK_VAR) == mask:
        return problems
    return problems + [Finding("warning", f"{MASK_VAR}={mask} is set in the environment",
                    "an exported mask (perhaps a stale one) decides which Intel GPUs every later run sees; "
                    "a forgotten export silently routes runs to the wrong devices", fix=SET_ON_COMMAND_LINE,
                    claim="X2")]


def _xccl(status: BackendStatus) -> list[Finding]:
    if xccl_built(status):
        return []
    return [Finding("warning", "this torch has no XCCL: one process per Intel GPU cannot train together",
                    xccl_missing(status), fix=f"install torch >= {XCCL_WHEELS_TORCH} from the XPU index: {_INSTALL}",
                    claim="X11")]


def _fa2(status: BackendStatus, env: Mapping[str, str]) -> list[Finding]:
    problem = hub_kernels_problem()
    if problem is not None:
        return [Finding("warning" if package_version("kernels") else "info",
                        "hub kernels are unusable here (flash_attention_2, use_kernels)", problem.why,
                        fix=problem.fix, claim="X5")]
    source = locate(FA2_REPO, fa2_version(status.versions.get("torch")), env)
    if source.offline_ready:
        return []
    offline = hub_offline(env)
    return [Finding("warning" if offline else "info", f"the FlashAttention-2 kernel {FA2_REPO} is not cached",
                    f"attention='flash_attention_2' {'fails while HF_HUB_OFFLINE is set' if offline else 'downloads it at load time'}",
                    fix=fetch_hint(source), claim="X5")]


def diagnose(status: BackendStatus, env: Mapping[str, str]) -> list[Finding]:
    """Missing XPU build of torch, torch too old, an inherited (possibly stale) mask, and the
    FlashAttention-2 kernel not cached."""
    findings = _mask(env, status)
    if not status.available:
        return _build(status) + _floors(status) + findings if "torch" in status.versions else findings
    return _floors(status) + findings + _xccl(status) + _fa2(status, env)
