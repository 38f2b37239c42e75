"""X8: hub kernels on Intel GPUs — a ``KernelConfig`` mapping keyed by the device ``"xpu"``.

The table below is transformers 5.24's own default XPU mapping (``integrations/hub_kernels.py``)
for the layers the Intel GPU guide names: activations, RMSNorm, rotary embeddings. intelrt keeps
the entries for the layers the model registers (read from its modeling source, not imported) and
turns ``use_kernels`` on only when every kept kernel loads without the network.

Mode switching stays transformers': ``model.train()`` / ``model.eval()`` call
``set_use_kernels(True)`` again, which re-kernelizes for ``Mode.TRAINING`` / ``Mode.INFERENCE``.
transformers' XPU kernels for these layers are inference kernels, so in training mode the layers
run their PyTorch forward.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from intelrt.plugin import (
    Backend,
    Decision,
    Endorsement,
    KernelChoice,
    ModelInfo,
    PlanError,
    Situation,
    kernels_problem,
)

from .hubkernels import KernelSource, fetch_hint, locate

#: layer name → (kernel repo, layer in the repo, version): transformers 5.24's "xpu" entries.
XPU_LAYERS: dict[str, tuple[str, str, int]] = {
    "RMSNorm": ("kernels-community/rmsnorm", "RMSNorm", 1),
    "SiLU": ("kernels-community/activation", "Silu", 1),
    "GeLU": ("kernels-community/activation", "Gelu", 1),
    "GeluTanh": ("kernels-community/activation", "GeluTanh", 1),
    "FastGELU": ("kernels-community/activation", "FastGELU", 1),
    "QuickGELU": ("kernels-community/activation", "QuickGELU", 1),
    "NewGELU": ("kernels-community/activation", "NewGELU", 1),
    "rotary_pos_emb": ("kernels-community/rotary", "apply_rotary_transformers", 2),
}
#: config.hidden_act → the hub layer name transformers' activation class registers.
ACTIVATION_LAYERS = {"silu": "SiLU", "gelu": "GeLU", "gelu_pytorch_tanh": "GeluTanh", "gelu_fast": "FastGELU",
                     "quick_gelu": "QuickGELU", "gelu_new": "NewGELU"}
_REGISTERED = re.compile(r"use_kernel_(?:forward|func)_from_hub\(\s*[\"']([^\"']+)[\"']")
_MODES = ("model.train() / model.eval() re-kernelize for the mode (transformers' set_use_kernels); "
          "transformers' XPU kernels for these layers are inference kernels, so training runs their PyTorch forward")


def registered_layers(model: ModelInfo) -> list[str]:
    """Hub layer names the model's classes register (``use_kernel_forward_from_hub("…")``)."""
    text = model.config.get("text_config") or model.config
    names: list[str] = []
    act = ACTIVATION_LAYERS.get(str(text.get("hidden_act") or model.config.get("hidden_act")))
    if act:
        names.append(act)
    spec = importlib.util.find_spec("transformers")
    roots = list(spec.submodule_search_locations or []) if spec else []
    model_type = str(text.get("model_type") or model.model_type)
    for root in roots:
        source = Path(root) / "models" / model_type / f"modeling_{model_type}.py"
        if source.is_file():
            names += _REGISTERED.findall(source.read_text(encoding="utf-8"))
            break
    return [n for n in dict.fromkeys(names) if n in XPU_LAYERS]


def _entry(layer: str, source: KernelSource, local: bool) -> Any:
    """One ``KernelConfig`` value: ``"repo:layer"``, ``["repo:layer", {"version": n}]`` (a tuple
    in transformers) or, for local kernels, ``"/path:layer"``."""
    _repo, repo_layer, version = XPU_LAYERS[layer]
    if local:
        return {"xpu": f"{source.path}:{repo_layer}"}
    name = f"{source.repo}:{repo_layer}"
    return {"xpu": name if version == 1 else [name, {"version": version}]}


def check_kernels(backend: Backend, value: KernelChoice, s: Situation) -> Endorsement:
    """X8: ``kernels=False`` keeps every layer's PyTorch forward."""
    return Endorsement(claim="X8")


def select_kernels(backend: Backend, s: Situation) -> Decision:
    """X8: ``use_kernels`` with a ``KernelConfig`` mapping keyed by ``"xpu"``; on (auto) only when
    ``kernels`` is usable by transformers and every mapped kernel loads offline; ``kernels=True``
    maps every kernel that can load, or is refused naming the one that cannot."""
    model, env = s.model, s.env
    forced = s.request.kernels is True
    problem = kernels_problem()
    if problem is None and str(env.get("USE_HUB_KERNELS", "YES")).upper() not in ("1", "ON", "YES", "TRUE"):
        problem = (f"USE_HUB_KERNELS={env['USE_HUB_KERNELS']} turns transformers' hub-kernel layers off; "
                   "unset it to use kernels")
    if problem is not None:
        if forced:
            raise PlanError(f"kernels=True: {problem}")
        return Decision(KernelChoice.off(), problem, claim="X8")
    layers = registered_layers(model)
    if not layers:
        if forced:
            raise PlanError(f"kernels=True: no XPU hub kernel is known for the layers of model type "
                            f"{model.model_type!r} (intelrt maps {', '.join(XPU_LAYERS)})")
        return Decision(KernelChoice.off(), f"no XPU hub kernel is known for the layers of model type {model.model_type!r}",
                        claim="X8")
    sources = {layer: locate(XPU_LAYERS[layer][0], XPU_LAYERS[layer][2], env) for layer in layers}
    ready = {k: s for k, s in sources.items() if s.offline_ready}
    missing = {k: s for k, s in sources.items() if not s.offline_ready}
    if forced:
        blocked = {k: s for k, s in missing.items() if not s.usable}
        if blocked:
            first = next(iter(blocked.values()))
            raise PlanError(f"kernels=True: {'; '.join(s.describe() for s in blocked.values())}. "
                            f"{fetch_hint(first)}")
        chosen, reason = sources, f"hub kernels for {', '.join(sources)}: each loads here"
    else:
        if not ready:
            first = next(iter(missing.values()))
            return Decision(KernelChoice.off(), "no XPU hub kernel for this model is available offline ("
                            + "; ".join(f"{k}: {s.describe()}" for k, s in missing.items())
                            + f"); {fetch_hint(first)}", claim="X8")
        chosen = ready
        reason = (f"hub kernels for {', '.join(chosen)} are available offline; they replace the PyTorch "
                  "forward of those layers on XPU")
    local = all(s.where == "local" for s in chosen.values())
    mapping = {layer: _entry(layer, source, local) for layer, source in chosen.items()}
    notes = [f"{k}: {s.describe()}" for k, s in chosen.items()]
    notes += [f"{k} keeps its PyTorch forward: {s.describe()}" for k, s in missing.items() if k not in chosen]
    if local:
        notes.append("every kernel comes from LOCAL_KERNELS: KernelConfig(use_local_kernel=True) with local paths")
    notes.append(_MODES)
    return Decision(KernelChoice(True, mapping, local), reason,
                    claim="X8", notes=tuple(notes))
