"""Every pair of request options the plan accepts runs on the tiny model (issue 21): load, then
generate a few tokens (one prompt and a list), embed or classify, on the CPU.

A plan that accepts a combination promises it runs; one that cannot run must be refused by the
plan (an ``IntelrtError`` that says why), never crash later in a library (``quantization="4bit"``
with ``compile="on"`` used to plan cleanly and then fail inside inductor). Each option's values
come from its declaration (``choices``), or, for free-text options, from the list below; the
pairs that plan are packed into few configurations (all-pairs testing) so the test stays fast,
and a configuration that fails is split into its pairs to name the culprit.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import intelrt
from intelrt.backends.generic import KNOWN_ATTENTION
from intelrt.errors import ConfigurationError, IntelrtError
from intelrt.hooks.request import REQUEST_OPTIONS
from intelrt.plugin import ParallelismChoice

#: Values to try for options whose declaration accepts free text (besides the default).
FREE_TEXT = {
    "backend": ["cpu", "xpu"],
    "devices": ["0"],
    "dtype": ["float32", "bfloat16", "float16"],
    "attention": [*KNOWN_ATTENTION, "kernels-community/flash-attn2"],
    "task": ["text-generation", "feature-extraction", "text-classification"],
    "quantization": ["4bit", "8bit"],
    "compile": ["on", "none", "nosuchbackend"],
}

#: Values that cost seconds per configuration (inductor's C++ compile, bitsandbytes' 8-bit matmul and
#: flex attention's compiled kernel on the CPU): packed into as few configurations as possible.
HEAVY = {("compile", "on"), ("quantization", "8bit"), ("attention", "flex_attention")}

Pair = frozenset[tuple[str, Any]]


def option_values() -> dict[str, list[Any]]:
    """Every option with the non-default values to try."""
    values: dict[str, list[Any]] = {}
    for option in REQUEST_OPTIONS:
        if option.flag:
            values[option.name] = [True]
        elif option.choices:
            values[option.name] = [c for c in option.choices if c != option.default]
        else:
            assert option.name in FREE_TEXT, f"request option {option.name!r} takes free text: add values to FREE_TEXT"
            values[option.name] = FREE_TEXT[option.name]
    return values


def plans(model: Path, options: Mapping[str, Any]) -> bool:
    """Whether the plan accepts ``options``; anything but a deliberate refusal is a bug."""
    try:
        intelrt.plan(model, **options)
    except IntelrtError as exc:
        assert str(exc), f"{dict(options)}: refused without saying why"
        return False
    return True


def exercise(model: Path, options: Mapping[str, Any]) -> None:
    """Load as planned, then do what the plan's task is for, on two texts of different lengths (a
    padded batch, or continuous batching, as the plan says)."""
    import torch

    torch._dynamo.reset()  # each configuration compiles afresh, as a new process would
    planned = intelrt.plan(model, **options).decided.parallelism
    if isinstance(planned, ParallelismChoice) and planned.sharded_load:
        # weights sharded as they load need every rank of a launched job: this one process is refused,
        # before anything loads, with the launch line (tests/integration/test_sharded_training.py runs the ranks)
        with pytest.raises(ConfigurationError, match=r"start it with intelrt launch --nproc \d"):
            intelrt.load(model, **options)
        return
    loaded = intelrt.load(model, **options)
    texts = ["Intel GPUs", "Gaudi runs PyTorch eagerly"]
    if loaded.plan.task == "text-generation":
        assert all(isinstance(t, str) for t in loaded.generate(texts, max_new_tokens=2))
    elif loaded.plan.task == "feature-extraction":
        assert loaded.embed(texts).shape[0] == 2
    else:
        assert len(loaded.classify(texts)) == 2


def pairs_of(config: Mapping[str, Any]) -> set[Pair]:
    return {frozenset(p) for p in itertools.combinations(config.items(), 2)}


def heavy(items: Iterable[tuple[str, Any]]) -> int:
    return sum(item in HEAVY for item in items)


def cover(model: Path, values: Mapping[str, list[Any]], uncovered: set[Pair]) -> Iterator[dict[str, Any]]:
    """Configurations that together hold every pair in ``uncovered``, each accepted by the plan:
    start from an uncovered pair (heavy ones first), add the value of each other option that covers
    most new pairs (heavy values only to configurations that are heavy already)."""
    uncovered = set(uncovered)
    while uncovered:
        config = dict(min(uncovered, key=lambda p: (-heavy(p), sorted(map(str, p)))))
        for name in values:
            if name in config:
                continue
            gains = sorted(((len(pairs_of({**config, name: v}) & uncovered), i, v)
                            for i, v in enumerate(values[name])
                            if heavy(config.items()) or (name, v) not in HEAVY), reverse=True)
            for gain, _, value in gains:
                if gain and plans(model, {**config, name: value}):
                    config[name] = value
                    break
        uncovered -= pairs_of(config)
        yield config


@pytest.mark.slow
def test_every_pair_of_options_the_plan_accepts_runs_on_the_tiny_model(tiny_model: Path, one_torch_thread: None
                                                                       ) -> None:
    values = option_values()
    singles = [(name, v) for name, vs in values.items() for v in vs if plans(tiny_model, {name: v})]
    accepted = {frozenset(p) for p in itertools.combinations(singles, 2)
                if p[0][0] != p[1][0] and plans(tiny_model, dict(p))}
    assert len(accepted) > 100, "the plan refuses almost everything: the test would prove little"
    failures: list[str] = []
    for config in cover(tiny_model, values, accepted):
        try:
            exercise(tiny_model, config)
        except Exception as whole:  # noqa: BLE001 - find the pairs that fail, report them all below
            found = len(failures)
            for pair in sorted(pairs_of(config) & accepted, key=lambda p: sorted(map(str, p))):
                try:
                    exercise(tiny_model, dict(pair))
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"{dict(pair)} plans but fails: {type(exc).__name__}: {str(exc)[:300]}")
            if len(failures) == found:  # no pair alone fails: the combination does
                failures.append(f"{config} plans but fails: {type(whole).__name__}: {str(whole)[:300]}")
    assert not failures, "\n".join(dict.fromkeys(failures))
