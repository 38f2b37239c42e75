"""Installed versions, read the way plugins need them (no import of the package itself)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from importlib import metadata

from packaging.version import InvalidVersion, Version


def package_version(distribution: str, module: str | None = None) -> str | None:
    """Version of an installed distribution whose module is importable, else ``None``."""
    module = module or distribution.replace("-", "_")
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        found = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    return _version_from_folder(found) or found.version


def _version_from_folder(found: metadata.Distribution) -> str | None:
    """The version in a ``<name>-<version>.dist-info`` folder's name: reading it there skips parsing
    the whole METADATA file (torch's is long; planning reads several versions per plan)."""
    folder = getattr(getattr(found, "_path", None), "name", "")
    if not folder.endswith(".dist-info") or "-" not in folder:
        return None
    version = folder[: -len(".dist-info")].split("-", 1)[1]
    return version if parse(version) is not None else None


def parse(version: str | None) -> Version | None:
    """``"2.13.0+cpu"`` → ``Version("2.13.0")``; ``None`` or garbage → ``None``."""
    if not version:
        return None
    try:
        return Version(version.split("+")[0])
    except InvalidVersion:
        return None


def at_least(version: str | None, floor: str) -> bool:
    parsed = parse(version)
    return parsed is not None and parsed >= Version(floor)


def torch_version() -> str | None:
    """The running torch's version string (imports torch), or ``None`` without torch."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


#: What intelrt itself needs (``pyproject.toml`` dependencies). Older versions fail far from the
#: cause (an unknown ``dtype=`` keyword, a missing ``KernelConfig``, a training lock two runs can
#: both hold), so doctor and plans say so first.
FLOORS = {"torch": "2.6", "transformers": "5.0", "accelerate": "1.5", "huggingface_hub": "1.0", "filelock": "4.3"}


def installed_version(distribution: str) -> str | None:
    """The installed version; for torch, its ``__version__`` once imported (what runs: XPU and
    Gaudi builds carry local version tags, and the simulation reports its torch there)."""
    module = sys.modules.get(distribution) if distribution == "torch" else None
    version = getattr(module, "__version__", None) if module is not None else None
    return str(version) if version else package_version(distribution)


def _transformers_kernels_spec() -> str | None:
    """The ``kernels`` range of transformers' ``kernels`` extra (``"<0.19,>=0.18.2"``), read from its
    Requires-Dist lines with ``packaging.requirements.Requirement`` (name, specifier and marker)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requires = metadata.requires("transformers") or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if (requirement.name == "kernels" and requirement.marker is not None
                and requirement.marker.evaluate({"extra": "kernels"})):
            return str(requirement.specifier) or None
    return None


@dataclass(frozen=True)
class KernelsProblem:
    """Why transformers cannot use hub kernels here, and the command that fixes it."""

    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.why}: {self.fix}"


def hub_kernels_problem() -> KernelsProblem | None:
    """Why transformers cannot use hub kernels here (``None`` when it can): ``kernels`` missing, or
    outside the range of transformers' own ``kernels`` extra (then ``is_kernels_available()`` is
    False and every hub-kernel path is off)."""
    installed = package_version("kernels")
    spec = _transformers_kernels_spec()
    wanted = f"kernels{spec}" if spec else "kernels"
    if installed is None:
        return KernelsProblem("the kernels package is not installed",
                              f"pip install 'intelrt[kernels]' (that is '{wanted}', the range transformers accepts; "
                              "without it transformers has no hub kernels: use_kernels, flash_attention_2 on XPU)")
    if spec:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            accepted = SpecifierSet(spec)
        except InvalidSpecifier:
            return None
        version = parse(installed)
        if version is not None and version not in accepted:
            return KernelsProblem(
                f"transformers {package_version('transformers')} uses kernels{spec} only and kernels {installed} "
                "is installed, so transformers' is_kernels_available() is False and every hub-kernel path is off "
                "(use_kernels, flash_attention_2 on XPU)", f"pip install '{wanted}'")
    return None


def kernels_problem() -> str | None:
    """:func:`hub_kernels_problem` as one sentence ending in the fix (``None`` when kernels are usable)."""
    problem = hub_kernels_problem()
    return None if problem is None else str(problem)
