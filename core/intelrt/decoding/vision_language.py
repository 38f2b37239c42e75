"""The fast decode loop for a vision-language model: transformers' prefill, then the language model's steps.

A vision-language model (LLaVA, Mistral-3, Gemma-3, Aya-Vision, InternVL …) reads the images
once, in its prefill: the vision tower, the projector and the merge of image features into the
prompt's embeddings — and whatever mask the model gives its image tokens (Gemma-3's bidirectional
image blocks). After that, each new token is a plain step of its language model. So:

* **the prefill is transformers' own** ``generate``, for one new token, over the processor's
  inputs (``return_dict_in_generate``, ``output_logits``) into a ``DynamicCache`` of full layers:
  exactly the prefill plain ``generate`` runs, masks, positions and token types included;
* its keys and values (each row's real tokens: left padding dropped) and its raw next-token logits
  go to the engine as a :class:`~intelrt.decoding.prefilled.PrefilledPrompt`, and
* every later step is the language model's, on the engine (``inflight.py``): the compact step where
  its family is one of ``families.py``'s, over :func:`language_model` — the model's own decoder
  and LM head as the causal LM transformers maps its text config to, no weight copied.

A decode step at position ``p`` is the language model's only if the prefill gave the prompt's
tokens the positions 0, 1, 2 …; PaliGemma (from 1) and M-RoPE models (Qwen2-VL's 3-D positions)
do not. The plan keeps the known ones on ``generate`` (``backends/decode_rules.py``); the prefill
here also records the positions the language model was given and refuses any other numbering
(:class:`PrefillMisfit`), so a model nobody listed is never decoded wrong.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Mapping
from typing import Any

from .prefilled import PrefilledPrompt


class PrefillMisfit(Exception):
    """The prefill cannot be handed to the engine: it numbered the prompt's positions other than
    0, 1, 2 …, or its cache holds no keys and values (the message says which)."""


def language_model(model: Any) -> Any:
    """``model``'s language model as a causal LM of the class transformers maps its text config to
    (``MODEL_FOR_CAUSAL_LM_MAPPING``: ``Qwen2ForCausalLM`` for a LLaVA over Qwen2), holding the
    model's own decoder and LM head: the same modules and parameters, nothing copied. The decode
    engine steps it as it steps any causal LM."""
    import torch
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    text = model.config.get_text_config(decoder=True)
    causal: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(text)]
    with torch.device("meta"):
        shell = causal(copy.deepcopy(text))  # a copy: building a model may adjust its config's attention
    shell.model = model.get_decoder()
    shell.lm_head = model.get_output_embeddings()
    shell.config = text
    shell.generation_config = model.generation_config
    left = [name for name, tensor in [*shell.named_parameters(), *shell.named_buffers()] if tensor.is_meta]
    if left:
        raise ValueError(f"{causal.__name__} over {type(model).__name__}'s language model has parts the model does "
                         f"not hold: {', '.join(left[:4])}")
    return shell.eval()


def prefill(model: Any, inputs: Mapping[str, Any], pad_token_id: int) -> list[PrefilledPrompt]:
    """Each row's prefill by transformers' ``generate`` (one new token) over ``inputs`` — the
    processor's output, left-padded — as the engine takes it. :class:`PrefillMisfit` when the
    language model was not given positions 0, 1, 2 … of each row's tokens."""
    import inspect

    import torch
    from transformers import DynamicCache

    decoder = model.get_decoder()
    seen: dict[str, Any] = {}

    def record(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        if not seen:
            seen.update(position_ids=kwargs.get("position_ids"), cache_position=kwargs.get("cache_position"))

    cache = DynamicCache()  # full layers: a sliding-window layer keeps every key (the engine's mask limits it)
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    hook = decoder.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.inference_mode():
            output = model.generate(**inputs, max_new_tokens=1, do_sample=False, num_beams=1,
                                    return_dict_in_generate=True, output_logits=True, cache_implementation=None,
                                    pad_token_id=pad_token_id, **{name: cache})
    finally:
        hook.remove()
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask")
    real = (mask if mask is not None else torch.ones_like(ids)).bool()
    _check_positions(seen, real)
    logits = output.logits[0]
    layers: list[tuple[Any, Any]] = [(getattr(layer, "keys", None), getattr(layer, "values", None))
                                     for layer in cache.layers]
    if any(k is None or v is None for k, v in layers):
        raise PrefillMisfit("the prefill's cache holds layers without keys and values (linear attention)")
    prompts = []
    for row in range(ids.shape[0]):
        where = real[row].nonzero().squeeze(-1)
        keys = [k[row, :, where].transpose(0, 1).contiguous() for k, _ in layers]
        values = [v[row, :, where].transpose(0, 1).contiguous() for _, v in layers]
        # a fresh digest: two prompts never share a handed prefill's blocks (their images may differ)
        prompts.append(PrefilledPrompt(keys, values, logits[row].float(), secrets.token_bytes(16)))
    return prompts


def _check_positions(seen: Mapping[str, Any], real: Any) -> None:
    """Each row's real tokens had positions 0 .. n - 1 in the prefill (``PrefillMisfit`` if not)."""
    import torch

    positions = seen.get("position_ids")
    if positions is None:
        positions = seen.get("cache_position")
        if positions is None:
            raise PrefillMisfit("the language model was given neither position_ids nor cache_position")
        positions = positions.reshape(1, -1)
    if positions.dim() != 2:
        raise PrefillMisfit(f"the language model's positions have {positions.dim()} dimensions (multimodal "
                              "rotary positions), not one number per token")
    positions = positions.expand(real.shape[0], -1)
    for row in range(real.shape[0]):
        got = positions[row][real[row]]
        if not torch.equal(got.cpu(), torch.arange(got.shape[0])):
            raise PrefillMisfit(f"the prefill gave row {row}'s tokens positions {got[:4].tolist()} …, not "
                                  "0, 1, 2 …: its decode steps are not the language model's plain ones")
