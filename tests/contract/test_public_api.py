"""The public names stay what the docs say, whatever submodules get imported."""

from __future__ import annotations

import importlib
import pkgutil
import types

import intelrt


def test_public_functions_are_not_shadowed_by_submodules() -> None:
    for info in pkgutil.walk_packages(intelrt.__path__, "intelrt."):
        if ".testing._vendor_stubs" in info.name or info.name.startswith("intelrt.testing.conformance"):
            continue
        importlib.import_module(info.name)
    for name in intelrt.__all__:
        value = getattr(intelrt, name)
        assert not isinstance(value, types.ModuleType), f"intelrt.{name} is a module, not the documented API"
    assert callable(intelrt.plan) and callable(intelrt.load) and callable(intelrt.detect)
