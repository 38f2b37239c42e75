"""intelrt's compact decode step on the CPU (issue 6): which models it serves, that it follows the
model's weights when they change, and that it steps aside — with a note — for modules it does not
reproduce. Every output is compared with plain ``model.generate`` on the same model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from greedy import eager_generate, ours, plain_generate
from varied_weights import varied_copy

import intelrt
from intelrt.decoding.compact import compact_blocker

PROMPTS = ["Intel GPUs are", "hello", "the cat sat on the mat and then"]


@pytest.fixture()
def varied_model(tiny_model: Path, tmp_path: Path) -> Path:
    return varied_copy(tiny_model, tmp_path, seed=2)


MODELS = "transformers.models"


@pytest.mark.parametrize("name, module, config, named", [
    ("GPT2LMHeadModel", f"{MODELS}.gpt2.modeling_gpt2", {"model_type": "gpt2"}, "not one of the classes"),
    ("LlamaForCausalLM", f"{MODELS}.llama.modeling_llama",
     {"model_type": "llama", "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic rotary embeddings"),
    ("Qwen3ForCausalLM", f"{MODELS}.qwen3.modeling_qwen3",
     {"model_type": "qwen3", "rope_parameters": {"rope_type": "longrope"}}, "longrope rotary embeddings"),
    ("Qwen2ForCausalLM", f"{MODELS}.qwen2.modeling_qwen2",
     {"model_type": "qwen2", "layer_types": ["full_attention", "chunked_attention"]}, "chunked_attention layers"),
    ("Gemma3ForCausalLM", f"{MODELS}.gemma3.modeling_gemma3",
     {"model_type": "gemma3_text", "use_bidirectional_attention": True}, "bidirectional attention"),
    ("Gemma3ForCausalLM", f"{MODELS}.gemma3.modeling_gemma3",
     {"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_type": "dynamic"},
                                                       "sliding_attention": {"rope_type": "default"}}},
     "dynamic rotary embeddings"),
    # remote code that calls itself Llama may compute something else (scaled embeddings, say)
    ("LlamaForCausalLM", "transformers_modules.someone.modeling_llama", {"model_type": "llama"}, "not by transformers"),
])
def test_compact_step_is_refused_for_layers_it_does_not_reproduce(name: str, module: str, config: dict[str, Any],
                                                                  named: str) -> None:
    blocker = compact_blocker(name, module, config)
    assert blocker is not None and named in blocker and "model's own forward" in blocker


@pytest.mark.parametrize("name, config", [
    ("Qwen3ForCausalLM", {"model_type": "qwen3", "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}),
    ("LlamaForCausalLM", {"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
    ("MistralForCausalLM", {"model_type": "mistral", "sliding_window": None}),
    ("MistralForCausalLM", {"model_type": "mistral", "sliding_window": 4096}),
    ("Qwen2ForCausalLM", {"model_type": "qwen2", "layer_types": ["full_attention", "sliding_attention"]}),
    ("Gemma2ForCausalLM", {"model_type": "gemma2", "attn_logit_softcapping": 50.0}),
    ("Phi3ForCausalLM", {"model_type": "phi3", "sliding_window": 2047}),
    ("Qwen3MoeForCausalLM", {"model_type": "qwen3_moe"}),
])
def test_compact_step_serves_the_families_it_reproduces(name: str, config: dict[str, Any]) -> None:
    assert compact_blocker(name, f"{MODELS}.{config['model_type']}.modeling_{config['model_type']}", config) is None


def test_compact_step_follows_weights_changed_in_place(varied_model: Path) -> None:
    """Training updates parameters in place: the fused q/k/v and gate/up copies must follow."""
    import torch

    loaded = intelrt.load(varied_model)
    before = ours(loaded, PROMPTS)
    assert loaded.last_generation.step == "compact"
    assert before == plain_generate(loaded, PROMPTS)
    with torch.no_grad():
        for name, parameter in loaded.model.named_parameters():
            if name.endswith(("q_proj.weight", "up_proj.weight")):
                parameter.mul_(-1.5)
    after = ours(loaded, PROMPTS)
    assert after == plain_generate(loaded, PROMPTS)
    assert after != before, "the weight change must change the output for this test to mean anything"


def test_compact_step_follows_weights_replaced_by_assignment(varied_model: Path) -> None:
    """``param.data = ...`` (as some loaders do) swaps the storage without an in-place write."""
    import torch

    loaded = intelrt.load(varied_model)
    before = ours(loaded, PROMPTS[:1])
    gate = loaded.model.model.layers[0].mlp.gate_proj
    gate.weight.data = torch.randn(gate.weight.shape, generator=torch.Generator().manual_seed(9))
    after = ours(loaded, PROMPTS[:1])
    assert after == plain_generate(loaded, PROMPTS[:1]) and after != before


@pytest.mark.parametrize("decoded_before", [False, True])
def test_compact_step_steps_aside_for_a_replaced_projection(varied_model: Path, decoded_before: bool) -> None:
    """A projection that is not a plain Linear (a kernel-replaced or adapter-wrapped module, e.g.
    LoRA injected by training after a first generate) may compute something else: the step runs
    the model's own forward and says why."""
    import torch

    class ScaledLinear(torch.nn.Linear):
        def forward(self, x: Any) -> Any:
            return super().forward(x) * 1.5

    loaded = intelrt.load(varied_model)
    if decoded_before:
        ours(loaded, PROMPTS)
        assert loaded.last_generation.step == "compact"
    layer = loaded.model.model.layers[1].mlp
    replaced = ScaledLinear(layer.down_proj.in_features, layer.down_proj.out_features, bias=False)
    replaced.weight = layer.down_proj.weight
    layer.down_proj = replaced
    got = ours(loaded, PROMPTS)
    report = loaded.last_generation
    assert report is not None
    assert report.path == "fast" and report.step == "model"
    assert "layer 1 mlp.down_proj is a ScaledLinear" in report.step_reason
    assert report.notes == []  # an informed choice, not a failure: nothing is logged as a warning
    assert got == plain_generate(loaded, PROMPTS)


def test_compiled_compact_step_equals_generate(varied_model: Path, one_torch_thread: None) -> None:
    """compile='inductor', warmup='compiled' (at the first call) on the CPU: the step traced by inductor, projections as multiply-and-sum
    (the form used for few rows), still token for token."""
    loaded = intelrt.load(varied_model, compile="inductor", warmup="compiled")
    assert loaded.plan.decided.decode.compile == "inductor"
    got = ours(loaded, PROMPTS[:1], max_new_tokens=12)
    report = loaded.last_generation
    assert report is not None
    assert (report.compiled, report.step, report.notes) == ("inductor", "compact", [])
    assert got == eager_generate(loaded, PROMPTS[:1], max_new_tokens=12)


def test_attention_kernel_prefetches_the_weights_read_after_it(varied_model: Path) -> None:
    """With few rows, each layer's attention kernel asks L2 for what the next kernels read, in the
    order they read it: the layer's o-projection, gate/up and down weights, then the next layer's
    q/k/v. They are the tensors themselves (the fused ones refreshed in place), not copies; the
    last layer has no next q/k/v."""
    from intelrt.decoding.compact import CompactModel

    loaded = intelrt.load(varied_model)
    compact = CompactModel(loaded.model, backend=loaded.plan.backend)
    first, second = compact.layers[0], compact.layers[1]
    expected = [first.o_proj.weight, first.gate_up_weight, first.down_proj.weight, second.qkv_weight]
    assert [id(t) for t in compact._read_next(0)] == [id(t) for t in expected]
    last = compact.layers[-1]
    assert [id(t) for t in compact._read_next(len(compact.layers) - 1)] == [
        id(last.o_proj.weight), id(last.gate_up_weight), id(last.down_proj.weight)]
