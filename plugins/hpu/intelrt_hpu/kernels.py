"""Hub kernels on Gaudi: the ``kernels`` package does not accept device type ``hpu`` — said, not pretended."""

from __future__ import annotations

from intelrt.plugin import Backend, Decision, KernelChoice, PlanError, Situation

from .facts import KERNELS_DEVICE_TYPES

WHY_NOT = (f"the kernels package does not accept device type 'hpu' (it accepts {', '.join(KERNELS_DEVICE_TYPES)}), "
           "so use_kernels would change nothing on Gaudi")


def select_kernels(backend: Backend, s: Situation) -> Decision:
    if s.request.kernels is True:
        raise PlanError(f"kernels=True: {WHY_NOT}. Leave kernels unset (or off) on Gaudi")
    return Decision(KernelChoice.off(), WHY_NOT)
