"""Every task transformers runs, through intelrt (issue 26; SPEC T1, T2, T3).

Tiny random checkpoints saved as their hub class with the processors a real one carries
(``tests/zoo/heads.py``): the plan picks the checkpoint's own class (T1); ``intelrt.pipeline``
answers as ``transformers.pipeline`` on the same directory, for text, image and audio tasks (T2);
``Loaded.generate`` gives what ``model.generate`` gives on the processor's inputs for seq2seq,
vision-language and speech models (T3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from zoo import heads, sides, table

import intelrt
from intelrt.errors import ConfigurationError

TEXTS = sides.texts()


@pytest.fixture(scope="session")
def head() -> Any:
    root = table.models_root()
    return lambda name: heads.build_head(name, root)


def _plain(task: str, directory: Path) -> Any:
    return transformers.pipeline(task, model=str(directory), device="cpu")


def _config_only(tmp_path: Path, model_type: str, architecture: str) -> Path:
    """A checkpoint directory holding only the config of ``architecture`` (planning reads no weights)."""
    directory = tmp_path / f"{model_type}-{architecture}"
    directory.mkdir()
    config = transformers.CONFIG_MAPPING[model_type]().to_dict()
    config["architectures"] = [architecture]
    (directory / "config.json").write_text(json.dumps(config, default=repr))
    return directory


# -- T1: the checkpoint's own class -------------------------------------------------------------------

CONDITIONAL = [("bart", "BartForConditionalGeneration"), ("mbart", "MBartForConditionalGeneration"),
               ("pegasus", "PegasusForConditionalGeneration"),
               ("blenderbot", "BlenderbotForConditionalGeneration"), ("mvp", "MvpForConditionalGeneration"),
               ("plbart", "PLBartForConditionalGeneration"),
               ("bigbird_pegasus", "BigBirdPegasusForConditionalGeneration"),
               ("whisper", "WhisperForConditionalGeneration")]
"""Checkpoints the issue found loaded as their ``…ForCausalLM`` (encoder dropped, head re-initialised)."""
WITH_HEADS = [("t5", "T5ForConditionalGeneration"), ("mt5", "MT5ForConditionalGeneration"),
              ("longt5", "LongT5ForConditionalGeneration"), ("marian", "MarianMTModel"),
              ("m2m_100", "M2M100ForConditionalGeneration"), ("nllb-moe", "NllbMoeForConditionalGeneration"),
              ("fsmt", "FSMTForConditionalGeneration"), ("led", "LEDForConditionalGeneration"),
              ("seamless_m4t", "SeamlessM4TForTextToText"), ("bert", "BertForTokenClassification"),
              ("roberta", "RobertaForQuestionAnswering"), ("llava", "LlavaForConditionalGeneration"),
              ("bert", "BertForMaskedLM"), ("vit", "ViTForImageClassification"), ("bert", "BertForMultipleChoice"),
              ("wav2vec2", "Wav2Vec2ForCTC"), ("wav2vec2", "Wav2Vec2ForSequenceClassification"),
              ("detr", "DetrForObjectDetection"), ("mllama", "MllamaForConditionalGeneration"),
              ("xlnet", "XLNetForQuestionAnswering"), ("lxmert", "LxmertForPreTraining"),
              ("musicgen", "MusicgenForConditionalGeneration")]
"""Checkpoints the issue found loaded as a bare base model (or whose planning crashed: LXMERT, MusicGen)."""


@pytest.mark.claim("T1")
@pytest.mark.parametrize(("model_type", "architecture"), CONDITIONAL + WITH_HEADS)
def test_the_plan_picks_the_checkpoints_own_class(tmp_path: Path, model_type: str, architecture: str) -> None:
    plan = intelrt.plan(str(_config_only(tmp_path, model_type, architecture)))
    assert plan.model.architecture is not None and plan.model.architecture.name == architecture, plan.task
    assert not plan.model.architecture.name.endswith("ForCausalLM")
    assert plan.to_dict()["model"]["class"]["name"] == architecture  # the plan shows the class


@pytest.mark.claim("T1")
def test_feature_extraction_asked_loads_the_base_model(tmp_path: Path) -> None:
    directory = _config_only(tmp_path, "bert", "BertForTokenClassification")
    assert intelrt.plan(str(directory), task="feature-extraction").model.architecture.name == "BertModel"


@pytest.mark.claim("T1")
def test_the_plan_names_a_vision_language_models_text_decoder(tmp_path: Path) -> None:
    arch = intelrt.plan(str(_config_only(tmp_path, "llava", "LlavaForConditionalGeneration"))).model.architecture
    assert arch is not None and arch.text_model_type == "llama" and arch.auto_class == "AutoModelForImageTextToText"
    plain = intelrt.plan(str(_config_only(tmp_path, "bart", "BartForConditionalGeneration"))).model.architecture
    assert plain is not None and plain.text_model_type is None


def test_each_sub_model_gets_an_attention_it_supports(tmp_path: Path) -> None:
    """RT-DETR's ResNet backbone has no SDPA: plain ``from_pretrained`` gives it eager and the rest
    SDPA; the plan's ``sdpa`` would make transformers refuse the whole model."""
    from intelrt.runtime.pretrained_kwargs import from_pretrained_kwargs

    assert not transformers.RTDetrResNetBackbone._supports_sdpa
    detector = intelrt.plan(str(_config_only(tmp_path, "rt_detr", "RTDetrForObjectDetection")))
    assert from_pretrained_kwargs(detector)["attn_implementation"] == {"": "sdpa", "backbone_config": None}
    depth = intelrt.plan(str(_config_only(tmp_path, "zoedepth", "ZoeDepthForDepthEstimation")))
    assert depth.value("attention") == "eager"  # ZoeDepth itself has no SDPA; its BEiT backbone keeps its own
    assert from_pretrained_kwargs(depth)["attn_implementation"] == {"": "eager", "backbone_config": None}
    forced = intelrt.plan(str(_config_only(tmp_path, "llava", "LlavaForConditionalGeneration")), attention="eager")
    assert from_pretrained_kwargs(forced)["attn_implementation"] == "eager"  # every part supports it


@pytest.mark.claim("T1")
def test_a_seq2seq_checkpoint_loads_whole_and_generates_as_transformers(head: Any) -> None:
    directory = head("bart")
    loaded = intelrt.load(directory)
    assert type(loaded.model) is transformers.BartForConditionalGeneration
    plain = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    assert all(torch.equal(a, b) for a, b in zip(loaded.model.state_dict().values(), plain.state_dict().values(),
                                                 strict=True))  # nothing re-initialised
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    inputs = tokenizer(TEXTS, return_tensors="pt", padding=True)
    expected = tokenizer.batch_decode(plain.generate(**inputs, max_new_tokens=6), skip_special_tokens=True)
    assert loaded.generate(TEXTS, max_new_tokens=6) == expected
    report = loaded.last_generation
    assert report is not None and report.path == "generate" and "encoder-decoder" in report.reason


# -- T2: every pipeline task, as transformers' pipeline answers ----------------------------------------

TEXT_PIPELINES = [("token-classification", "bert-token", TEXTS, {}),
                  ("ner", "bert-token", TEXTS[0], {"aggregation_strategy": "simple"}),
                  ("fill-mask", "bert-masked", ["w5 <mask> w9", "<mask> w12"], {"top_k": 3}),
                  ("zero-shot-classification", "bert-nli", TEXTS[:2], {"candidate_labels": ["w5", "w7 w8"]}),
                  ("feature-extraction", "bert-token", TEXTS[0], {})]


@pytest.mark.claim("T2")
@pytest.mark.parametrize(("task", "name", "inputs", "options"), TEXT_PIPELINES, ids=[p[0] for p in TEXT_PIPELINES])
def test_text_pipelines_answer_as_transformers(head: Any, task: str, name: str, inputs: Any,
                                               options: dict[str, Any]) -> None:
    directory = head(name)
    ours = intelrt.pipeline(task, directory)
    assert ours(inputs, **options) == _plain(task, directory)(inputs, **options)


IMAGE_PIPELINES = [("image-classification", "vit", {"top_k": 3}), ("image-feature-extraction", "vit-base", {}),
                   ("image-segmentation", "segformer", {}), ("depth-estimation", "dpt", {}),
                   ("object-detection", "yolos", {"threshold": 0.0}),
                   ("zero-shot-image-classification", "clip", {"candidate_labels": ["w5", "w9 w10"]})]


def _same(ours: Any, theirs: Any) -> bool:
    """Pipeline outputs compared value by value (PIL masks and depth maps by their pixels)."""
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs, strict=True))
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(_same(ours[k], theirs[k]) for k in ours)
    if hasattr(ours, "tobytes") and hasattr(ours, "mode"):  # PIL images
        return bool(ours.tobytes() == theirs.tobytes())
    if isinstance(ours, torch.Tensor):
        return bool(torch.equal(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.claim("T2")
@pytest.mark.parametrize(("task", "name", "options"), IMAGE_PIPELINES, ids=[p[0] for p in IMAGE_PIPELINES])
def test_image_pipelines_answer_as_transformers(head: Any, task: str, name: str, options: dict[str, Any]) -> None:
    directory = head(name)
    pictures = heads.images()
    ours = intelrt.pipeline(task, directory)(pictures, **options)
    assert _same(ours, _plain(task, directory)(pictures, **options))


AUDIO_PIPELINES = [("audio-classification", "wav2vec2-audio"), ("automatic-speech-recognition", "wav2vec2-ctc"),
                   ("automatic-speech-recognition", "whisper")]


@pytest.mark.claim("T2")
@pytest.mark.parametrize(("task", "name"), AUDIO_PIPELINES, ids=[p[1] for p in AUDIO_PIPELINES])
def test_audio_pipelines_answer_as_transformers(head: Any, task: str, name: str) -> None:
    directory = head(name)
    clips = [{"raw": clip, "sampling_rate": heads.SAMPLING_RATE} for clip in heads.audio()]
    options = {"max_new_tokens": 5} if name == "whisper" else {}
    ours = intelrt.pipeline(task, directory)
    assert ours([dict(c) for c in clips], **options) == _plain(task, directory)([dict(c) for c in clips], **options)


@pytest.mark.claim("T2")
def test_the_image_text_to_text_pipeline_answers_as_transformers(head: Any) -> None:
    directory = head("llava")
    chat = [{"role": "user", "content": [{"type": "image", "image": heads.images()[0]},
                                         {"type": "text", "text": "w5 w6"}]}]
    ours = intelrt.pipeline("image-text-to-text", directory)(text=chat, max_new_tokens=5)
    assert ours == _plain("image-text-to-text", directory)(text=chat, max_new_tokens=5)


@pytest.mark.claim("T2")
def test_a_loaded_model_serves_every_pipeline_its_class_serves_and_refuses_others(head: Any) -> None:
    loaded = intelrt.load(head("bert-nli"))
    assert loaded.plan.task == "text-classification"
    assert isinstance(loaded.pipeline(), transformers.TextClassificationPipeline)
    zero_shot = loaded.pipeline("zero-shot-classification")
    assert zero_shot.model is loaded.model
    with pytest.raises(ConfigurationError, match="'fill-mask'.*BertForSequenceClassification.*intelrt.pipeline"):
        loaded.pipeline("fill-mask")
    with pytest.raises(ConfigurationError, match="no 'summarization' pipeline any more"):
        loaded.pipeline("summarization")
    with pytest.raises(ConfigurationError, match="not one transformers .* has"):
        loaded.pipeline("image-magic")
    vision = intelrt.load(head("vit"))
    assert vision.tokenizer is None and type(vision.processor).__name__.startswith("ViTImageProcessor")
    assert vision.plan.model.has_processor and not vision.plan.model.has_tokenizer


@pytest.mark.claim("T2")
def test_a_missing_pillow_is_named_with_the_extra_to_install(head: Any) -> None:
    """Pillow hidden from a fresh interpreter (as if not installed): the error names ``intelrt[vision]``."""
    code = ("import sys; sys.modules['PIL'] = None\n"
            "import intelrt\n"
            "from intelrt.errors import ConfigurationError\n"
            "try:\n"
            f"    intelrt.pipeline('image-classification', {str(head('vit'))!r})\n"
            "except ConfigurationError as exc:\n"
            "    print('REFUSED', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert "REFUSED" in done.stdout and "pip install 'intelrt[vision]'" in done.stdout, done.stdout + done.stderr


# -- T3: generate is generate ----------------------------------------------------------------------------


@pytest.mark.claim("T3")
def test_a_vision_language_model_generates_from_images_and_chat_messages(head: Any) -> None:
    directory = head("llava")
    loaded = intelrt.load(directory)
    processor = transformers.AutoProcessor.from_pretrained(directory)
    plain = transformers.AutoModelForImageTextToText.from_pretrained(directory).eval()
    pictures = heads.images()
    prompts = ["<image> w5 w6", "<image> w9 w10 w11"]

    def expected(inputs: Any) -> list[str]:
        out = plain.generate(**inputs, max_new_tokens=6, do_sample=False)
        return list(processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

    batch = processor(text=prompts, images=pictures, return_tensors="pt", padding=True, padding_side="left")
    assert loaded.generate(prompts, images=pictures, max_new_tokens=6) == expected(batch)
    assert "images" in loaded.last_generation.reason
    chat = [{"role": "user", "content": [{"type": "image", "image": pictures[1]}, {"type": "text", "text": "w5"}]}]
    made = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True,
                                         return_tensors="pt")
    assert loaded.generate(chat, max_new_tokens=6) == expected(made)[0]


@pytest.mark.claim("T3")
def test_a_speech_model_generates_from_audio_and_from_input_features(head: Any) -> None:
    directory = head("whisper")
    loaded = intelrt.load(directory)
    processor = transformers.AutoProcessor.from_pretrained(directory)
    plain = transformers.AutoModelForSpeechSeq2Seq.from_pretrained(directory).eval()
    clips = heads.audio()
    features = processor(audio=clips, sampling_rate=heads.SAMPLING_RATE, return_tensors="pt")
    out = plain.generate(**features, max_new_tokens=6)
    assert loaded.generate(audio=clips, sampling_rate=heads.SAMPLING_RATE, max_new_tokens=6) == \
        processor.batch_decode(out, skip_special_tokens=True)
    texts = loaded.generate(input_features=features["input_features"], max_new_tokens=6)
    assert texts == processor.batch_decode(out, skip_special_tokens=True)


@pytest.mark.claim("T3")
def test_a_generation_config_is_honoured_and_overridden_by_keywords(tiny_model: Path) -> None:
    loaded = intelrt.load(tiny_model)
    prompt = [5, 6, 7, 8]
    config = transformers.GenerationConfig(max_new_tokens=3, do_sample=False)
    assert len(loaded.generate_ids(prompt, generation_config=config, eos_token_id=None)) == 3
    assert len(loaded.generate_ids(prompt, generation_config=config, max_new_tokens=5, eos_token_id=None)) == 5
    with pytest.raises(ConfigurationError, match="GenerationConfig"):
        loaded.generate_ids(prompt, generation_config={"max_new_tokens": 3})


@pytest.mark.claim("T3")
def test_return_dict_in_generate_returns_transformers_own_output(tiny_model: Path) -> None:
    loaded = intelrt.load(tiny_model)
    plain = transformers.AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    prompts = [[5, 6, 7, 8], [9, 10]]
    settings = {"max_new_tokens": 4, "do_sample": False, "return_dict_in_generate": True, "output_scores": True,
                "output_logits": True}
    ours = loaded.generate_ids(prompts, **settings)
    assert isinstance(ours, transformers.generation.GenerateDecoderOnlyOutput)
    assert loaded.last_generation.path == "generate" and "return_dict_in_generate" in loaded.last_generation.reason
    pad = loaded.model.generation_config.pad_token_id or 0
    ids = torch.tensor([[5, 6, 7, 8], [pad, pad, 9, 10]])  # left-padded, as intelrt pads
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    theirs = plain.generate(input_ids=ids, attention_mask=mask, pad_token_id=pad, **settings)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert len(ours.scores) == 4 and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours.scores, theirs.scores,
                                                                                         strict=True))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours.logits, theirs.logits, strict=True))


@pytest.mark.claim("T3")
def test_attention_mask_is_accepted(tiny_model: Path) -> None:
    loaded = intelrt.load(tiny_model)
    plain = transformers.AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    settings = {"max_new_tokens": 4, "do_sample": False, "eos_token_id": None}
    padded = [[0, 0, 5, 6], [7, 8, 9, 10]]
    left = loaded.generate_ids(padded, attention_mask=[[0, 0, 1, 1], [1, 1, 1, 1]], **settings)
    assert left == loaded.generate_ids([[5, 6], [7, 8, 9, 10]], **settings)  # left padding: as intelrt pads
    holes = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    got = loaded.generate_ids(padded, attention_mask=holes, **settings)
    assert "attention_mask" in loaded.last_generation.reason
    out = plain.generate(input_ids=torch.tensor(padded), attention_mask=holes, pad_token_id=0, **settings)
    assert got == out[:, 4:].tolist()


# -- load(task=) for every task ------------------------------------------------------------------



@pytest.mark.claim("T2")
def test_load_takes_every_task_and_its_aliases(head: Any, tmp_path: Path) -> None:
    from intelrt.planning import tasks

    assert set(tasks.pipeline_tasks()) <= set(tasks.load_tasks())
    assert intelrt.plan(head("bert-token"), task="ner").task == "token-classification"
    assert intelrt.plan(head("bert-nli"), task="sequence-classification").task == "text-classification"
    base = intelrt.load(head("vit"), task="image-feature-extraction")
    assert type(base.model).__name__ == "ViTModel"
    picture = heads.images()[0]
    assert base.pipeline("image-feature-extraction")(picture) == \
        _plain("image-feature-extraction", head("vit"))(picture)  # transformers' AutoModel of the same checkpoint
    with pytest.raises(ConfigurationError, match="task='pose-magic' is not a task of the installed transformers"):
        intelrt.plan(head("vit"), task="pose-magic")
    with pytest.raises(ConfigurationError, match="no class of transformers for task 'fill-mask'.*serves "
                                                 "image-classification"):
        intelrt.load(head("vit"), task="fill-mask")
