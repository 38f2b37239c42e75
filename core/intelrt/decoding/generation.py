"""Run one ``Loaded.generate`` call on the path the plan and the call's settings pick.

Returns the new tokens of every prompt (up to and including its first EOS) and a report naming
the path taken and why — ``Loaded.last_generation`` shows it to the user.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..backends.sizing import model_positions
from ..hooks.backend import Backend
from ..hooks.payloads import DecodeChoice
from .engine import FastDecoder
from .keywords import DecodeOptions, resolve
from .prefilled import PrefilledPrompt
from .report import GenerationReport
from .routing import GenerationPlan, Route, route_prompts
from .tuning import DecodeTuning

__all__ = ["GenerationReport", "Generator", "left_pad", "until_eos"]

log = logging.getLogger(__name__)

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


Capturer = Callable[..., Callable[[], object]]


def decoder_class(choice: DecodeChoice, tuning: DecodeTuning) -> type[FastDecoder]:
    """The fast decoder for the plan's decode decision: an ``adaptive`` warm-up whose compiled step a
    compile worker builds (``DecodeChoice.compile_worker``) compiles in the background
    (``background.py``) unless ``DecodeTuning.background_compile`` is off."""
    if choice.prepared == "adaptive" and choice.compile_worker and tuning.background_compile:
        from .background import BackgroundCompilingDecoder

        return BackgroundCompilingDecoder
    return FastDecoder


class Generator:
    """Holds the fast decoder (its captured graphs survive between calls) for one loaded model.

    ``capturer``: called once, when the fast loop first runs, for the backend's device-graph
    capturer of the plan's graph kind (``None``: no graphs)."""

    def __init__(self, model: Any, plan: GenerationPlan, capturer: Callable[[], Capturer | None] | None = None,
                 tuning: DecodeTuning | None = None, *, backend: Backend) -> None:
        self.model = model
        self.plan = plan
        self.backend = backend
        self._capturer = capturer
        self.tuning = tuning or DecodeTuning()
        self._decoder: FastDecoder | None = None

    def decoder(self) -> FastDecoder:
        if self._decoder is None:
            capturer = self._capturer() if self.plan.decode.graphs and self._capturer is not None else None
            self._decoder = decoder_class(self.plan.decode, self.tuning)(self.model, self.plan.decode, capturer,
                                                                         self.tuning, backend=self.backend)
            if self.plan.buckets is not None:
                self._decoder.pad_to(self.plan.buckets)
        return self._decoder

    def route(self, prompts: Sequence[Sequence[int]], as_list: bool, kwargs: Mapping[str, Any]
              ) -> tuple[Route, DecodeOptions | None]:
        """The path for this call (``routing.route_prompts``) and, where the fast loop or continuous
        batching runs it, the options they run with (``None``: ``generate`` runs it)."""
        options, unsupported = resolve(getattr(self.model, "generation_config", None), kwargs)
        route = route_prompts(self.plan, prompts, as_list, options, unsupported,
                              lambda: model_positions(self.model.config))
        return route, options if route.path != "generate" else None

    def run(self, prompts: Sequence[Sequence[int]], as_list: bool, kwargs: Mapping[str, Any]
            ) -> tuple[list[list[int]], GenerationReport]:
        """New tokens per prompt and the report of what ran."""
        route, options = self.route(prompts, as_list, kwargs)
        report = GenerationReport(route.path, route.reason, len(prompts))
        if route.path == "fast" and options is not None:
            ran = self.fast_or_failure(prompts, route, options, report)
            if isinstance(ran, str):
                report = GenerationReport("generate", ran, len(prompts))
                outputs = self._generate(prompts, Route("generate", ran, route.batch_rows), kwargs, report)
            else:
                outputs, report = ran
        elif route.path == "continuous" and options is not None and self.plan.batching is not None:
            from .continuous import generate_continuous

            outputs = generate_continuous(self.model, prompts, options, self.plan.batching)
            report.batches = 1
        else:
            outputs = self._generate(prompts, route, kwargs, report)
        if report.notes:
            log.warning("intelrt generate: %s", "; ".join(report.notes))
        return outputs, report

    def fast_or_failure(self, prompts: Sequence[Sequence[int]], route: Route, options: DecodeOptions,
                        report: GenerationReport, prefilled: Sequence[PrefilledPrompt] | None = None
                        ) -> tuple[list[list[int]], GenerationReport] | str:
        """:meth:`fast`'s tokens and report, or why it failed (a str: the caller runs transformers' generate
        instead, and says so). A call with a streamer raises: tokens may have reached it already,
        and running again would repeat them."""
        try:
            return self.fast(prompts, route, options, report, prefilled)
        except Exception as exc:  # noqa: BLE001 - this call runs on transformers' generate instead
            if options.streamer is not None:
                raise
            log.warning("intelrt fast decode failed (%s: %s); transformers' generate runs this call",
                        type(exc).__name__, str(exc)[:300])
            log.debug("intelrt fast decode failure", exc_info=exc)
            return (f"the fast decode loop failed ({type(exc).__name__}: {str(exc)[:200]}); transformers' generate "
                    "ran this call")

    def fast(self, prompts: Sequence[Sequence[int]], route: Route, options: DecodeOptions,
             report: GenerationReport, prefilled: Sequence[PrefilledPrompt] | None = None
             ) -> tuple[list[list[int]], GenerationReport]:
        """Every prompt through one run of the decode engine, at most ``route.batch_rows`` decoding
        at once (the others join as rows free up); ``prefilled``: their prefills, computed outside
        the engine (a vision-language model's). The report is the engine's, with the call's route
        (``report``: its path, reason and notes)."""
        outputs, ran = self.decoder().generate(prompts, options.params(), rows=route.batch_rows,
                                               streamer=options.streamer, prefilled=prefilled)
        return outputs, replace(ran, path=report.path, reason=report.reason, prompts=report.prompts,
                                notes=sorted(set(report.notes) | set(ran.notes)))

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
