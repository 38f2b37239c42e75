"""Fault catalogue: ``Loaded.train`` given what a user gets wrong before a step is taken — keywords
``TrainingArguments`` does not take, contradictions, collectives outside a launch, callbacks that
are no callbacks, an uninstalled logger, ``push_to_hub`` offline, data that cannot be trained on
(a 1-token row whose nan loss was read as divergence, ids outside the vocabulary) — and what a run
does under a learning rate of 1e38, and with a ``hub_token`` (pickled in clear into every
checkpoint's ``training_args.bin``).

Real runs on the tiny model (``max_steps`` 1–3, block 16, one thread); the refusals come before
``Trainer`` starts, so they leave the output directory unmade (and the module's loaded model
untrained; the runs that train load their own).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from faults import Catalogue, Fault, call, check, error, no_secret, works

import intelrt

catalogue = Catalogue(__file__)
TEXTS = ["Intel GPUs run PyTorch through the XPU backend.", "Gaudi runs PyTorch eager by default."] * 8
FAST = {"block_size": 16, "disable_tqdm": True, "per_device_train_batch_size": 4, "max_steps": 1}
SECRET = "hf_catalogueSecretToken1234"


@pytest.fixture(scope="module")
def loaded(tiny_model: Path, one_torch_thread: None) -> Any:
    return intelrt.load(tiny_model)


def _k(id: str, fault: str, kwargs: dict[str, Any], *says: str, risk: str = "traceback",
       error_type: str = "ConfigurationError") -> Fault:
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return error(f"train-{id}", "train", fault, *says, risk=risk, error=error_type,
                 trigger=f"loaded.train(texts, {shown})", data=kwargs)


KEYWORDS = [
    _k("misspelt-keyword", "a misspelt TrainingArguments keyword", {"per_device_batch_size": 4},
       "per_device_batch_size", "did you mean 'per_device_train_batch_size'", risk="silent wrong"),
    _k("bf16-and-fp16", "bf16=True and fp16=True together", {"bf16": True, "fp16": True}, "one or the other"),
    _k("gloo-outside-launch", "ddp_backend='gloo' in a single process", {"ddp_backend": "gloo"}, "intelrt launch"),
    _k("save-steps-fraction", "save_steps=1.5", {"save_steps": 1.5}, "transformers refused", "save_steps"),
    _k("callbacks-object", "callbacks=[object()], not a TrainerCallback (an AttributeError mid-run)",
       {"callbacks": [object()]}, "not a transformers TrainerCallback", "subclass transformers.TrainerCallback"),
    _k("report-to-wandb-missing", "report_to='wandb' with wandb not installed", {"report_to": "wandb"},
       "needs the wandb package", "report_to='none'"),
    _k("push-to-hub-offline", "push_to_hub=True with HF_HUB_OFFLINE set (Trainer fails creating the repo)",
       {"push_to_hub": True}, "HF_HUB_OFFLINE is set", "leave push_to_hub out"),
    _k("block-size-zero", "block_size=0", {"block_size": 0}, "block_size must be an int >= 2"),
    _k("num-train-epochs", "num_train_epochs= where train() takes epochs=", {"num_train_epochs": 2}, "epochs="),
    _k("learning-rate-string", "learning_rate='fast' (a TypeError from torch's AdamW)", {"learning_rate": "fast"},
       "learning_rate='fast'", "takes a float"),
    _k("seed-string", "seed='x' (a TypeError from numpy's seeding)", {"seed": "x"}, "seed='x'", "takes an int"),
    _k("max-grad-norm-string", "max_grad_norm='x' (a TypeError mid-step)", {"max_grad_norm": "x"},
       "max_grad_norm='x'", "takes a float"),
    _k("gradient-accumulation-zero", "gradient_accumulation_steps=0 (a ZeroDivisionError in Trainer)",
       {"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0 must be >= 1"),
    _k("batch-size-zero", "per_device_train_batch_size=0 (torch's sampler refused it after loading)",
       {"per_device_train_batch_size": 0}, "per_device_train_batch_size=0 must be >= 1"),
    _k("bf16-string", "bf16='yes', a string for a switch", {"bf16": "yes"}, "bf16='yes'", "takes a bool",
       risk="silent wrong"),
    _k("output-dir-under-a-file", "output_dir inside a file", {"output_dir": "AFILE/out"}, "cannot be written",
       "nothing was trained", error_type="SaveError"),
]


@catalogue.cases(KEYWORDS)
def test_training_keywords_that_cannot_work_are_refused_before_a_step(case: Fault, loaded: Any,
                                                                        tmp_path: Path) -> None:
    (tmp_path / "AFILE").write_text("a file\n")
    out = tmp_path / "out"
    kwargs = {"output_dir": str(out), **FAST, **case.data}
    if kwargs["output_dir"] == "AFILE/out":
        kwargs["output_dir"] = str(tmp_path / "AFILE" / "out")
    check(case, call(lambda: loaded.train(TEXTS, **kwargs)))
    assert not out.exists(), "the refused run made its output directory"


def _d(id: str, fault: str, rows: list[dict[str, Any]] | None, *says: str, risk: str = "traceback") -> Fault:
    return error(f"train-data-{id}", "train", fault, *says, risk=risk, error="ConfigurationError",
                 trigger="train('data.jsonl')" if rows is not None else "train('no-such-file.txt')", data=rows)


DATA = [
    _d("one-token-row", "an id row of one token (its nan loss was reported as divergence)", [{"input_ids": [5]}],
       "1 token", risk="wrong culprit"),
    _d("id-past-vocabulary", "an id equal to the vocabulary size (an IndexError mid-step)",
       [{"input_ids": [0, 384, 3]}], "384", "vocabulary"),
    _d("negative-id", "a negative token id", [{"input_ids": [0, -1, 3]}], "-1"),
    _d("missing-file", "a data file that does not exist", None, "no such file"),
]


@catalogue.cases(DATA)
def test_training_data_that_cannot_be_trained_on_is_named(case: Fault, loaded: Any, tmp_path: Path) -> None:
    data = tmp_path / ("data.jsonl" if case.data is not None else "no-such-file.txt")
    if case.data is not None:
        data.write_text("".join(json.dumps(row) + "\n" for row in case.data * 4), encoding="utf-8")
    check(case, call(lambda: loaded.train(str(data), output_dir=str(tmp_path / "out"), **FAST)))
    assert not (tmp_path / "out" / "config.json").exists()


@catalogue.cases(error("train-learning-rate-1e38", "train", "learning_rate=1e38: the loss becomes nan",
                       "diverged at step 2 of 3", "Nothing was saved as the final model", "Lower the learning rate",
                       risk="silent wrong", error="TrainingDivergedError",
                       trigger="loaded.train(texts, learning_rate=1e38, max_steps=3)"))
def test_a_diverging_run_stops_and_saves_nothing(case: Fault, tiny_model: Path, tmp_path: Path,
                                                 one_torch_thread: None) -> None:
    loaded = intelrt.load(tiny_model)  # its own: the run leaves the weights diverged
    out = tmp_path / "out"
    check(case, call(lambda: loaded.train(TEXTS, output_dir=str(out), **{**FAST, "max_steps": 3},
                                          learning_rate=1e38)))
    assert not (out / "config.json").exists() and not (out / "model.safetensors").exists()


@catalogue.cases(works("train-hub-token-masked", "train", "hub_token= given to a run that checkpoints (pickled in "
                       "clear into training_args.bin)", risk="leak",
                       trigger="loaded.train(texts, hub_token='hf_…', save_steps=1, max_steps=1)"))
def test_a_hub_token_is_nowhere_in_clear_in_what_training_writes(case: Fault, tiny_model: Path, tmp_path: Path,
                                                                  one_torch_thread: None) -> None:
    import torch

    loaded = intelrt.load(tiny_model)
    out = tmp_path / "out"
    seen = check(case, call(lambda: loaded.train(TEXTS, output_dir=str(out), hub_token=SECRET, save_steps=1,
                                                 **FAST)))
    no_secret(seen, SECRET)
    args = torch.load(out / "checkpoint-1" / "training_args.bin", weights_only=False)  # Trainer's own pickle
    assert SECRET not in str(args.hub_token) and SECRET not in repr(args)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written and not [p for p in written if SECRET.encode() in p.read_bytes()]
    assert intelrt.load(out).generate("Intel", max_new_tokens=2)
