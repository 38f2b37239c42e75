"""Stop a run whose numbers stopped being numbers.

With a learning rate far too high the weights overflow within a step or two; from then on the
loss is ``nan`` — which ``Trainer`` leaves out of its logged loss by default
(``logging_nan_inf_filter``), so the log shows 0.0 or a stale average — and every later
checkpoint and the final model are all ``nan``. :class:`DivergenceGuard` watches

* the loss of every training forward pass (kept on the device; checked once per optimizer
  step, one scalar read),
* the logged ``loss`` and ``grad_norm`` (not ``grad_norm`` under fp16, whose gradient scaler skips
  non-finite steps by design),
* the trainable weights whenever a checkpoint is about to be written, and before the final save,

and on the first non-finite value stops the run and cancels that step's checkpoint, so the
checkpoints on disk are the ones written before. :func:`diverged_error` then says which step,
what went wrong and what to lower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import TrainingDivergedError
from ..support.distributed import any_rank


@dataclass(frozen=True)
class Divergence:
    """Where a run diverged: the step, what was not finite, and its value."""

    step: int
    what: str
    """``"loss"``, ``"grad_norm"`` or ``"weights"`` (the name of the first non-finite parameter)."""
    value: float | str


def non_finite_weight(model: Any) -> str | None:
    """The name of the first trainable parameter holding ``nan`` or ``inf``, or ``None``."""
    import torch

    for name, parameter in model.named_parameters():
        if parameter.requires_grad and not bool(torch.isfinite(parameter.detach()).all()):
            return str(name)
    return None


def divergence_guard() -> Any:
    """A ``TrainerCallback`` that stops the run at the first non-finite loss, gradient norm or
    weight; its ``divergence`` says where (``None`` while the run is sound)."""
    import torch
    from transformers import TrainerCallback

    class DivergenceGuard(TrainerCallback):
        def __init__(self) -> None:
            self.divergence: Divergence | None = None
            self._losses: list[Any] = []
            self._hook: Any = None

        def _watch(self, module: Any, inputs: Any, output: Any) -> None:
            loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
            if module.training and isinstance(loss, torch.Tensor):
                self._losses.append(loss.detach())

        def _stop(self, state: Any, control: Any, what: str, value: float | str) -> None:
            if self.divergence is None:
                self.divergence = Divergence(int(state.global_step), what, value)
            control.should_training_stop = True
            control.should_save = False  # the checkpoint of a diverged step would hold nan weights

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            if model is not None and self._hook is None:
                self._hook = model.register_forward_hook(self._watch)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            losses, self._losses = self._losses, []
            values = torch.stack([loss.float().mean() for loss in losses]).tolist() if losses else []
            bad = [v for v in values if not math.isfinite(v)]
            if any_rank(bool(bad)):
                self._stop(state, control, "loss", bad[0] if bad else "not finite on another rank")
            elif control.should_save and model is not None:
                weight = non_finite_weight(model)
                if any_rank(weight is not None):
                    self._stop(state, control, "weights", weight or "on another rank")

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            for key in ("loss", "grad_norm"):
                value = (logs or {}).get(key)
                if key == "grad_norm" and args.fp16:
                    continue
                if isinstance(value, (int, float)) and not math.isfinite(value):
                    self._stop(state, control, key, float(value))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None

    return DivergenceGuard()


def diverged_error(divergence: Divergence, *, learning_rate: float, max_steps: int, last_checkpoint: str | None,
                   lora: bool) -> TrainingDivergedError:
    """The error a diverged run ends with: the step, what went wrong, what was kept, what to try."""
    if divergence.what == "weights":
        what = f"the weights stopped being finite numbers ({divergence.value} holds nan or inf)"
    else:
        what = f"the {'loss' if divergence.what == 'loss' else 'gradient norm'} became {divergence.value}"
    of = f" of {max_steps}" if max_steps > 0 else ""
    kept = (f"the last checkpoint before it, {last_checkpoint}, is kept (resume from it with resume={last_checkpoint!r} "
            "and a lower learning rate)" if last_checkpoint else "no checkpoint was written before it")
    usual = "1e-4 to 2e-4 for LoRA" if lora else "1e-5 to 5e-5 for a whole model"
    return TrainingDivergedError(
        f"training diverged at step {divergence.step}{of}: {what}. Nothing was saved as the final model; {kept}. "
        f"Lower the learning rate (it was {learning_rate:g}; {usual} is usual), or add warmup_steps / max_grad_norm. "
        "The model in memory holds the diverged weights: load it again before generating.")
