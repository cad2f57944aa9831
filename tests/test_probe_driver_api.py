"""The ctypes driver-API binding: what can be checked without a GPU, and the real thing with one."""

from __future__ import annotations

import ctypes.util
import os

import pytest

from cudadoctor.probes import driver_api as D


def test_version_encoding():
    assert D.version_str(13000) == "13.0"
    assert D.version_str(12090) == "12.9"
    assert D.version_str(11080) == "11.8"


def test_text_or_binary_images():
    assert D._is_text(b"//\n.version 9.0\n.target sm_80\n")
    assert not D._is_text(b"\x7fELF\x02\x01")
    assert not D._is_text(b"\x50\xed\x55\xba\x01\x00\x10\x00")


def test_missing_library_is_a_clear_error(tmp_path):
    with pytest.raises(D.DriverLoadError, match="cannot load"):
        D.Driver(str(tmp_path / "libcuda.so.1"))


def test_cuda_error_carries_code_and_name():
    e = D.CudaError("cuModuleLoadDataEx", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available", "log")
    assert e.to_dict() == {"call": "cuModuleLoadDataEx", "code": 209, "name": "CUDA_ERROR_NO_BINARY_FOR_GPU",
                           "message": "no kernel image is available", "log": "log"}
    assert "209" in str(e)


@pytest.mark.gpu
def test_driver_api_on_the_gpu():
    """In-process here only because this is a test on a GPU machine; cudadoctor itself uses a child."""
    if not (ctypes.util.find_library("cuda") or os.path.exists("/usr/lib/x86_64-linux-gnu/libcuda.so.1")):
        pytest.skip("no libcuda")
    drv = D.Driver()
    drv.init()
    assert drv.driver_version() >= 11000
    dev = drv.device(0)
    cc = drv.compute_capability(dev)
    assert cc[0] >= 3 and drv.name(dev) and drv.total_mem(dev) > 0
    with drv.context(dev):
        free, total = drv.mem_info()
        assert 0 < free <= total
        p = drv.alloc(1024)
        drv.htod(p, bytes(range(256)) * 4)
        assert drv.dtoh(p, 1024) == bytes(range(256)) * 4
        drv.free(p)
        with pytest.raises(D.CudaError) as e:
            drv.load_module(b"\x7fELF garbage")
        assert e.value.code in (D.CUDA_ERROR_INVALID_IMAGE, 218, 200, 1)
