"""Large random weights for the tiny model, so greedy output changes token to token: a decode loop
that fed back the wrong token, position or cache entry would not match ``model.generate``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def vary(model: Any, seed: int) -> None:
    """Overwrite every parameter of ``model`` with N(0, 0.3²) values from ``seed``, in place."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def varied_copy(tiny_model: Path, directory: Path, seed: int) -> Path:
    """A copy of the tiny model in ``directory`` with varied weights (``vary``)."""
    from transformers import AutoModelForCausalLM

    shutil.copytree(tiny_model, directory, dirs_exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(directory)
    vary(model, seed)
    model.save_pretrained(directory)
    return directory
