"""The embedded default model: a tiny Qwen3-style causal LM built offline, deterministically.

Random-initialised weights (seed 0) and a byte-level BPE tokenizer trained in about a second on
the bundled text, with a ChatML-style chat template. Built once into a cache directory; tests and ``intelrt run`` use the same
builder, so no test needs the network (SPEC C4).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

BUILD_VERSION = "2"
VOCAB_SIZE = 384
SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>")
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""ChatML's layout (its markers are plain text to this tokenizer): what ``/v1/chat/completions``
of ``intelrt serve`` renders messages with."""


def corpus_text() -> str:
    """The bundled text the tokenizer (and the demo fine-tune) learn from."""
    return resources.files("intelrt").joinpath("data/tiny_corpus.txt").read_text(encoding="utf-8")


def cache_root() -> Path:
    base = os.environ.get("INTELRT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "intelrt")
    return Path(base)


def build_tokenizer(directory: Path) -> None:
    """Train the byte-level BPE tokenizer and save it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus_text().splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=SPECIAL_TOKENS[0],
                                   pad_token=SPECIAL_TOKENS[1], bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)


CAUSAL_LM_POSITIONS = 512
"""The tiny causal LM's ``max_position_embeddings`` (prompt and new tokens together)."""


def build_causal_lm(directory: Path, *, hidden_size: int = 64, layers: int = 2, seed: int = 0) -> None:
    """Save a random-initialised tiny Qwen3 causal LM with its tokenizer into ``directory``."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    build_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=CAUSAL_LM_POSITIONS, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory, safe_serialization=True)


def build_encoder(directory: Path, *, num_labels: int | None = None, seed: int = 0) -> None:
    """Save a tiny BERT encoder (``num_labels`` set → sequence classification) with a tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

    build_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    if num_labels:
        config.num_labels = num_labels
        config.id2label = {i: f"label_{i}" for i in range(num_labels)}
        config.label2id = {v: k for k, v in config.id2label.items()}
        model: BertModel | BertForSequenceClassification = BertForSequenceClassification(config)
    else:
        model = BertModel(config)
    model.save_pretrained(directory, safe_serialization=True)


def _build_into(target: Path, builder: Callable[[Path], None]) -> Path:
    if is_built(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        log.info("building the tiny model into %s", target)
        builder(staging)
        try:
            staging.rename(target)  # atomic: a half-built model is never visible
        except OSError:
            if not is_built(target):  # lost a race to another process: theirs is complete
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def default_model_dir() -> Path:
    """Where the embedded default model is (or will be) built; builds nothing."""
    return cache_root() / f"tiny-qwen3-v{BUILD_VERSION}"


def is_built(directory: Path) -> bool:
    """Whether a tiny model is complete in ``directory`` (it appears there only once complete)."""
    return (directory / "config.json").is_file()


def default_model_path() -> Path:
    """Directory of the embedded default model, built on first use (a few seconds, offline)."""
    return _build_into(default_model_dir(), build_causal_lm)
