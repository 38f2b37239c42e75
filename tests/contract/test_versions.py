"""Installed versions as planning reads them: the quick read from the ``.dist-info`` folder name
gives what ``importlib.metadata`` gives, for every installed distribution and a faked one."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from intelrt.support.versions import package_version
from intelrt.testing.distributions import install_plugin, uninstall


def test_package_version_equals_importlib_metadata_for_every_installed_distribution() -> None:
    checked = 0
    for found in metadata.distributions():
        name = found.metadata["Name"]
        module = name.replace("-", "_").lower()
        if module == "pip":  # looking pip up makes setuptools' distutils shim (Python < 3.12) hand out the
            continue  # stdlib's for the rest of the process: inductor's later import of setuptools then fails
        version = package_version(name, module)
        if version is not None:  # importable under its own name
            assert version == metadata.version(name), name
            checked += 1
    assert checked >= 10


def test_package_version_reads_a_just_installed_distribution(tmp_path: Path) -> None:
    install_plugin(tmp_path, distribution="intelrt-vers-probe", entry_point="probe", module="intelrt_vers_probe",
                   source="", version="3.1.4rc1")
    try:
        assert package_version("intelrt-vers-probe") == "3.1.4rc1"
    finally:
        uninstall(tmp_path, "intelrt_vers_probe")
    assert package_version("intelrt-vers-probe") is None
