"""The request options, declared once: ``plan()``, ``load()``, :class:`Request` and the CLI's plan
flags are built from (or checked against) :data:`REQUEST_OPTIONS`.

Each option has its default (``"auto"``: intelrt decides), the values it accepts, help text for
the command line and the normaliser that turns what a caller passed into the request's value,
refusing anything else with a :class:`ConfigurationError` that says what was wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

AUTO = "auto"
DTYPES = ("auto", "float32", "bfloat16", "float16")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
QUANTIZATIONS = ("4bit", "8bit")
QUANTIZATION_ALIASES = {"4": "4bit", "8": "8bit", "int4": "4bit", "int8": "8bit"}
SWITCH = ("auto", "on", "off")
BATCHING = ("auto", "continuous", "padded")
TASKS = ("auto", "text-generation", "feature-extraction", "sequence-classification")
WORKLOADS = ("auto", "one-shot", "server", "batch")
"""The kind of work a load serves (it decides how much warm-up pays for itself)."""
WARMUPS = ("auto", "eager", "static", "compiled")
"""How the fast decode step is prepared: as it is, captured in a device graph, or compiled and captured."""
SHARDING = ("auto", "none", "ddp", "fsdp", "deepspeed")
PARALLEL = ("auto", "none", "tensor")
COMPILE_CHOICES = ("auto", "none", "on")
"""Named compile choices; any other string names a ``torch.compile`` backend."""


def text_choice(name: str, value: object, allowed: Sequence[str] | None = None) -> str:
    """``value`` as a non-empty string (one of ``allowed`` when given), else a ConfigurationError."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string, got {value!r}")
    if allowed is not None and value not in allowed:
        raise ConfigurationError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def normalize_devices(devices: object) -> tuple[int, ...] | None:
    """``None``, a list of ids or ``"0,2"`` → a tuple of ids; an int count is refused (ambiguous)."""
    if devices is None:
        return None
    if isinstance(devices, str):
        parts = [p.strip() for p in devices.split(",")]
        if not devices.strip() or any(not p for p in parts):
            raise ConfigurationError(f"devices={devices!r}: give device ids separated by commas, e.g. '0,2'")
        try:
            ids = [int(p) for p in parts]
        except ValueError:
            raise ConfigurationError(f"devices={devices!r}: every id must be a whole number, e.g. '0,2'") from None
    elif isinstance(devices, (list, tuple)):
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ConfigurationError(f"devices={devices!r}: every id must be an int")
        ids = list(devices)
    else:
        raise ConfigurationError(
            f"devices={devices!r}: pass a list of device ids such as [0, 2] (or '0,2'); "
            "to use every visible device, leave devices unset")
    if not ids:
        raise ConfigurationError("devices=[] selects nothing: leave devices unset to use every visible device")
    if any(i < 0 for i in ids):
        raise ConfigurationError(f"devices={devices!r}: device ids are >= 0")
    if len(set(ids)) != len(ids):
        raise ConfigurationError(f"devices={devices!r}: a device id is repeated")
    return tuple(ids)


def _backend(value: object) -> str:
    return text_choice("backend", value).lower()


def _dtype(value: object) -> str:
    return text_choice("dtype", DTYPE_ALIASES.get(str(value), value), DTYPES)


def _kernels(value: object) -> str | bool:
    if isinstance(value, bool):
        return value
    choice = text_choice("kernels", value, SWITCH)
    return {"on": True, "off": False}.get(choice, choice)


def _quantization(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).lower()
    return text_choice("quantization", QUANTIZATION_ALIASES.get(text, text), QUANTIZATIONS)


def _compile(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "none"
    return text_choice("compile", value)


def _switch(name: str) -> Callable[[object], str]:
    def normalize(value: object) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        return text_choice(name, value, SWITCH)

    return normalize


def _choice(name: str, allowed: Sequence[str]) -> Callable[[object], str]:
    return lambda value: text_choice(name, value, allowed)


def _text(name: str) -> Callable[[object], str]:
    return lambda value: text_choice(name, value)


def _flag(name: str) -> Callable[[object], bool]:
    def normalize(value: object) -> bool:
        if not isinstance(value, bool):
            raise ConfigurationError(f"{name} must be True or False, got {value!r}")
        return value

    return normalize


@dataclass(frozen=True)
class RequestOption:
    """One option of ``plan()`` / ``load()`` (and the CLI flag ``--name-with-dashes``)."""

    name: str
    default: Any
    help: str
    normalize: Callable[[Any], Any]
    choices: tuple[str, ...] | None = None
    """The values the command line accepts (``None``: any text, checked by ``normalize``)."""
    flag: bool = False
    """A switch: ``--name`` on the command line sets True."""
    metavar: str | None = None

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def to_json(self, value: Any) -> Any:
        return list(value) if isinstance(value, tuple) else value


REQUEST_OPTIONS: tuple[RequestOption, ...] = (
    RequestOption("backend", AUTO, "auto (the best available accelerator, else the CPU) or a backend name: cpu, "
                  "cuda, xpu, hpu … (`intelrt plugins` lists them)", _backend, metavar="NAME"),
    RequestOption("devices", None, "device ids for this run, e.g. 0,2 (default: every visible device)",
                  normalize_devices, metavar="IDS"),
    RequestOption("dtype", AUTO, "weights dtype: auto, float32, bfloat16, float16 (bf16, fp16, fp32 accepted)",
                  _dtype, metavar="DTYPE"),
    RequestOption("attention", AUTO, "attn_implementation: auto, sdpa, eager, flash_attention_2, … or a hub "
                  "kernel id org/repo", _text("attention"), metavar="IMPL"),
    RequestOption("kernels", AUTO, "hub kernels for supported layers: auto, on, off", _kernels, choices=SWITCH),
    RequestOption("quantization", None, "bitsandbytes weight quantization: 4bit or 8bit (default: none)",
                  _quantization, metavar="BITS"),
    RequestOption("compile", AUTO, "torch.compile the model: auto, none, on, or a torch.compile backend name",
                  _compile, metavar="BACKEND"),
    RequestOption("task", AUTO, "what the model is loaded for: auto (from its config), text-generation, "
                  "feature-extraction, sequence-classification", _choice("task", TASKS), choices=TASKS),
    RequestOption("batching", AUTO, "how a list of prompts is generated: auto, continuous, padded",
                  _choice("batching", BATCHING), choices=BATCHING),
    RequestOption("graphs", AUTO, "device graphs (CUDA / XPU / HPU graphs) for decoding: auto, on, off",
                  _switch("graphs"), choices=SWITCH),
    RequestOption("attention_kernel", AUTO, "intelrt's one-kernel decode attention (Triton) in the fast decode "
                  "step: auto (where the backend runs it), on, off", _switch("attention_kernel"), choices=SWITCH),
    RequestOption("workload", AUTO, "the work this load serves, so that warm-up pays for itself: one-shot (one "
                  "short generate, as `intelrt run`), server (many calls over a long life), batch (many prompts); "
                  "auto: intelrt decides (compiles once the work has shown it is long, or at once when the compile "
                  "cache already holds the step)", _choice("workload", WORKLOADS), choices=WORKLOADS),
    RequestOption("warmup", AUTO, "how the fast decode step is prepared: eager (runs as it is), static (static KV "
                  "cache, step captured in a device graph), compiled (compiled, captured, artifacts kept across "
                  "processes); auto: from the workload", _choice("warmup", WARMUPS), choices=WARMUPS),
    RequestOption("sharding", AUTO, "how training spreads over processes (intelrt launch): auto (from model size, "
                  "device memory and world size), none, ddp, fsdp (FSDP2), deepspeed (ZeRO)",
                  _choice("sharding", SHARDING), choices=SHARDING),
    RequestOption("parallel", AUTO, "how the loaded model spreads over processes (intelrt launch): auto (tensor "
                  "parallel when the weights do not fit one device), none, tensor",
                  _choice("parallel", PARALLEL), choices=PARALLEL),
    RequestOption("trust_remote_code", False, "run Python code that ships with the model (config.json auto_map); "
                  "off by default (SPEC C5)", _flag("trust_remote_code"), flag=True),
    RequestOption("allow_pickle", False, "allow pickle weights (*.bin, *.pt), which can run arbitrary code; "
                  "safetensors only by default (SPEC C5)", _flag("allow_pickle"), flag=True),
    RequestOption("strict", False, "turn warnings that may hide a misconfiguration into errors",
                  _flag("strict"), flag=True),
)
"""Every request option, in the order ``plan()``, ``load()`` and the CLI list them."""

OPTION_NAMES = tuple(o.name for o in REQUEST_OPTIONS)

#: ``from_pretrained`` keywords the plan decides, and the request option to use instead.
PLANNED_KWARGS = {"device_map": "devices=/backend=", "dtype": "dtype=", "torch_dtype": "dtype=",
                  "attn_implementation": "attention=", "use_kernels": "kernels=", "kernel_config": "kernels=",
                  "quantization_config": "quantization=", "trust_remote_code": "trust_remote_code=",
                  "distributed_config": "parallel=/sharding=", "tp_plan": "parallel='tensor'",
                  "tp_size": "parallel='tensor'", "device_mesh": "parallel=/sharding=",
                  "use_safetensors": "allow_pickle="}


def option(name: str) -> RequestOption:
    """The declaration of request option ``name``."""
    for declared in REQUEST_OPTIONS:
        if declared.name == name:
            return declared
    raise KeyError(name)
