"""Greedy decoding twice on one loaded model: plain ``model.generate`` (the reference every fast
path is compared with) and intelrt's ``generate_ids``, both on left-padded prompts without an
end-of-sequence token, so every row runs its full length."""

from __future__ import annotations

import intelrt


def plain_generate(loaded: intelrt.Loaded, prompts: list[str], max_new_tokens: int = 16) -> list[list[int]]:
    import torch

    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "left"
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = loaded.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
    return out[:, inputs["input_ids"].shape[1]:].tolist()


def ours(loaded: intelrt.Loaded, prompts: list[str], max_new_tokens: int = 16) -> list[list[int]]:
    ids = [loaded.tokenizer(p)["input_ids"] for p in prompts]
    result = loaded.generate_ids(ids, max_new_tokens=max_new_tokens, eos_token_id=None)
    assert isinstance(result[0], list)
    return result  # type: ignore[return-value]


def eager_generate(loaded: intelrt.Loaded, prompts: list[str], max_new_tokens: int = 16) -> list[list[int]]:
    """``plain_generate`` on a model loaded with ``compile="inductor"``, which compiles the model's
    forward in place (``nn.Module.compile``, ``intelrt.runtime.compiling.compile``): the reference
    runs that forward eagerly (``torch.compiler.set_stance("force_eager")``), the checkpoint's own
    code, rather than compiling it a second time for each prompt length (12 to 25 s a model on
    the CPU, and a compiled reference is a weaker one)."""
    import torch

    with torch.compiler.set_stance("force_eager"):
        return plain_generate(loaded, prompts, max_new_tokens)
