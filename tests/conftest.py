import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.path.exists("/proc/driver/nvidia/version")


def pytest_collection_modifyitems(config, items):
    gpu = _has_gpu()
    nvcc = shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver"))
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))
