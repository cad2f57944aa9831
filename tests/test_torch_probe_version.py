"""The torch probe names a broken torch's version from its metadata (no import), so its reinstall is pinned."""

from __future__ import annotations

import importlib.util

import pytest

from cudadoctor.child.torch_probe import installed_version


def test_an_unknown_distribution_has_no_version():
    assert installed_version("no-such-distribution-cudadoctor") == ""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch in this interpreter")
def test_the_installed_torch_is_read_without_importing_it():
    from importlib.metadata import version

    assert installed_version("torch") == version("torch")


def test_the_installed_nvidia_packages_are_listed_from_metadata():
    from importlib.metadata import version

    from cudadoctor.child.torch_probe import nvidia_packages

    # nvidia-ml-py is cudadoctor's own dependency, so it is there wherever this test runs
    assert nvidia_packages().get("nvidia-ml-py") == version("nvidia-ml-py")
    assert all(k.startswith("nvidia-") for k in nvidia_packages())
