"""Typed values of the structured plan decisions: compile, kernels, quantization, decode, batching,
parallelism, placement, buckets.

A selection hook answers ``Decision(value, reason)``; for these six concerns ``value`` is one of
the frozen dataclasses below (a dict with the same keys is accepted from a plugin and converted by
the host, so a wrong key fails naming the plugin). Plans serialise them with :meth:`Payload.to_dict`
and read them back with :meth:`Payload.from_dict`. Each validates its fields when built.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

JSONValue = str | int | float | bool | None | list[Any] | dict[str, Any]

P = TypeVar("P", bound="Payload")

DECODE_METHODS = ("fast", "generate")
"""``fast``: intelrt's decode loop; ``generate``: transformers' ``model.generate``."""
DECODE_STEPS = ("compact", "model")
"""``compact``: intelrt's compact step for Llama-family layers; ``model``: the model's own forward."""
STEP_ATTENTIONS = ("triton", "torch")
"""How an engine step's flat queries (decoding rows and prompt chunks) attend the paged cache:
intelrt's one Triton kernel per layer (``decoding/unified_attention.py``), or torch operations
(SDPA per prompt chunk, one batched attention for the decoding rows)."""
FORCEABLE_WARMUPS = ("eager", "static", "compiled")
"""How the fast loop's step is prepared: ``eager`` (as it is), ``static`` (captured in a device graph,
not compiled), ``compiled`` (compiled, and captured where the plan names graphs)."""
DECODE_WARMUPS = (*FORCEABLE_WARMUPS, "adaptive")
"""… and ``adaptive`` (``static`` until compiling pays: the compile cache holds the step, or the work
has been long), which only intelrt chooses."""
BATCHING_METHODS = ("continuous", "padded")
BATCHING_ENGINES = ("fast", "generate", "continuous")
KV_SIZINGS = ("memory", "requests")
TRAINING_STRATEGIES = ("none", "ddp", "fsdp", "deepspeed")
"""How training spreads over processes: one process, data parallel, FSDP2, DeepSpeed ZeRO."""
INFERENCE_STRATEGIES = ("none", "tensor")
"""How a loaded model spreads over processes: not at all, or tensor parallel (transformers' ``tp_plan``)."""
QUANTIZATION_REQUESTS = ("4bit", "8bit", "int4", "int8", "int8-dynamic", "autoround", "fp8")
"""What ``quantization=`` accepts, declared once: bitsandbytes 4-bit (NF4) and 8-bit (LLM.int8),
torchao int4 / int8 weight-only and int8 dynamic, Intel's AutoRound, and FP8 (Intel Neural
Compressor on Gaudi, torchao float8 on CUDA). Which method each is on which backend is
``intelrt.quantization.methods.TABLE``."""
QUANTIZATION_SOURCES = ("request", "checkpoint")
"""``request``: quantized while loading (``quantization=``); ``checkpoint``: the weights on disk
are quantized (their ``quantization_config``)."""
QUANTIZATION_BITS = (2, 3, 4, 5, 6, 7, 8)
"""Widths transformers' configs accept (``GPTQConfig.post_init``: 2/3/4/8; ``AutoRoundConfig``: 2-8)."""


def _fail(cls: type, message: str) -> None:
    raise TypeError(f"{cls.__name__}: {message}")


def _check(obj: object, name: str, kinds: tuple[type, ...], *, optional: bool = False,
           choices: tuple[object, ...] | None = None) -> None:
    value = getattr(obj, name)
    if value is None and optional:
        return
    if isinstance(value, bool) and bool not in kinds:
        _fail(type(obj), f"{name} must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        _fail(type(obj), f"{name} must be {wanted}, got {value!r}")
    if choices is not None and value not in choices:
        _fail(type(obj), f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


class Payload:
    """Base of the typed decision values: JSON fields, ``to_dict`` and ``from_dict``."""

    not_printed: ClassVar[tuple[str, ...]] = ()
    """Fields the plan's table leaves out (``to_dict`` and ``--json`` hold them all)."""

    def _validate(self) -> None:
        try:
            json.dumps(self.to_dict())
        except (TypeError, ValueError) as exc:
            _fail(type(self), f"every field must be JSON-serialisable (plans are data): {exc}")

    def to_dict(self) -> dict[str, JSONValue]:
        """The value as plain JSON data (what ``Plan.to_dict`` holds)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any]) -> P:
        """The value from ``to_dict`` output (or a plugin's dict); unknown or missing keys are a ``TypeError``."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        names = [f.name for f in fields]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}; its fields: {', '.join(names)}")
        required = [f.name for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise TypeError(f"{cls.__name__} needs {', '.join(map(repr, missing))}")
        return cls(**dict(data))


def _plain(value: Any) -> JSONValue:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class CompileChoice(Payload):
    """Whether ``torch.compile`` wraps the loaded model, with which ``compiler`` (the ``torch.compile``
    backend: ``inductor``, ``hpu_backend`` …) and mode."""

    enabled: bool
    compiler: str | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        _check(self, "enabled", (bool,))
        _check(self, "compiler", (str,), optional=True)
        _check(self, "mode", (str,), optional=True)
        if self.enabled and not self.compiler:
            _fail(type(self), "enabled=True needs a compiler (e.g. 'inductor')")

    @classmethod
    def off(cls) -> CompileChoice:
        return cls(False)


@dataclass(frozen=True)
class KernelChoice(Payload):
    """Hub kernels: ``use_kernels`` and the ``KernelConfig`` mapping (layer → {device: kernel})."""

    use_kernels: bool
    kernel_mapping: Mapping[str, JSONValue] | None = None
    use_local_kernel: bool = False

    def __post_init__(self) -> None:
        _check(self, "use_kernels", (bool,))
        _check(self, "kernel_mapping", (Mapping,), optional=True)
        _check(self, "use_local_kernel", (bool,))
        if self.kernel_mapping is not None:
            object.__setattr__(self, "kernel_mapping", _plain(self.kernel_mapping))
        self._validate()

    @classmethod
    def off(cls) -> KernelChoice:
        return cls(False)


@dataclass(frozen=True)
class QuantizationChoice(Payload):
    """Weights quantized by ``method`` to ``bits``, as the plan applies them.

    ``method`` is transformers' ``quant_method`` family: ``bitsandbytes``, ``torchao``,
    ``auto-round``, ``inc`` (Intel Neural Compressor FP8 on Gaudi), ``gptq``, ``awq``,
    ``compressed-tensors``, ``fbgemm_fp8``, ``fp8`` (fine-grained FP8), ``mxfp4``, ``hqq``,
    ``quanto``. ``scheme`` names the variant (``nf4``, ``int8-weight-only``, ``w4a16`` …).
    ``source`` says where the quantization comes from: ``request`` (quantized while loading,
    ``quantization=``) or ``checkpoint`` (the weights on disk are quantized: their
    ``quantization_config``). intelrt's method × backend table (``intelrt.quantization.methods``,
    docs/quantization.md) fills every field.
    """

    method: str
    bits: int
    quant_type: str | None = None
    """bitsandbytes 4-bit only: ``nf4`` or ``fp4``."""
    compute_dtype: str | None = None
    """bitsandbytes 4-bit only: the dtype matmuls run in (``bfloat16``, ``float16``, ``float32``)."""
    double_quant: bool = False
    scheme: str | None = None
    source: str = "request"
    requested: str | None = None
    """The ``quantization=`` value this carries out (one of :data:`QUANTIZATION_REQUESTS`); ``None``
    when nobody asked: the checkpoint's own quantization."""
    package: str | None = None
    """The distribution that runs it (``torchao``, ``auto-round``, ``gptqmodel`` …)."""
    extra: str | None = None
    """The intelrt extra that installs ``package`` (``intelrt[torchao]``)."""
    group_size: int | None = None
    dtype: str | None = None
    """The dtype transformers loads the model in with this method on this device (AWQ: float16 on
    CUDA and XPU, ``quantizer_awq.py`` ``update_dtype``); the plan's dtype decision shows it.
    ``None``: the method leaves the dtype to the plan."""
    details: Mapping[str, JSONValue] = dataclasses.field(default_factory=dict)
    """What the runtime builder needs (a torchao config class and its arguments, INC's JSON
    configurations, a checkpoint's loading attributes …); plain JSON."""
    trainable: bool = False
    """PEFT trains LoRA adapters on this base (``intelrt.quantization.lora`` says why or why not)."""
    serializable: bool = True
    """``save_pretrained`` writes it as a checkpoint plain ``from_pretrained`` loads."""
    dequantized: bool = False
    """transformers expands the weights to the model's dtype on this device: it runs, saving no memory."""

    not_printed: ClassVar[tuple[str, ...]] = ("details",)  # the builder's inputs: long (INC's configurations)

    def __post_init__(self) -> None:
        _check(self, "method", (str,))
        _check(self, "bits", (int,), choices=QUANTIZATION_BITS)
        _check(self, "source", (str,), choices=QUANTIZATION_SOURCES)
        _check(self, "requested", (str,), optional=True, choices=QUANTIZATION_REQUESTS)
        for name in ("quant_type", "compute_dtype", "scheme", "package", "extra", "dtype"):
            _check(self, name, (str,), optional=True)
        _check(self, "group_size", (int,), optional=True)
        for name in ("double_quant", "trainable", "serializable", "dequantized"):
            _check(self, name, (bool,))
        _check(self, "details", (Mapping,))
        if not self.method:
            _fail(type(self), "method must be a non-empty str")
        if self.source == "request" and self.requested is None:
            _fail(type(self), "a quantization made while loading (source='request') names the quantization= value "
                              "it carries out (requested=)")
        object.__setattr__(self, "details", _plain(self.details))
        self._validate()

    @property
    def pre_quantized(self) -> bool:
        """The weights on disk are quantized already (the checkpoint's ``quantization_config``)."""
        return self.source == "checkpoint"

    @property
    def bytes_per_weight(self) -> float | None:
        """Bytes one quantized weight takes in memory (``None`` when dequantized: the dtype's)."""
        return None if self.dequantized else self.bits / 8

    def number(self, key: str, default: int) -> int:
        """An integer of ``details`` (``default`` when absent)."""
        value = self.details.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"QuantizationChoice.details[{key!r}] must be a number, got {value!r}")
        return int(value)

    @classmethod
    def bitsandbytes(cls, quantization: str, dtype: str | None) -> QuantizationChoice:
        """bitsandbytes at ``quantization`` (``4bit``: NF4 with double quantization, matmuls in the
        plan's ``dtype``, float32 for anything else; ``8bit``: LLM.int8), as intelrt plans it."""
        common: dict[str, Any] = {"requested": quantization, "package": "bitsandbytes",
                                  "extra": "intelrt[bitsandbytes]", "trainable": True}
        if quantization != "4bit":
            return cls("bitsandbytes", 8, scheme="llm.int8", **common)
        compute = dtype if dtype in ("bfloat16", "float16") else "float32"
        return cls("bitsandbytes", 4, quant_type="nf4", compute_dtype=str(compute), double_quant=True, scheme="nf4",
                   **common)


@dataclass(frozen=True)
class DecodeChoice(Payload):
    """How ``Loaded.generate`` decodes one prompt: intelrt's fast loop or transformers' ``generate``.

    For ``fast``: a static KV ``cache``; the step ``compile``\\ d with a torch.compile backend (or
    eager), captured into device ``graphs`` of that kind (``cuda``, ``xpu``, ``hpu``) or not; the
    ``step`` is intelrt's ``compact`` step or the ``model``'s own forward; ``compile_options`` are
    inductor settings; ``attention_kernel`` runs the compact step's decode attention as one
    Triton kernel per layer (the backend says whether its device runs that kernel); ``warmup``
    says when the step is compiled (``DECODE_WARMUPS``; ``None``: as ``compile`` says, from the
    first call). ``step_tokens``: the tokens one engine step computes at most — each decoding row's
    next token plus prompt chunks (vLLM's ``max_num_batched_tokens``), sized for the device and
    model (``None``: the engine's default); ``step_attention``: how such a step attends
    (``STEP_ATTENTIONS``). ``compile_worker``: an ``adaptive`` step's compiled form is built by a
    compile worker process beside the decoding one and swapped in when ready (``False``: it is built
    in the decoding process once that pays).
    """

    method: str
    cache: str | None = None
    graphs: str | None = None
    compile: str | None = None
    step: str | None = None
    compile_options: Mapping[str, JSONValue] | None = None
    attention_kernel: bool = False
    warmup: str | None = None
    compile_worker: bool = False
    step_tokens: int | None = None
    step_attention: str | None = None

    def __post_init__(self) -> None:
        _check(self, "method", (str,), choices=DECODE_METHODS)
        _check(self, "step_tokens", (int,), optional=True)
        _check(self, "step_attention", (str,), optional=True, choices=STEP_ATTENTIONS)
        if self.step_tokens is not None and self.step_tokens < 1:
            _fail(type(self), f"step_tokens must be >= 1, got {self.step_tokens}")
        _check(self, "warmup", (str,), optional=True, choices=DECODE_WARMUPS)
        for name in ("cache", "graphs", "compile"):
            _check(self, name, (str,), optional=True)
        _check(self, "step", (str,), optional=True, choices=DECODE_STEPS)
        _check(self, "compile_options", (Mapping,), optional=True)
        _check(self, "attention_kernel", (bool,))
        _check(self, "compile_worker", (bool,))
        if self.compile_worker and self.warmup != "adaptive":
            _fail(type(self), f"compile_worker builds an adaptive step's compiled form; warmup={self.warmup!r} has none "
                              "to build beside the decoding process")
        if self.compile_options is not None:
            object.__setattr__(self, "compile_options", _plain(self.compile_options))
        if self.method == "generate" and (self.graphs or self.compile or self.attention_kernel or self.warmup
                                          or self.step_tokens or self.step_attention):
            _fail(type(self), "method='generate' runs transformers' generate: graphs, compile, attention_kernel, "
                              "warmup, step_tokens and step_attention belong to the fast loop")
        wants = {"eager": (False, False), "static": (True, False), "compiled": (None, True), "adaptive": (None, True)}
        if self.warmup is not None:
            graphs, compiled = wants[self.warmup]
            if compiled != bool(self.compile) or (graphs is not None and graphs != bool(self.graphs)):
                _fail(type(self), f"warmup={self.warmup!r} goes with "
                                  + ("graphs and " if graphs else "no graphs and " if graphs is False else "")
                                  + ("a compile backend" if compiled else "no compile backend")
                                  + f", not graphs={self.graphs!r}, compile={self.compile!r}")
        self._validate()

    @property
    def fast(self) -> bool:
        return self.method == "fast"

    @property
    def prepared(self) -> str | None:
        """The warm-up the fast loop runs with: ``warmup``, or (a plugin that leaves it unset) the
        one its ``compile`` and ``graphs`` amount to; ``None`` for ``generate``."""
        if not self.fast:
            return None
        return self.warmup or ("compiled" if self.compile else "static" if self.graphs else "eager")

    @classmethod
    def plain_generate(cls) -> DecodeChoice:
        return cls("generate")


@dataclass(frozen=True)
class BatchingChoice(Payload):
    """How a list of prompts is generated.

    ``padded``: prompts go in padded batches of at most ``max_batch`` through ``engine`` (``fast``,
    the decode loop, or ``generate``). ``continuous``: transformers' ``generate_batch`` with
    ``use_graphs`` / ``use_async_batching`` (``None``: its auto) and the KV cache sized from free
    device ``memory`` or from the ``requests`` of the call (``kv_sizing``).
    """

    method: str
    engine: str = "generate"
    max_batch: int | None = None
    use_graphs: bool | None = None
    use_async_batching: bool | None = None
    kv_sizing: str | None = None

    def __post_init__(self) -> None:
        _check(self, "method", (str,), choices=BATCHING_METHODS)
        _check(self, "engine", (str,), choices=BATCHING_ENGINES)
        _check(self, "max_batch", (int,), optional=True)
        _check(self, "use_graphs", (bool,), optional=True)
        _check(self, "use_async_batching", (bool,), optional=True)
        _check(self, "kv_sizing", (str,), optional=True, choices=KV_SIZINGS)
        if self.max_batch is not None and self.max_batch < 1:
            _fail(type(self), f"max_batch must be >= 1, got {self.max_batch}")
        if (self.method == "continuous") != (self.engine == "continuous"):
            _fail(type(self), "method='continuous' and engine='continuous' go together")

    @classmethod
    def padded(cls, engine: str, max_batch: int | None) -> BatchingChoice:
        return cls("padded", engine=engine, max_batch=max_batch)

    @classmethod
    def continuous(cls, *, use_graphs: bool | None = None, use_async_batching: bool | None = None,
                   kv_sizing: str = "memory") -> BatchingChoice:
        return cls("continuous", engine="continuous", use_graphs=use_graphs,
                   use_async_batching=use_async_batching, kv_sizing=kv_sizing)


@dataclass(frozen=True)
class ParallelismChoice(Payload):
    """How a run spreads over processes, one per device (``intelrt launch`` starts them).

    ``training``: ``none`` (one process), ``ddp``, ``fsdp`` (PyTorch FSDP2) or ``deepspeed``
    (ZeRO); ``inference``: ``none`` or ``tensor`` (transformers' tensor parallel plan).
    ``world_size``: the processes the plan is made for. What transformers receives:
    ``fsdp_config`` goes to ``TrainingArguments(fsdp=True, fsdp_config=...)`` (accelerate builds
    FSDP2 from it), ``deepspeed`` to ``TrainingArguments(deepspeed=...)``, and
    ``distributed_config`` to ``from_pretrained(distributed_config=DistributedConfig(...))``: the
    weights sharded as they load (tensor parallel; FSDP2 where accelerate cannot build it).
    ``launch``: the command that starts the ranks, when this process is not one of them.
    """

    training: str
    inference: str = "none"
    world_size: int = 1
    fsdp_config: Mapping[str, JSONValue] | None = None
    deepspeed: Mapping[str, JSONValue] | None = None
    distributed_config: Mapping[str, JSONValue] | None = None
    launch: str | None = None

    def __post_init__(self) -> None:
        _check(self, "training", (str,), choices=TRAINING_STRATEGIES)
        _check(self, "inference", (str,), choices=INFERENCE_STRATEGIES)
        _check(self, "world_size", (int,))
        for name in ("fsdp_config", "deepspeed", "distributed_config"):
            _check(self, name, (Mapping,), optional=True)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _plain(getattr(self, name)))
        _check(self, "launch", (str,), optional=True)
        if self.world_size < 1:
            _fail(type(self), f"world_size must be >= 1, got {self.world_size}")
        if self.fsdp_config is not None and self.training != "fsdp":
            _fail(type(self), f"fsdp_config belongs to training='fsdp', not {self.training!r}")
        if self.deepspeed is not None and self.training != "deepspeed":
            _fail(type(self), f"a DeepSpeed config belongs to training='deepspeed', not {self.training!r}")
        self._validate()

    @property
    def sharded_load(self) -> bool:
        """The weights are sharded across the ranks as they load (``distributed_config``)."""
        return self.distributed_config is not None

    @property
    def processes(self) -> bool:
        """Whether the run needs several processes (a launch) for training or inference."""
        return self.training != "none" or self.inference != "none"

    @classmethod
    def single(cls) -> ParallelismChoice:
        """One process, nothing sharded."""
        return cls("none")


@dataclass(frozen=True)
class Placement(Payload):
    """Where the weights go: ``device_map`` for ``from_pretrained`` (``"xpu"``, ``"xpu:2"``, ``"auto"``,
    ``"hpu"``, ``"cpu"`` …; ``None`` when the weights are sharded across ranks as they load and
    transformers places each rank's shard), and ``max_memory`` (device index → bytes) when accelerate
    may use only some of the devices this process sees."""

    device_map: str | None
    max_memory: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        _check(self, "device_map", (str,), optional=True)
        _check(self, "max_memory", (Mapping,), optional=True)
        if self.max_memory is not None:
            memory = {str(k): v for k, v in self.max_memory.items()}
            if not all(k.isdigit() and isinstance(v, int) and not isinstance(v, bool) and v > 0
                       for k, v in memory.items()):
                _fail(type(self), f"max_memory maps device indices to bytes, got {self.max_memory!r}")
            object.__setattr__(self, "max_memory", memory)

    @classmethod
    def limited(cls, device_map: str, max_memory: Mapping[int, int]) -> Placement:
        """``device_map`` with accelerate limited to the devices in ``max_memory`` (index → bytes)."""
        return cls(device_map, {str(index): int(size) for index, size in max_memory.items()})

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """``device_map``, plus ``max_memory`` with integer device indices, as accelerate wants them."""
        kwargs: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            kwargs["max_memory"] = {int(k): v for k, v in self.max_memory.items()}
        return kwargs


BUCKET_STRATEGIES = ("exponential",)
"""How bucket sizes are spaced: ``exponential`` (vLLM-Gaudi's default, ``VLLM_BUCKETING_STRATEGY=exp``)."""


def _sizes(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, (list, tuple)) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        _fail(type(obj), f"{name} must be a non-empty list of whole numbers > 0, got {value!r}")
    if list(value) != sorted(set(value)):
        _fail(type(obj), f"{name} must ascend without repeats, got {value!r}")
    object.__setattr__(obj, name, tuple(value))


def _prompt_order(shape: tuple[int, int]) -> tuple[int, int, int]:
    """Tokens, then length, then batch: vLLM-Gaudi's order of prompt buckets (``generate_prompt_buckets``)."""
    return shape[0] * shape[1], shape[1], shape[0]


@dataclass(frozen=True)
class Buckets(Payload):
    """The few input shapes a device that compiles one graph per shape pads every batch to (Gaudi:
    lazy-mode graphs, HPU graphs, ``hpu_backend`` compiles), so a run compiles each once — at load,
    when ``warmup`` — and never mid-run.

    A prompt pass is padded to (``prompt_batch_sizes`` × ``prompt_lengths``), never more than
    ``prompt_tokens`` tokens in all (vLLM-Gaudi drops prompt buckets past ``max_num_batched_tokens``,
    ``generate_prompt_buckets``), a decode step to
    (``decode_batch_sizes`` rows × ``decode_blocks`` KV-cache blocks of ``block_size`` tokens), each to
    the equal or next greater bucket (vLLM-Gaudi's bucketing, ``docs/features/bucketing_mechanism.md``);
    a batch beyond the largest bucket runs unpadded, and compiles then. ``warmup``: run every bucket
    at load, largest first (vLLM-Gaudi ``warmup_model``), so that a server compiles nothing while it serves.
    """

    strategy: str
    prompt_batch_sizes: tuple[int, ...]
    prompt_lengths: tuple[int, ...]
    decode_batch_sizes: tuple[int, ...]
    decode_blocks: tuple[int, ...]
    block_size: int
    prompt_tokens: int
    warmup: bool

    def __post_init__(self) -> None:
        _check(self, "strategy", (str,), choices=BUCKET_STRATEGIES)
        for name in ("prompt_batch_sizes", "prompt_lengths", "decode_batch_sizes", "decode_blocks"):
            _sizes(self, name)
        _check(self, "block_size", (int,))
        _check(self, "prompt_tokens", (int,))
        _check(self, "warmup", (bool,))
        if self.block_size < 1:
            _fail(type(self), f"block_size must be >= 1, got {self.block_size}")
        if self.prompt_tokens < self.prompt_lengths[0]:
            _fail(type(self), f"prompt_tokens={self.prompt_tokens} holds no prompt bucket (the shortest is "
                              f"{self.prompt_lengths[0]} tokens)")
        self._validate()

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Every batch size a bucket has, prompt and decode (the rows a batch is padded to)."""
        return tuple(sorted({*self.prompt_batch_sizes, *self.decode_batch_sizes}))

    def prompt_bucket(self, batch: int, length: int) -> tuple[int, int] | None:
        """The (batch, length) a prompt pass of ``batch`` prompts of up to ``length`` tokens is padded to:
        the smallest bucket that holds it; ``None`` beyond every bucket (it runs unpadded, and compiles)."""
        fitting = [(b, n) for b, n in self.prompt_shapes() if b >= batch and n >= length]
        return min(fitting, key=_prompt_order) if fitting else None

    def decode_bucket(self, batch: int, blocks: int) -> tuple[int, int] | None:
        """The (rows, KV-cache blocks) a decode step of ``batch`` rows over ``blocks`` blocks is padded to:
        the smallest bucket that holds it; ``None`` beyond every bucket."""
        fitting = [(b, x) for b, x in self.decode_shapes() if b >= batch and x >= blocks]
        return min(fitting, key=lambda shape: (shape[1], shape[0])) if fitting else None

    def decode_shapes(self) -> list[tuple[int, int]]:
        """Every decode bucket (rows, blocks) a batch can have, largest first: at least one block per row,
        at most a full row's blocks per row (the largest bucket's blocks over its rows), as vLLM-Gaudi's
        ``generate_decode_buckets`` keeps them."""
        per_row = self.decode_blocks[-1] // self.decode_batch_sizes[-1] or 1
        return sorted(((b, x) for b in self.decode_batch_sizes for x in self.decode_blocks if b <= x <= b * per_row),
                      key=lambda shape: (shape[1], shape[0]), reverse=True)

    def prompt_shapes(self) -> list[tuple[int, int]]:
        """Every prompt bucket (batch, length) within ``prompt_tokens``, largest first: the warm-up's order."""
        return sorted(((b, n) for b in self.prompt_batch_sizes for n in self.prompt_lengths
                       if b * n <= self.prompt_tokens), key=_prompt_order, reverse=True)


DecisionValue = JSONValue | Payload
"""What a decision holds: plain JSON (dtype, attention, collective, task) or a payload."""
