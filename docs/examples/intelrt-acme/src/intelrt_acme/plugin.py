"""The ``acme`` backend: a new backend kind for a fictional accelerator, from detection to the
collective library.

The vendor ships a Python runtime module, ``acme_runtime`` (device count, names, memory, bf16),
and a torch extension that registers the ``acme`` device type. This plugin reports the backend
(available or not, always with the reason), selects devices through the runtime's visibility
variable, picks the dtype, names the collective library and diagnoses a runtime that sees no
card. Everything else (placement, attention, compile …) comes from intelrt's generic defaults.

Nothing heavy is imported at module level: the runtime is imported inside the hooks, only when it
is installed. ``testing.simulate_acme`` puts a stand-in runtime on the path for tests.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

from intelrt.plugin import BackendStatus, Decision, DeviceInfo, EnvVar, Finding, PlanError, hookimpl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from intelrt.plugin import Request

NAME = "acme"
RUNTIME = "acme_runtime"
VISIBLE_VAR = "ACME_VISIBLE_DEVICES"
PRIORITY = 10
"""Below xpu, hpu and cuda (50-60): ``backend="auto"`` takes Acme only when no other
accelerator is available, and never where the runtime is missing."""


@hookimpl
def intelrt_detect(env: Mapping[str, str]) -> list[BackendStatus]:
    """Available when the Acme runtime is installed and sees at least one card."""
    if importlib.util.find_spec(RUNTIME) is None:
        return [BackendStatus(NAME, NAME, False, f"the Acme runtime (module {RUNTIME}) is not installed; "
                                                 "install the vendor's acme-runtime package", PRIORITY)]
    runtime = importlib.import_module(RUNTIME)
    versions = {"acme_runtime": str(runtime.__version__)}
    count = runtime.device_count()
    if count == 0:
        return [BackendStatus(NAME, NAME, False, f"the Acme runtime {runtime.__version__} sees no card "
                                                 f"(check acme-smi, and {VISIBLE_VAR})", PRIORITY, versions=versions)]
    bf16 = bool(runtime.supports_bf16())
    devices = tuple(DeviceInfo(i, runtime.device_name(i), runtime.total_memory(i), bf16) for i in range(count))
    return [BackendStatus(NAME, NAME, True, f"{count} Acme card(s) visible", PRIORITY, devices=devices,
                          versions=versions)]


@hookimpl
def intelrt_setup_env(backend: BackendStatus, request: Request, env: Mapping[str, str]
                      ) -> Sequence[EnvVar | Finding] | None:
    """``devices=`` → the runtime's visibility variable; an inherited one → a warning."""
    if backend.name != NAME:
        return None
    if request.devices is not None:
        if max(request.devices) >= backend.device_count:
            raise PlanError(f"devices={list(request.devices)}: only {backend.device_count} Acme card(s) are "
                            f"visible (ids 0..{backend.device_count - 1})")
        ids = ",".join(str(d) for d in request.devices)
        # overwrite_user: the user asked for these cards in this very call.
        return [EnvVar(VISIBLE_VAR, ids, "devices= selects these Acme cards", overwrite_user=True)]
    if VISIBLE_VAR in env:
        return [Finding("warning", f"{VISIBLE_VAR} is inherited from the environment",
                        f"{VISIBLE_VAR}={env[VISIBLE_VAR]} limits this run to those cards; a forgotten export "
                        "routes later runs to the same cards",
                        fix=f"pass devices= to choose cards for one run, or unset {VISIBLE_VAR}")]
    return None


@hookimpl
def intelrt_select_dtype(backend: BackendStatus, request: Request) -> Decision | None:
    """bfloat16 when every card has it; a forced dtype is left to the built-in checks."""
    if backend.name != NAME or request.is_forced("dtype"):
        return None
    if backend.devices and all(d.bf16 for d in backend.devices):
        return Decision("bfloat16", "every visible Acme card computes bfloat16 natively")
    return Decision("float16", "a visible Acme card lacks bfloat16; float16 halves memory as well")


@hookimpl
def intelrt_select_collective(backend: BackendStatus) -> Decision | None:
    if backend.name != NAME:
        return None
    return Decision("gloo", "the Acme runtime ships no collective library; gloo runs torch.distributed over "
                            "the host network")


@hookimpl
def intelrt_diagnose(backends: Sequence[BackendStatus], env: Mapping[str, str]) -> list[Finding] | None:
    """A runtime that is installed but sees no card is worth a warning; no runtime is not."""
    acme = next((b for b in backends if b.name == NAME), None)
    if acme is None or acme.available or not acme.versions:
        return None
    return [Finding("warning", "the Acme runtime sees no card", acme.reason,
                    fix=f"check the card with acme-smi; unset {VISIBLE_VAR} if it hides every card")]
