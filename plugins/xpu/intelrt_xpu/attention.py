"""X4, X5: ``attn_implementation`` on Intel GPUs (it applies to inference and training alike).

How transformers 5.24 runs ``flash_attention_2`` on XPU: ``is_flash_attn_2_available()`` counts
the ``flash_attn`` package only on CUDA / MLU / MUSA, so on XPU FA2 is never "installed";
``PreTrainedModel._check_and_adjust_attn_implementation`` then — when transformers accepts the
installed ``kernels`` — swaps the name for the hub kernel ``kernels-community/flash-attn2``
(version 4 with torch >= 2.10, else 3) and loads it with ``kernels.get_kernel``: from
``LOCAL_KERNELS``, else from the hub cache when offline, else downloading it. Without a usable
``kernels``, loading fails. FlashAttention-3/-4 kernels ship CUDA builds only.
"""

from __future__ import annotations

from collections.abc import Mapping

from intelrt.plugin import (
    Backend,
    Decision,
    Endorsement,
    ModelInfo,
    PlanError,
    Situation,
    attention_fallback,
    kernels_problem,
)

from .facts import NATIVE_GQA_TORCH, torch_at_least, torch_version
from .hubkernels import (
    FA2_REPO,
    NVIDIA_ONLY_REPOS,
    fa2_version,
    fetch_hint,
    locate,
)

_NVIDIA_ONLY = {"flash_attention_3": "FlashAttention-3", "flash_attention_4": "FlashAttention-4",
                **{repo: repo for repo in NVIDIA_ONLY_REPOS}}


def _uses_gqa(model: ModelInfo) -> bool | None:
    text = model.config.get("text_config") or model.config
    heads, kv_heads = text.get("num_attention_heads"), text.get("num_key_value_heads")
    if not heads or not kv_heads:
        return None
    return int(kv_heads) < int(heads)


def gqa_note(backend: Backend, model: ModelInfo) -> str:
    """X4: whether SDPA on XPU takes grouped-query attention natively with this torch."""
    version = torch_version(backend)
    gqa = _uses_gqa(model)
    subject = ("this model uses grouped-query attention" if gqa else
               "grouped-query attention (not used by this model)" if gqa is False else "grouped-query attention")
    if torch_at_least(backend, NATIVE_GQA_TORCH):
        return (f"{subject}: with torch {version} (>= {NATIVE_GQA_TORCH}) SDPA on XPU handles it natively, "
                "without repeating the key/value heads")
    return (f"{subject}: torch {version} < {NATIVE_GQA_TORCH}, so transformers repeats the key/value heads "
            f"before SDPA on XPU (more memory); torch >= {NATIVE_GQA_TORCH} avoids it")


def _fa2_status(backend: Backend, env: Mapping[str, str]) -> tuple[bool, str]:
    """(usable, why) for the FA2 hub kernel on this machine."""
    problem = kernels_problem()
    if problem is not None:
        return False, problem
    source = locate(FA2_REPO, fa2_version(backend.versions.get("torch")), env)
    if not source.usable:
        return False, f"{source.describe()}: {fetch_hint(source)}"
    return True, source.describe()


def _flash_attention_2(backend: Backend, value: str, s: Situation) -> Endorsement:
    usable, why = _fa2_status(backend, s.env)
    if not usable:
        raise PlanError(f"attention={value!r} on Intel GPUs runs the hub kernel {FA2_REPO}, which cannot be "
                        f"loaded: {why}. Or use attention='sdpa' (the default)")
    notes = [f"transformers swaps flash_attention_2 for the hub kernel {FA2_REPO} on XPU (the flash_attn "
             "package is not used there)", f"kernel: {why}"]
    if s.decided.dtype == "float32":
        notes.append("FlashAttention computes in float16/bfloat16 only: with dtype float32 transformers warns; "
                     "pass dtype='bfloat16'")
    return Endorsement(f"runs through the hub kernel {FA2_REPO}", claim="X5", notes=tuple(notes))


def select_attention(backend: Backend, s: Situation) -> Decision:
    """X4/X5: ``sdpa`` by default (with the GQA note for this torch); ``flash_attention_2`` is not
    chosen automatically."""
    fallback = attention_fallback(s.model)
    if fallback is not None:
        return fallback
    usable, why = _fa2_status(backend, s.env)
    fa2 = (f"flash_attention_2 is not chosen automatically; it is available here ({why})" if usable
           else f"flash_attention_2 is not available: {why}")
    return Decision("sdpa", "SDPA is transformers' default and runs on every Intel GPU with stock PyTorch; "
                            "FlashAttention-3/-4 run only on NVIDIA GPUs", claim="X4",
                    notes=(gqa_note(backend, s.model), fa2))


def check_attention(backend: Backend, value: str, s: Situation) -> Endorsement | None:
    """X4/X5: ``flash_attention_2`` only when its hub kernel can be loaded; FlashAttention-3/-4
    refused (NVIDIA only); ``sdpa`` with the GQA note; others left to the generic checks."""
    base = value.removeprefix("paged|")
    if base in _NVIDIA_ONLY:
        raise PlanError(f"attention={value!r}: {_NVIDIA_ONLY[base]} runs only on NVIDIA GPUs, not on Intel GPUs "
                        f"(xpu). Use attention='flash_attention_2' (hub kernel {FA2_REPO}, with the kernels extra) "
                        "or 'sdpa' (the default)")
    if base in ("flash_attention_2", FA2_REPO):
        return _flash_attention_2(backend, value, s)
    if base == "sdpa":
        return Endorsement(claim="X4", notes=(gqa_note(backend, s.model),))
    return None  # eager, flex_attention, other kernels: the generic checks apply
