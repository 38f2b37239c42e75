"""Run one ``Loaded.generate`` call on the path the plan and the call's settings pick.

Returns the new tokens of every prompt (up to and including its first EOS) and a report naming
the path taken and why — ``Loaded.last_generation`` shows it to the user.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .engine import FastDecoder
from .keywords import DecodeOptions, resolve
from .routing import GenerationPlan, Route, choose_route
from .tuning import DecodeTuning

log = logging.getLogger(__name__)

KV_MEMORY_SHARE = 0.7
"""Share of free device memory the fast loop's KV caches may take: a padded batch's, a server's in-flight batch's."""


def left_pad(prompts: Sequence[Sequence[int]], pad: int, device: Any) -> tuple[Any, Any]:
    """Left-padded ``input_ids`` and ``attention_mask`` for decoder-only generation."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def until_eos(rows: list[list[int]], eos: Sequence[int]) -> list[list[int]]:
    """Each row cut after its first EOS (the padding ``generate`` adds after it goes too)."""
    stops = set(eos)
    cut = []
    for row in rows:
        end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        cut.append(row[:end])
    return cut


def kv_bytes_per_row(config: Any, length: int, dtype_bytes: int) -> int:
    """Bytes of static KV cache one row of ``length`` tokens needs (0 when the config is unusual)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    heads = int(getattr(text, "num_key_value_heads", 0) or getattr(text, "num_attention_heads", 0) or 0)
    head_dim = getattr(text, "head_dim", None) or (
        int(getattr(text, "hidden_size", 0) or 0) // max(1, int(getattr(text, "num_attention_heads", 1) or 1)))
    return 2 * layers * heads * int(head_dim) * length * dtype_bytes


def free_device_memory(device: Any) -> int | None:
    """Free bytes of ``device``'s memory (``None``: unknown, e.g. on the CPU)."""
    import torch

    module = getattr(torch, device.type, None)
    info = getattr(module, "mem_get_info", None)
    if info is None or device.type == "cpu":
        return None
    try:
        free, _total = info(device)
    except Exception:  # noqa: BLE001 - sizing is advisory; the plan's cap still applies
        return None
    return int(free)


def rows_that_fit(model: Any, length: int) -> int | None:
    """How many rows of KV cache fit the free memory of the model's device (``None``: unknown)."""
    free = free_device_memory(model.device)
    if free is None:
        return None
    per_row = kv_bytes_per_row(model.config, length, model.dtype.itemsize) or 1
    return max(1, int(free * KV_MEMORY_SHARE // per_row))


@dataclass
class GenerationReport:
    """What one ``Loaded.generate`` call did (``Loaded.last_generation``)."""

    path: str
    """``fast`` (intelrt's decode loop), ``continuous`` (transformers' ``generate_batch``) or
    ``generate`` (``model.generate``)."""
    reason: str
    prompts: int
    batches: int = 0
    graphs: str | None = None
    """The device graphs the fast loop replayed (``cuda``, ``xpu``, ``hpu``), if any."""
    compiled: str | None = None
    """The compile backend of the fast loop's step, if any."""
    step: str | None = None
    """``compact`` (intelrt's compact step) or ``model`` (the model's own forward)."""
    attention_kernel: bool = False
    """The compact step's decode attention ran as one Triton kernel per layer."""
    step_reason: str | None = None
    """Why a planned compact step ran as the model's own forward (adapters, a replaced module …)."""
    captured: bool = False
    """A device graph was captured during this call (the first call of a shape)."""
    warmup: str | None = None
    """How the fast loop's step was prepared: ``eager``, ``static`` (captured in a device graph, not
    compiled) or ``compiled``."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Capturer = Callable[..., Callable[[], object]]


class Generator:
    """Holds the fast decoder (its captured graphs survive between calls) for one loaded model.

    ``capturer``: called once, when the fast loop first runs, for the backend's device-graph
    capturer of the plan's graph kind (``None``: no graphs)."""

    def __init__(self, model: Any, plan: GenerationPlan, capturer: Callable[[], Capturer | None] | None = None,
                 tuning: DecodeTuning | None = None) -> None:
        self.model = model
        self.plan = plan
        self._capturer = capturer
        self.tuning = tuning or DecodeTuning()
        self._decoder: FastDecoder | None = None

    def decoder(self) -> FastDecoder:
        if self._decoder is None:
            capturer = self._capturer() if self.plan.decode.graphs and self._capturer is not None else None
            self._decoder = FastDecoder(self.model, self.plan.decode, capturer, self.tuning)
        return self._decoder

    def run(self, prompts: Sequence[Sequence[int]], as_list: bool, kwargs: Mapping[str, Any]
            ) -> tuple[list[list[int]], GenerationReport]:
        """New tokens per prompt and the report of what ran."""
        options, unsupported = resolve(getattr(self.model, "generation_config", None), kwargs)
        if options is not None and unsupported is None:
            unsupported = self._beyond_the_loop(prompts, options)
            options = None if unsupported else options
        route = choose_route(self.plan, len(prompts), as_list, unsupported)
        report = GenerationReport(route.path, route.reason, len(prompts))
        if route.path == "fast" and options is not None:
            try:
                outputs = self._fast(prompts, route, options, report)
            except Exception as exc:  # noqa: BLE001 - this call runs on transformers' generate instead
                if options.streamer is not None:
                    raise  # tokens may have reached the streamer already: running again would repeat them
                log.warning("intelrt fast decode failed (%s: %s); transformers' generate runs this call",
                            type(exc).__name__, str(exc)[:300])
                log.debug("intelrt fast decode failure", exc_info=exc)
                report = GenerationReport("generate", f"the fast decode loop failed ({type(exc).__name__}: "
                                          f"{str(exc)[:200]}); transformers' generate ran this call", len(prompts))
                outputs = self._generate(prompts, Route("generate", report.reason, route.batch_rows), kwargs,
                                         report)
        elif route.path == "continuous" and options is not None and self.plan.batching is not None:
            from .continuous import generate_continuous

            outputs = generate_continuous(self.model, prompts, options, self.plan.batching)
            report.batches = 1
        else:
            outputs = self._generate(prompts, route, kwargs, report)
        if report.notes:
            log.warning("intelrt generate: %s", "; ".join(report.notes))
        return outputs, report

    def _beyond_the_loop(self, prompts: Sequence[Sequence[int]], options: DecodeOptions) -> str | None:
        """Why this call, although its settings are the loop's, goes to transformers' generate."""
        if options.streamer is not None and len(prompts) > 1:
            return "a streamer takes one prompt; transformers' generate runs this call (and refuses a batch)"
        limit = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        longest = max(len(p) for p in prompts) + options.max_new_tokens
        if isinstance(limit, int) and 0 < limit < longest:
            return (f"prompt and new tokens reach position {longest}, past the model's max_position_embeddings="
                    f"{limit}; transformers' generate runs this call as it would")
        return None

    def _fast(self, prompts: Sequence[Sequence[int]], route: Route, options: DecodeOptions,
              report: GenerationReport) -> list[list[int]]:
        decoder = self.decoder()
        rows = route.batch_rows
        longest = max(len(p) for p in prompts) + options.max_new_tokens
        fit = rows_that_fit(self.model, longest)
        if fit is not None and fit < rows:
            report.notes.append(f"padded batches of {fit} rows: the KV cache of {rows} rows would not fit "
                                "free device memory")
            rows = fit
        outputs: list[list[int]] = []
        for start in range(0, len(prompts), rows):
            chunk = prompts[start:start + rows]
            input_ids, mask = left_pad(chunk, options.pad_token_id, self.model.device)
            tokens, decoded = decoder.decode(input_ids, mask, options)
            outputs.extend(until_eos(tokens.tolist(), options.eos_token_ids))
            report.batches += 1
            report.captured = report.captured or decoded.captured
            report.graphs, report.compiled, report.step = decoded.graphs, decoded.compiled, decoded.step
            report.attention_kernel, report.step_reason = decoded.attention_kernel, decoded.step_reason
            report.warmup = decoded.warmup
            report.notes = sorted(set(report.notes) | set(decoded.notes))
        return outputs

    def _generate(self, prompts: Sequence[Sequence[int]], route: Route, kwargs: Mapping[str, Any],
                  report: GenerationReport) -> list[list[int]]:
        import torch

        pad = kwargs.get("pad_token_id")
        if pad is None:
            config = getattr(self.model, "generation_config", None)
            pad = getattr(config, "pad_token_id", None)
            if pad is None:
                eos = getattr(config, "eos_token_id", None)
                pad = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
        eos_ids = kwargs.get("eos_token_id", getattr(getattr(self.model, "generation_config", None),
                                                     "eos_token_id", None))
        eos = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids or [])
        outputs: list[list[int]] = []
        for start in range(0, len(prompts), route.batch_rows):
            chunk = prompts[start:start + route.batch_rows]
            input_ids, mask = left_pad(chunk, int(pad), self.model.device)
            with torch.no_grad() if self.plan.trains_sharded else torch.inference_mode():
                result = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            sequences = result.sequences if hasattr(result, "sequences") else result
            outputs.extend(until_eos(sequences[:, input_ids.shape[1]:].tolist(), eos))
            report.batches += 1
        return outputs
