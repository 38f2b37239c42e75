"""The ``acme`` backend: a new backend kind for a fictional accelerator, from detection to the
collective library.

The vendor ships a Python runtime module, ``acme_runtime`` (device count, names, memory, bf16),
and a torch extension that registers the ``acme`` device type. This plugin contributes one
:class:`~intelrt.plugin.Backend` subclass: its facts as class attributes, and a method for each
decision that differs on Acme cards — detection (available or not, always with the reason),
device selection through the runtime's visibility variable, the dtype, the collective library,
and a diagnosis of a runtime that sees no card. Everything it leaves out (placement, attention,
compile …) comes from intelrt's generic rules.

Nothing heavy is imported at module level: the runtime is imported inside ``detect``, only when it
is installed. ``testing.simulate_acme`` puts a stand-in runtime on the path for tests.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping, Sequence

from intelrt.plugin import (
    Backend,
    BackendStatus,
    Decision,
    DeviceInfo,
    EnvVar,
    Finding,
    PlanError,
    Situation,
    hookimpl,
)

NAME = "acme"
RUNTIME = "acme_runtime"
VISIBLE_VAR = "ACME_VISIBLE_DEVICES"


class AcmeBackend(Backend):
    """Acme accelerator cards."""

    name = NAME
    device_type = NAME
    priority = 10
    """Below xpu, hpu and cuda (50-60): ``backend="auto"`` takes Acme only when no other
    accelerator is available, and never where the runtime is missing."""

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> BackendStatus:
        """Available when the Acme runtime is installed and sees at least one card."""
        if importlib.util.find_spec(RUNTIME) is None:
            return BackendStatus(NAME, NAME, False, f"the Acme runtime (module {RUNTIME}) is not installed; "
                                                    "install the vendor's acme-runtime package", cls.priority)
        runtime = importlib.import_module(RUNTIME)
        versions = {"acme_runtime": str(runtime.__version__)}
        count = runtime.device_count()
        if count == 0:
            return BackendStatus(NAME, NAME, False, f"the Acme runtime {runtime.__version__} sees no card "
                                                    f"(check acme-smi, and {VISIBLE_VAR})", cls.priority,
                                 versions=versions)
        bf16 = bool(runtime.supports_bf16())
        devices = tuple(DeviceInfo(i, runtime.device_name(i), runtime.total_memory(i), bf16) for i in range(count))
        return BackendStatus(NAME, NAME, True, f"{count} Acme card(s) visible", cls.priority, devices=devices,
                             versions=versions)

    def run_environment(self, s: Situation) -> Sequence[EnvVar | Finding] | None:
        """``devices=`` → the runtime's visibility variable; an inherited one → a warning."""
        if s.request.devices is not None:
            if max(s.request.devices) >= self.device_count:
                raise PlanError(f"devices={list(s.request.devices)}: only {self.device_count} Acme card(s) are "
                                f"visible (ids 0..{self.device_count - 1})")
            ids = ",".join(str(d) for d in s.request.devices)
            # overwrite_user: the user asked for these cards in this very call.
            return [EnvVar(VISIBLE_VAR, ids, "devices= selects these Acme cards", overwrite_user=True)]
        if VISIBLE_VAR in s.env:
            return [Finding("warning", f"{VISIBLE_VAR} is inherited from the environment",
                            f"{VISIBLE_VAR}={s.env[VISIBLE_VAR]} limits this run to those cards; a forgotten export "
                            "routes later runs to the same cards",
                            fix=f"pass devices= to choose cards for one run, or unset {VISIBLE_VAR}")]
        return None

    def select_dtype(self, s: Situation) -> Decision:
        """bfloat16 when every card has it (a forced dtype is the user's, checked by intelrt)."""
        if self.devices and all(d.bf16 for d in self.devices):
            return Decision("bfloat16", "every visible Acme card computes bfloat16 natively")
        return Decision("float16", "a visible Acme card lacks bfloat16; float16 halves memory as well")

    def select_collective(self, s: Situation) -> Decision:
        return Decision("gloo", "the Acme runtime ships no collective library; gloo runs torch.distributed over "
                                "the host network")

    def diagnose(self, env: Mapping[str, str], probe: bool) -> Sequence[Finding] | None:
        """A runtime that is installed but sees no card is worth a warning; no runtime is not."""
        if self.available or not self.versions:
            return None
        return [Finding("warning", "the Acme runtime sees no card", self.reason,
                        fix=f"check the card with acme-smi; unset {VISIBLE_VAR} if it hides every card")]


@hookimpl
def intelrt_backends() -> list[type[Backend]]:
    return [AcmeBackend]
