"""Which path one ``generate`` call takes, and why: the one rule, in one place.

The call's facts — task, media, encoder-decoder, output structure (``return_dict_in_generate``), its
keywords — meet the plan's ``decode`` and ``batching`` decisions here. ``Loaded`` gathers the facts
and runs the path named (:func:`route_call`, :func:`route_token_ids`, :func:`route_vision_language`);
``Generator`` asks for the path of a batch of token-id prompts (:func:`route_prompts`). The reasons
are what ``Loaded.last_generation.reason`` shows the user. No torch, no transformers: the rule is
read and tested without a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from ..hooks.payloads import BatchingChoice, Buckets, DecodeChoice

if TYPE_CHECKING:
    from .keywords import DecodeOptions

REASONS = {
    "encoder-decoder": ("an encoder-decoder model: transformers' generate runs its encoder once and its decoder "
                        "loop over the encoder's cached output (intelrt's fast loop decodes decoder-only models)"),
    "multimodal": ("the prompt carries images, audio or other model inputs the processor made, which the model "
                   "merges at the prefill: transformers' generate runs this call (the fast loop decodes after such a "
                   "prefill only for vision-language models loaded for image-text-to-text)"),
    "output": ("return_dict_in_generate=True asks for transformers' own output structure (sequences, scores, "
               "logits …): transformers' generate runs this call and its output is returned as it is"),
    "attention_mask": ("the attention_mask given masks tokens that are not left padding: transformers' generate "
                       "runs this call on the ids and mask as given"),
    "no input_ids": "the call gives no input_ids (the fast loop continues a prompt of token ids)",
}
"""Why a call ran on transformers' ``generate`` (``Loaded.last_generation.reason``)."""
LANGUAGE_MODEL = ("a decoder-only model loaded for text-generation: its token ids take the plan's route "
                  "(the fast loop, continuous batching or transformers' generate)")
"""Why a call goes to the route of token-id prompts (:func:`route_prompts` then names its own reason)."""
IMAGE_PREFILL = "the image prefill by transformers' generate, then the language model's steps"
"""Added to the fast loop's reason for a vision-language call it decodes."""


@dataclass(frozen=True)
class Route:
    """The path for one call: ``fast`` (intelrt's loop), ``continuous`` (``generate_batch``) or
    ``generate`` (``model.generate``), with the reason and the rows per padded batch."""

    path: str
    reason: str
    batch_rows: int


@dataclass(frozen=True)
class GenerationPlan:
    """The plan's ``decode`` and ``batching`` decisions with their reasons: what the decoder follows."""

    decode: DecodeChoice
    decode_reason: str
    batching: BatchingChoice | None = None
    batching_reason: str = "the plan has no batching decision"
    buckets: Buckets | None = None
    """The plan's shape buckets (Gaudi): the engine pads its steps to them and warms each at load."""
    trains_sharded: bool = False
    """The weights are FSDP2 shards that training will update: generate runs under ``no_grad``, not
    ``inference_mode``, whose tensors FSDP's reused all-gather buffers could not be updated from."""


@dataclass(frozen=True)
class CallFacts:
    """What decides one ``generate`` / ``generate_ids`` call's path, gathered by ``Loaded`` before
    any input is prepared."""

    task: str
    """The task the model is loaded for, canonical (``Loaded.task``)."""
    loaded_for: str
    """The task as the plan names it (``plan.task``), said in a reason."""
    encoder_decoder: bool
    language_model: bool
    """The architecture holds a language model (a vision-language model loaded for another task)."""
    decode: DecodeChoice | None
    """The plan's decode decision (``None``: the plan holds none)."""
    decode_reason: str | None
    """Its reason (``None``: no decode decision)."""
    wants_output: bool
    """The call (or the model's generation config) sets ``return_dict_in_generate``."""
    token_ids: bool = False
    """``generate_ids``: a decoder-only language model decodes the ids whatever else the call carries."""
    media: bool = False
    """The call gives ``images=``, ``audio=``, ``videos=`` or model-input tensors."""
    no_prompt: bool = False
    """``generate()`` got no prompt: its inputs are media or tensors (a reason counts it as media)."""
    masked: bool = False
    """The ``attention_mask`` given hides more than left padding (known once the prompts are ids)."""
    chat_media: Callable[[], bool] | None = field(default=None, compare=False)
    """Whether the prompt's chat messages hold image, video or audio parts (``None``: no chat): asked
    only where the rule needs it, since asking checks the messages, and a call refused for another
    reason first keeps that reason."""


CallPath = Literal["language-model", "vision-language", "generate"]


@dataclass(frozen=True)
class CallRoute:
    """Where one call goes first: ``language-model`` (its token ids take :func:`route_prompts`'s
    path), ``vision-language`` (``generate``'s image prefill, then the fast loop where
    :func:`route_vision_language` allows) or ``generate`` (transformers' ``generate`` runs it whole)."""

    path: CallPath
    call: CallFacts

    @property
    def reason(self) -> str:
        """Why this path; for ``generate`` the reason ``last_generation`` shows (read once the call's
        inputs are prepared: a chat's media parts are read only then)."""
        if self.path == "language-model":
            return LANGUAGE_MODEL
        if self.path == "vision-language":
            return self.call.decode_reason or ""
        return _generate_reason(self.call)


def vision_language_decodes(task: str, decode: DecodeChoice | None) -> bool:
    """A vision-language model loaded for image-text-to-text whose language model the plan decodes on
    the fast loop (after ``generate``'s image prefill): its generator steps that language model."""
    return task == "image-text-to-text" and decode is not None and decode.fast


def route_call(call: CallFacts) -> CallRoute:
    """The first choice of a call: a decoder-only language model's text (or, for ``generate_ids``,
    token ids) without media or a request for transformers' output goes to the token-id route; a
    vision-language model the plan decodes on the fast loop is prefilled by ``generate`` first;
    everything else runs on ``generate``."""
    if call.task == "text-generation" and not call.encoder_decoder and (
            call.token_ids or not (call.media or _chat_media(call) or call.wants_output)):
        return CallRoute("language-model", call)
    if vision_language_decodes(call.task, call.decode) and not call.wants_output:
        return CallRoute("vision-language", call)
    return CallRoute("generate", call)


def _chat_media(call: CallFacts) -> bool:
    return call.chat_media is not None and call.chat_media()


def _generate_reason(call: CallFacts) -> str:
    if call.masked:
        return REASONS["attention_mask"]
    if call.wants_output:
        return REASONS["output"]
    if call.encoder_decoder:
        return REASONS["encoder-decoder"]
    if call.task == "image-text-to-text" and call.decode_reason is not None:
        return call.decode_reason
    if call.media or call.no_prompt or _chat_media(call):
        if call.language_model:
            return (f"the call carries images, and the model is loaded for {call.task!r}: transformers' generate "
                    "runs it (intelrt.load(..., task='image-text-to-text') decodes images on the fast loop where "
                    "its language model allows)")
        return REASONS["multimodal"]
    return (f"the model is loaded for {call.loaded_for!r}: intelrt's fast decode loop runs text-generation "
            "models, so transformers' generate runs this call")


def route_token_ids(route: CallRoute, masked: bool) -> CallRoute:
    """The second choice of a ``language-model`` call, once its prompts are token ids: transformers'
    ``generate`` runs it whole where its mask hides more than left padding (the ids and mask as
    given) or it asks for transformers' output structure; else :func:`route_prompts` decides."""
    call = replace(route.call, masked=masked)
    if masked or call.wants_output:
        return CallRoute("generate", call)
    return CallRoute("language-model", call)


def route_prompts(plan: GenerationPlan, prompts: Sequence[Sequence[int]], as_list: bool,
                  options: DecodeOptions | None, unsupported: str | None,
                  positions: Callable[[], tuple[str, int] | None]) -> Route:
    """The path of ``prompts`` (token ids; ``as_list``: the caller passed a list): ``options`` are the
    call's settings the fast loop reads, or ``unsupported`` says why it cannot
    (``keywords.resolve``); ``positions``: the model's position limit (``sizing.model_positions``),
    asked only when the settings fit the loop."""
    if options is not None and unsupported is None:
        unsupported = beyond_the_loop(prompts, options, positions)
    return choose_route(plan, len(prompts), as_list, unsupported)


def beyond_the_loop(prompts: Sequence[Sequence[int]], options: DecodeOptions,
                    positions: Callable[[], tuple[str, int] | None]) -> str | None:
    """Why this call, although its settings are the loop's, goes to transformers' generate."""
    if options.streamer is not None and len(prompts) > 1:
        return "a streamer takes one prompt; transformers' generate runs this call (and refuses a batch)"
    found = positions()
    longest = max(len(p) for p in prompts) + options.max_new_tokens
    if found is not None and found[1] < longest:
        return (f"prompt and new tokens reach position {longest}, past the model's {found[0]}={found[1]}; "
                "transformers' generate runs this call as it would")
    return None


def choose_route(plan: GenerationPlan, count: int, as_list: bool, unsupported: str | None) -> Route:
    """Route ``count`` prompts (``as_list``: the caller passed a list) given the plan and, when the
    fast loop cannot honour the call's settings, ``unsupported`` saying why."""
    fast = plan.decode.fast
    if not as_list:
        if fast and unsupported is None:
            return Route("fast", plan.decode_reason, 1)
        return Route("generate", unsupported or plan.decode_reason, 1)
    batching = plan.batching
    rows = int(batching.max_batch or count) if batching is not None else count
    reason = plan.batching_reason
    if batching is not None and batching.method == "continuous":
        if unsupported is None:
            return Route("continuous", reason, count)
        return Route("generate", f"continuous batching would drop settings it cannot apply: {unsupported}",
                     rows if batching.max_batch else count)
    if batching is not None and batching.engine == "fast" and fast and unsupported is None:
        return Route("fast", reason, rows)
    return Route("generate", unsupported or (reason if not fast else plan.decode_reason), rows)


def route_vision_language(loop: Route | None) -> Route:
    """A vision-language call's path once its prompts' route is known (``loop``; ``None``: the call
    gives no ``input_ids``): the fast loop after ``generate``'s image prefill where that route is
    ``fast``, else ``generate`` with its reason."""
    if loop is None:
        return Route("generate", REASONS["no input_ids"], 1)
    if loop.path != "fast":
        return Route("generate", loop.reason, loop.batch_rows)
    return Route("fast", f"{loop.reason}; {IMAGE_PREFILL}", loop.batch_rows)
