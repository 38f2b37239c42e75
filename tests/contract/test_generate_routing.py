"""The one rule that routes a ``generate`` call (``decoding/routing.py``, issue 41): each combination
of the call's facts — task, media, encoder-decoder, ``return_dict_in_generate``, a mask, the
keywords the loop honours — and the plan's decisions gives the path that runs and the reason
``Loaded.last_generation.reason`` shows. Model-free: no torch, no transformers model."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from intelrt.decoding.keywords import DecodeOptions
from intelrt.decoding.routing import (
    IMAGE_PREFILL,
    LANGUAGE_MODEL,
    REASONS,
    CallFacts,
    GenerationPlan,
    Route,
    route_call,
    route_prompts,
    route_token_ids,
    route_vision_language,
)
from intelrt.hooks.payloads import BatchingChoice, DecodeChoice

FAST = DecodeChoice("fast", cache="static")
FAST_REASON = "the fast loop: static KV cache, compiled step"
PLAIN_REASON = "this model's positions start at 1: transformers' generate decodes it"


def facts(task: str = "text-generation", *, loaded_for: str | None = None, encoder_decoder: bool = False,
          language_model: bool = False, decode: DecodeChoice | None = FAST, decode_reason: str | None = FAST_REASON,
          wants_output: bool = False, token_ids: bool = False, media: bool = False, no_prompt: bool = False,
          chat_media: Callable[[], bool] | None = None) -> CallFacts:
    return CallFacts(task, loaded_for or task, encoder_decoder, language_model, decode, decode_reason, wants_output,
                     token_ids=token_ids, media=media, no_prompt=no_prompt, chat_media=chat_media)


def never_asked() -> bool:
    raise AssertionError("the rule read a chat's media parts it does not need")


MULTIMODAL_LM = ("the call carries images, and the model is loaded for 'image-to-text': transformers' generate runs "
                 "it (intelrt.load(..., task='image-text-to-text') decodes images on the fast loop where its "
                 "language model allows)")


@pytest.mark.parametrize(("call", "path", "reason"), [
    pytest.param(facts(), "language-model", LANGUAGE_MODEL, id="text"),
    pytest.param(facts(wants_output=True), "generate", REASONS["output"], id="return_dict_in_generate"),
    pytest.param(facts(media=True), "generate", REASONS["multimodal"], id="images-to-a-language-model"),
    pytest.param(facts(chat_media=lambda: True), "generate", REASONS["multimodal"], id="chat-with-image-parts"),
    pytest.param(facts(chat_media=lambda: False), "language-model", LANGUAGE_MODEL, id="chat-of-text"),
    pytest.param(facts(token_ids=True, media=True, wants_output=True, chat_media=never_asked), "language-model",
                 LANGUAGE_MODEL, id="ids-go-to-the-language-model-whatever-they-carry"),
    pytest.param(facts(encoder_decoder=True, chat_media=never_asked), "generate", REASONS["encoder-decoder"],
                 id="encoder-decoder"),
    pytest.param(facts("text2text-generation", encoder_decoder=True, wants_output=True, chat_media=never_asked),
                 "generate", REASONS["output"], id="output-before-encoder-decoder"),
    pytest.param(facts("image-text-to-text", media=True), "vision-language", FAST_REASON,
                 id="vision-language-on-the-loop"),
    pytest.param(facts("image-text-to-text", wants_output=True), "generate", REASONS["output"],
                 id="vision-language-asking-for-output"),
    pytest.param(facts("image-text-to-text", decode=DecodeChoice.plain_generate(), decode_reason=PLAIN_REASON,
                       media=True), "generate", PLAIN_REASON, id="vision-language-the-plan-keeps-off-the-loop"),
    pytest.param(facts("image-to-text", language_model=True, media=True, decode=None, decode_reason=None),
                 "generate", MULTIMODAL_LM, id="images-to-a-vlm-loaded-for-another-task"),
    pytest.param(facts("image-to-text", language_model=True, no_prompt=True, decode=None, decode_reason=None),
                 "generate", MULTIMODAL_LM, id="no-prompt-counts-as-media"),
    pytest.param(facts("text-classification", loaded_for="sequence-classification", chat_media=lambda: False),
                 "generate", "the model is loaded for 'sequence-classification': intelrt's fast decode loop runs "
                 "text-generation models, so transformers' generate runs this call", id="another-task-named-as-loaded"),
])
def test_each_call_gets_its_path_and_reason(call: CallFacts, path: str, reason: str) -> None:
    route = route_call(call)
    assert (route.path, route.reason) == (path, reason)


def test_the_path_is_chosen_without_reading_a_chats_media_it_does_not_need() -> None:
    """A call another rule refuses first (a model that does not generate) keeps that refusal: the
    chat's parts are read, and checked, only when the reason is."""
    route = route_call(facts("text-classification", chat_media=never_asked))
    assert route.path == "generate"
    with pytest.raises(AssertionError, match="does not need"):
        _ = route.reason


@pytest.mark.parametrize(("masked", "wants_output", "path", "reason"), [
    (False, False, "language-model", LANGUAGE_MODEL),
    (False, True, "generate", REASONS["output"]),
    (True, False, "generate", REASONS["attention_mask"]),
    (True, True, "generate", REASONS["attention_mask"]),
])
def test_token_ids_run_whole_on_generate_when_masked_or_asking_for_output(masked: bool, wants_output: bool,
                                                                          path: str, reason: str) -> None:
    route = route_token_ids(route_call(facts(token_ids=True, wants_output=wants_output)), masked=masked)
    assert (route.path, route.reason) == (path, reason)


def options(max_new_tokens: int = 8, streamer: object = None) -> DecodeOptions:
    return DecodeOptions(max_new_tokens, False, 1.0, 0, 1.0, (2,), 0, streamer=streamer)


def no_positions() -> tuple[str, int] | None:
    return None


PLAN = GenerationPlan(FAST, FAST_REASON)
CONTINUOUS = GenerationPlan(FAST, FAST_REASON, BatchingChoice("continuous", engine="continuous"), "continuous batching for lists")
PADDED = GenerationPlan(FAST, FAST_REASON, BatchingChoice("padded", engine="fast", max_batch=4),
                        "padded batches of up to 4 prompts on the fast loop")
PLAIN = GenerationPlan(DecodeChoice.plain_generate(), PLAIN_REASON)
MISFIT = "repetition_penalty=1.2: the fast loop does greedy search and temperature/top-k/top-p sampling only"


@pytest.mark.parametrize(("plan", "count", "as_list", "misfit", "expected"), [
    pytest.param(PLAN, 1, False, None, Route("fast", FAST_REASON, 1), id="one-prompt-on-the-loop"),
    pytest.param(PLAN, 1, False, MISFIT, Route("generate", MISFIT, 1), id="a-setting-the-loop-does-not-do"),
    pytest.param(PLAIN, 1, False, None, Route("generate", PLAIN_REASON, 1), id="the-plan-decodes-with-generate"),
    pytest.param(CONTINUOUS, 3, True, None, Route("continuous", "continuous batching for lists", 3),
                 id="a-list-continuously-batched"),
    pytest.param(CONTINUOUS, 3, True, MISFIT,
                 Route("generate", f"continuous batching would drop settings it cannot apply: {MISFIT}", 3),
                 id="continuous-batching-would-drop-a-setting"),
    pytest.param(PADDED, 6, True, None, Route("fast", "padded batches of up to 4 prompts on the fast loop", 4),
                 id="padded-batches-on-the-loop"),
    pytest.param(PLAN, 2, True, None, Route("generate", FAST_REASON, 2), id="a-list-without-a-batching-decision"),
])
def test_prompts_get_the_plans_route_unless_a_setting_sends_them_to_generate(
        plan: GenerationPlan, count: int, as_list: bool, misfit: str | None, expected: Route) -> None:
    prompts = [[1, 2, 3]] * count

    def positions() -> tuple[str, int] | None:
        if misfit is not None:
            raise AssertionError("the position limit was asked of a call the loop refused already")
        return None

    route = route_prompts(plan, prompts, as_list, None if misfit else options(), misfit, positions)
    assert route == expected


def test_a_streamer_with_several_prompts_goes_to_generate() -> None:
    route = route_prompts(PADDED, [[1], [2]], True, options(streamer=object()), None, no_positions)
    assert route == Route("generate", "a streamer takes one prompt; transformers' generate runs this call (and "
                          "refuses a batch)", 4)


def test_a_prompt_that_runs_past_the_models_positions_goes_to_generate() -> None:
    route = route_prompts(PLAN, [[1] * 60], False, options(max_new_tokens=8), None,
                          lambda: ("max_position_embeddings", 64))
    assert route == Route("generate", "prompt and new tokens reach position 68, past the model's "
                          "max_position_embeddings=64; transformers' generate runs this call as it would", 1)
    assert route_prompts(PLAN, [[1] * 56], False, options(max_new_tokens=8), None,
                         lambda: ("max_position_embeddings", 64)).path == "fast"


@pytest.mark.parametrize(("loop", "expected"), [
    pytest.param(None, Route("generate", REASONS["no input_ids"], 1), id="no-input-ids"),
    pytest.param(Route("generate", MISFIT, 1), Route("generate", MISFIT, 1), id="the-loop-refuses-the-settings"),
    pytest.param(Route("continuous", "continuous batching for lists", 2),
                 Route("generate", "continuous batching for lists", 2), id="continuous-is-not-the-loop"),
    pytest.param(Route("fast", FAST_REASON, 2), Route("fast", f"{FAST_REASON}; {IMAGE_PREFILL}", 2),
                 id="decoded-after-the-image-prefill"),
])
def test_a_vision_language_call_decodes_on_the_loop_only_where_its_prompts_would(
        loop: Route | None, expected: Route) -> None:
    assert route_vision_language(loop) == expected


def module_level_imports(module: str) -> set[str]:
    """The modules importing ``module`` runs (its packages' ``__init__`` and the imports at its top
    level, ``TYPE_CHECKING`` blocks left out), followed through intelrt's own modules."""
    seen: set[str] = set()
    pending = [module]
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for prefix in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if prefix in seen or not prefix.startswith("intelrt"):
                seen.add(prefix)
                continue
            seen.add(prefix)
            spec = importlib.util.find_spec(prefix)
            if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
                continue
            package = prefix if spec.submodule_search_locations is not None else prefix.rpartition(".")[0]
            for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
                if isinstance(node, ast.Import):
                    pending.extend(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                        if node.level else node.module or ""
                    pending.append(base)
    return seen


def test_the_rule_imports_no_torch_or_transformers() -> None:
    """The rule is read without a model: importing it runs no import of either library."""
    heavy = sorted(m for m in module_level_imports("intelrt.decoding.routing")
                   if m.split(".")[0] in ("torch", "transformers"))
    assert heavy == []
    assert "torch" in module_level_imports("intelrt.decoding.triton_attention")  # the walk sees one that is there
