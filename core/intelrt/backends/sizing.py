"""How big a model is against a device: the sizing facts every backend's placement and
parallelism rules share. Pure: no torch, no device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hooks.backend import Backend
from ..hooks.concerns import Decided
from ..hooks.model import ModelInfo

FIT_HEADROOM = 1.2  # weights × this must fit: activations and KV cache need room too
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
DEFAULT_CONTEXT = 4096
"""Cache slots per row (prompt plus completion) of intelrt's engine and server unless ``context_length``
says otherwise; never more than the positions the model reads (:func:`model_positions`)."""
POSITION_KEYS = ("max_target_positions", "max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                 "seq_length", "max_seq_len", "max_seq_length")
"""Config keys that bound the positions a model's decoder reads, in the order they are trusted
(Whisper's ``max_target_positions`` first: its ``max_position_embeddings`` is the encoder's;
GPT-2's ``n_positions`` / ``n_ctx``, ChatGLM's ``seq_length``, MPT's ``max_seq_len`` …)."""


def model_positions(config: Any) -> tuple[str, int] | None:
    """(config key, positions): how many positions the model's decoder reads — the first of
    :data:`POSITION_KEYS` its text (decoder) config sets, else its own config's — or ``None`` when
    neither bounds them (relative positions: T5; XLNet's ``-1``). ``config``: a transformers config
    object or its dict (``ModelInfo.config``). The one rule every length check, the engine's and the
    server's context and the command line read."""
    if isinstance(config, Mapping):
        parts: list[Any] = [config.get("text_config") or {}, config]
    else:
        parts = [config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config, config]
    for part in parts:
        for key in POSITION_KEYS:
            value = part.get(key) if isinstance(part, Mapping) else getattr(part, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return key, value
    return None


def context_limit(model: ModelInfo | Any) -> int:
    """The tokens a row holds by default: :data:`DEFAULT_CONTEXT`, or the positions the model reads when
    fewer (``model``: a :class:`ModelInfo`, a transformers config or its dict)."""
    found = model_positions(model.config if isinstance(model, ModelInfo) else model)
    return min(found[1], DEFAULT_CONTEXT) if found is not None else DEFAULT_CONTEXT


def bytes_per_parameter(decided: Decided) -> float | None:
    """Bytes one weight takes under the decisions made so far (quantization, then dtype; a
    quantization dequantized on this device takes the dtype's)."""
    quantized = decided.quantization.bytes_per_weight if decided.quantization is not None else None
    return quantized if quantized is not None else BYTES_PER_PARAM.get(str(decided.dtype))


def smallest_device_memory(backend: Backend) -> int | None:
    """Bytes of the smallest visible device (``None`` when the runtime reports no memory)."""
    memories = [d.total_memory for d in backend.devices if d.total_memory]
    return min(memories) if memories else None


def fits_one_device(backend: Backend, model: ModelInfo, bytes_per_param: float | None = None) -> bool | None:
    """Whether the weights fit the smallest visible device (``None`` when memory is unknown)."""
    memory = smallest_device_memory(backend)
    if memory is None:
        return None
    need = model.weight_bytes if bytes_per_param is None else model.parameter_count * bytes_per_param
    return need * FIT_HEADROOM <= memory


STEP_SECONDS = 0.025
"""How long the matrix work of one engine step may take at the device's bf16 peak: a step carries
every decoding row's next token, so its length is the inter-token latency those rows see while
prompts are prefilled beside them (an 8B model's 1,024-token step: about 30 ms at the 70 % of peak
large matrix products reach on an H200, and the step's attention and host work on top)."""
STEP_TOKEN_GRAIN = 256
MIN_STEP_TOKENS = 512
MAX_STEP_TOKENS = 8192
"""vLLM's ``max_num_batched_tokens`` for an API server on a GPU of 70 GiB or more (its
``EngineArgs._set_default_args``): smaller models stop here, where one step's prompt work is enough
to keep the device busy."""
DEFAULT_STEP_TOKENS = 2048
"""Where the device's throughput is unknown: vLLM's API-server default for smaller GPUs."""
BATCH_STEP_FACTOR = 4
MAX_BATCH_STEP_TOKENS = 16384
"""A list of prompts (``generate``) has no inter-token latency to keep: its steps take up to this
many times the server's tokens, at most vLLM's offline default for large GPUs (16,384)."""


def step_tokens(backend: Backend, model: ModelInfo) -> tuple[int, str]:
    """The tokens one engine step computes at most on ``backend``'s device for ``model`` — each
    decoding row's next token plus prompt chunks — and why: about :data:`STEP_SECONDS` of matrix
    work at the device's bf16 peak (``Backend.matrix_tflops``) for the model's parameters (two
    FLOPs each per token), within :data:`MIN_STEP_TOKENS` .. :data:`MAX_STEP_TOKENS`, in multiples
    of :data:`STEP_TOKEN_GRAIN`; :data:`DEFAULT_STEP_TOKENS` where the peak is unknown."""
    peak = backend.matrix_peak()
    if peak is None:
        where = backend.devices[0].name if backend.devices else backend.name
        return DEFAULT_STEP_TOKENS, (f"engine steps of at most {DEFAULT_STEP_TOKENS} tokens (vLLM's API-server "
                                     f"default for smaller GPUs): no matrix throughput is known for {where}")
    name, tflops = peak
    parameters = max(1, model.parameter_count)
    fitting = STEP_SECONDS * tflops * 1e12 / (2 * parameters)
    tokens = int(min(MAX_STEP_TOKENS, max(MIN_STEP_TOKENS, fitting)) // STEP_TOKEN_GRAIN * STEP_TOKEN_GRAIN)
    return tokens, (f"engine steps of at most {tokens} tokens: about {STEP_SECONDS * 1000:.0f} ms of matrix work at "
                    f"the {name}'s {tflops:g} TFLOP/s bf16 peak for {parameters / 1e9:.2f}B parameters, within "
                    f"{MIN_STEP_TOKENS}-{MAX_STEP_TOKENS} (a step carries every decoding row's next token, so "
                    "it is the wait those rows see while prompts are prefilled beside them)")


def batch_step_tokens(server_tokens: int) -> int:
    """The step budget of a list of prompts given the server's (:data:`BATCH_STEP_FACTOR`)."""
    return max(server_tokens, min(MAX_BATCH_STEP_TOKENS, server_tokens * BATCH_STEP_FACTOR))
