"""SPEC H9: on Gaudi every torch.compile backend but hpu_backend / eager becomes hpu_backend,
with one warning per call site, decorators included; the wrapper is installed once, never
stacked, and owns the switch transformers installs itself. Exercised for real on CPU."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import intelrt
from intelrt.runtime.compiling import install_compile_wrapper
from intelrt.testing.simulation import simulate as simulated
from intelrt_hpu.compile_wrap import GaudiCompileWarning

INT64 = {"PT_ENABLE_INT64_SUPPORT": "1"}
REAL_COMPILE = torch.compile


@pytest.fixture
def hpu_backend() -> Iterator[list[int]]:
    """The dynamo backend the real Gaudi stack registers, as a recorder: one entry per graph it
    is asked to compile (vendor boundary); it runs the graph unchanged."""
    from torch._dynamo.backends import registry

    calls: list[int] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        calls.append(len(example_inputs))
        return gm.forward

    registry.register_backend(record, name="hpu_backend")
    yield calls
    registry._COMPILER_FNS.pop("hpu_backend", None)
    registry._BACKENDS.pop("hpu_backend", None)
    torch._dynamo.reset()


def _gaudi(simulate: Callable[..., Any]) -> intelrt.BackendStatus:
    simulate("hpu", 8, generation="gaudi2", env=INT64)
    backend = intelrt.detect().chosen
    assert backend.name == "hpu"
    return backend


def _switch_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, GaudiCompileWarning)]


@pytest.mark.claim("H9")
def test_H9_decorator_and_call_both_request_hpu_backend_one_warning_each(hpu_backend: list[int]) -> None:
    with simulated("hpu", 8, generation="gaudi2", env=INT64):
        caught = _decorator_and_call(intelrt.detect().chosen, hpu_backend)
    assert torch.compile is REAL_COMPILE, "the simulated Gaudi is gone: torch.compile is the real one again"
    messages = _switch_warnings(caught)
    assert len(messages) == 2
    assert "backend='inductor'" in messages[0] and "backend='aot_eager'" in messages[1]
    assert all("switched it to backend='hpu_backend'" in m for m in messages)
    assert [w.filename for w in caught if issubclass(w.category, GaudiCompileWarning)] == [__file__, __file__]


def _decorator_and_call(backend: intelrt.BackendStatus, hpu_backend: list[int]) -> list[warnings.WarningMessage]:
    assert install_compile_wrapper(backend) == "hpu"
    assert install_compile_wrapper(backend) == "hpu"
    assert torch.compile.__intelrt_original__ is REAL_COMPILE, "installed twice, wrapped once"  # type: ignore[attr-defined]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @torch.compile(backend="inductor")
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2 + 1

        assert len(_switch_warnings(caught)) == 1
        assert torch.equal(scale(torch.ones(3)), torch.full((3,), 3.0))
        assert hpu_backend == [1], "the decorated function compiled with hpu_backend"

        def shift(x: torch.Tensor) -> torch.Tensor:
            return x - 1

        compiled = torch.compile(shift, backend="aot_eager")
        assert torch.equal(compiled(torch.ones(2)), torch.zeros(2))
        assert hpu_backend == [1, 1], "aot_eager was switched to hpu_backend"
    return caught


@pytest.mark.claim("H9")
def test_H9_bare_decorator_module_compile_and_allowed_backends(simulate: Callable[..., Any], hpu_backend: list[int]) -> None:
    install_compile_wrapper(_gaudi(simulate))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @torch.compile
        def triple(x: torch.Tensor) -> torch.Tensor:
            return x * 3

        triple(torch.ones(2))
        assert len(_switch_warnings(caught)) == 1 and hpu_backend == [1]

        layer = torch.compile(torch.nn.Linear(2, 2))  # a module, default backend (inductor)
        layer(torch.ones(1, 2))
        assert len(_switch_warnings(caught)) == 2 and len(hpu_backend) == 2
        torch.nn.Linear(2, 2).compile()  # nn.Module.compile goes through torch.compile too
        assert len(_switch_warnings(caught)) == 3

        def plus(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        torch.compile(plus, backend="eager")(torch.ones(2))
        torch.compile(plus, backend="hpu_backend")(torch.ones(3))
    assert len(_switch_warnings(caught)) == 3, "eager and hpu_backend pass unchanged, silently"
    assert len(hpu_backend) == 3


@pytest.mark.claim("H9")
def test_H9_owns_the_switch_transformers_installed_first(simulate: Callable[..., Any], hpu_backend: list[int]) -> None:
    backend = _gaudi(simulate)
    from transformers.utils.import_utils import is_torch_hpu_available

    assert is_torch_hpu_available() is True
    assert torch.compile.__name__ == "hpu_backend_compile", "transformers wrapped torch.compile itself"
    install_compile_wrapper(backend)
    install_compile_wrapper(backend)
    assert torch.compile.__intelrt_original__ is REAL_COMPILE, "transformers' layer was peeled, not stacked"  # type: ignore[attr-defined]
    is_torch_hpu_available()  # cached: transformers does not wrap again
    assert getattr(torch.compile, "__intelrt_wrapped__", None) == "hpu"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(lambda x: x * 5, backend="inductor")(torch.ones(2))
    assert len(_switch_warnings(caught)) == 1 and hpu_backend == [1]


@pytest.mark.claim("H9")
def test_H9_intelrt_compile_on_a_plan_installs_the_switch_and_uses_hpu_backend(
        simulate: Callable[..., Any], hpu_backend: list[int], tiny_model: Path) -> None:
    _gaudi(simulate)
    plan = intelrt.plan(tiny_model, compile="on")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = intelrt.compile(lambda x: x * 7, plan)
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 7.0))
    assert _switch_warnings(caught) == [] and hpu_backend == [1]
    assert getattr(torch.compile, "__intelrt_wrapped__", None) == "hpu"
