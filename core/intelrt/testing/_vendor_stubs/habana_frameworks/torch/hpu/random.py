"""Stand-in for ``habana_frameworks.torch.hpu.random`` (the Trainer saves and restores it)."""

import torch as _torch

from intelrt.testing.simulation import current as _current


def get_rng_state(device: object = None) -> _torch.Tensor:
    _current().record("hpu.random.get_rng_state")
    return _torch.get_rng_state()


def get_rng_state_all() -> list[_torch.Tensor]:
    return [_torch.get_rng_state() for _ in _current().visible_ids()]


def set_rng_state(new_state: _torch.Tensor, device: object = None) -> None:
    _current().record("hpu.random.set_rng_state")


def set_rng_state_all(new_states: object) -> None:
    _current().record("hpu.random.set_rng_state")


def manual_seed(seed: int) -> None:
    _current().record("hpu.random.manual_seed")


def manual_seed_all(seed: int) -> None:
    _current().record("hpu.random.manual_seed")


def initial_seed() -> int:
    return 0
