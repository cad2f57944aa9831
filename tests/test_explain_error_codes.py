"""CUDA error numbers printed alone ("CUDA error code 209", "GPUassert: code 700", "err_no=30"): the table
cudadoctor/explain/error_codes.toml, read into one pattern per number on the signature it names."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from cudadoctor.explain import signatures
from explain_sets import SIGS, answer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

with open(signatures.ERROR_CODES, "rb") as _f:
    TABLE = tomllib.load(_f)["code"]

# the forms real tools print a bare code in
FORMS = ["CUDA error code {n}", "CUDA error {n}", "cudaGetDeviceCount returned {n}", "CUDA error (code {n})",
         "CUDA failed with error {n}", "CUDA Error: {n}", "cuda error={n}", "Cuda error (err_no={n})", "CUDA error({n})",
         "CUDA_CHECK failed: error {n} at model.cu:88", "cudaError_t {n}", "GPUassert: code {n} kernel.cu 57",
         "CUDA runtime error ({n}) at THCGeneral.cpp:844", "cuInit() returned {n}", "Check failed: cudaError_t error = {n}",
         "cudaRuntimeGetVersion() failed with error #{n}"]


def test_the_table_names_known_ids_once_per_number():
    ids = {s.id for s in SIGS}
    numbers = [e["number"] for e in TABLE]
    assert len(numbers) == len(set(numbers))
    assert all(e["id"] in ids for e in TABLE)
    per_id: dict = {}
    for e in TABLE:
        per_id[e["id"]] = per_id.get(e["id"], 0) + 1
    for s in SIGS:  # one pattern per number, on the signature it names, none feeding the guesses' words
        assert sum(1 for p in s.patterns if p.code) == per_id.get(s.id, 0), s.id
        assert all(not p.words for p in s.patterns if p.code), s.id


def test_every_code_regex_compiles():
    for s in SIGS:
        for p in s.patterns:
            if p.code:
                assert p.regex.compiled().pattern


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: str(e["number"]))
@pytest.mark.parametrize("form", FORMS)
def test_a_bare_code_names_its_cause(entry, form):
    text = form.format(n=entry["number"])
    expect = entry["id"]
    if entry["number"] == 999 and form.startswith(("cuInit", "cudaGetDeviceCount")):
        expect = "no-driver-or-device"  # (round 29) 999 where CUDA initialises: a driver that cannot start, not a lost GPU
    assert answer(text, strict=True)[:1] == [expect], (text, answer(text, strict=True))


@pytest.mark.parametrize("text", [
    "make[1]: *** [CMakeFiles/Makefile2:123: src/cuda/CMakeFiles/cudaops.dir/all] Error 2",  # make's, not CUDA's
    "cudaMalloc of 2.5 GiB: error 2.5",
    "cuda devices found: 2 GPUs, error 2 GPUs busy",
    "custom error 2 in the data loader",  # no CUDA name
    "torch 2.1.0+cuda12.1: Process finished with exit code 2",
    "cuda_build.py: command returned non-zero exit status 2",
    "CUDA_VISIBLE_DEVICES=2 python train.py",
    "nvcc error 700 lines of warnings",
])
def test_a_number_that_is_no_cuda_code_is_not_read(text):
    got = answer(text, strict=True)
    assert "out-of-memory" not in got and "illegal-memory-access" not in got, (text, got)


CURRENT = [e for e in TABLE if not e.get("legacy")]


@pytest.mark.parametrize("entry", CURRENT, ids=lambda e: str(e["number"]))
def test_each_name_and_message_names_the_same_cause_as_the_number(entry):
    # what cudaGetErrorName / cudaGetErrorString print, as a tool prints them: the words agree with the number
    texts = [f"RuntimeError: CUDA error: {entry['message']}"] + [f"CUDA error: {n}" for n in entry["names"]]
    for text in texts:
        assert answer(text, strict=True)[:1] == [entry["id"]], (text, answer(text, strict=True))


def test_every_current_number_has_its_message():
    assert all(isinstance(e.get("message"), str) and e["message"] for e in CURRENT)


@pytest.mark.parametrize("text, not_id", [
    # a C++ front end's own diagnostic numbers (icc, EDG inside nvcc), not CUDA's
    ("/usr/local/cuda-11.4/include/crt/host_config.h(103): error #35: #error directive: -- unsupported ICC "
     "configuration!", "driver-too-old"),
    ("/usr/local/cuda/include/cuda_fp16.hpp(12): error #2-D: something about CUDA", "out-of-memory"),
])
def test_a_compilers_diagnostic_number_is_not_read(text, not_id):
    assert not_id not in answer(text, strict=True), (text, answer(text, strict=True))


def test_the_codes_refine_the_old_miss_of_a_miner():
    # NBMiner's old-numbered cudaErrorUnknown (30, before CUDA 10.1): the GPU crashed
    assert answer("Cuda error (err_no=30) please help!!!!", strict=True)[:1] == ["device-lost"]


@pytest.mark.parametrize("table, message", [
    ('[[code]]\nnumber = 700\nid = "no-such-id"\n', "unknown id"),
    ('[[code]]\nnumber = 700\nid = "illegal-memory-access"\n[[code]]\nnumber = 700\nid = "device-lost"\n', "twice"),
    ('[[code]]\nnumber = 0\nid = "illegal-memory-access"\n', "positive integer"),
    ('[[code]]\nnumber = 700\nid = "illegal-memory-access"\nweight = 2\n', "weight"),
    ('[[code]]\nnumber = 700\nid = "illegal-memory-access"\nalternatives = ["nope"]\n', "unknown ids"),
])
def test_a_malformed_table_is_refused(tmp_path, table, message):
    p = tmp_path / "codes.toml"
    p.write_text(table)
    with pytest.raises(signatures.SignatureError, match=message):
        signatures.with_codes(signatures.load_dir(signatures.SIGNATURE_DIR), p)


NAMES_CU = r"""
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#ifdef WITH_DRIVER
#include <cuda.h>
#endif
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    int n = atoi(argv[i]);
    const char* drv = "-";
#ifdef WITH_DRIVER
    if (cuGetErrorName((CUresult)n, &drv) != CUDA_SUCCESS) drv = "unrecognized";
#endif
    printf("%d|%s|%s|%s\n", n, cudaGetErrorName((cudaError_t)n), drv, cudaGetErrorString((cudaError_t)n));
  }
  return 0;
}
"""


def _names(tmp_path, driver: bool) -> dict:
    """{number: (runtime name, driver name, runtime message)} as this machine's CUDA prints them."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    src = tmp_path / "names.cu"
    src.write_text(NAMES_CU)
    exe = tmp_path / "names"
    flags = ["-DWITH_DRIVER", "-lcuda"] if driver else []
    subprocess.run([nvcc, *flags, "-o", str(exe), str(src)], check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(exe), *[str(e["number"]) for e in TABLE]], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return {int(n): (rt, drv, msg) for n, rt, drv, msg in (line.split("|", 3) for line in out.splitlines())}


@pytest.mark.nvcc
def test_the_table_agrees_with_the_cuda_runtime(tmp_path):
    # cudaGetErrorName needs no GPU and no driver: the numbers are checked against the installed toolkit's cudart
    names = _names(tmp_path, driver=False)
    for e in TABLE:
        runtime = names[e["number"]][0]
        if e.get("legacy"):  # a pre-10.1 number: nothing in today's enum, so it cannot be misread
            assert runtime == "unrecognized error code", (e["number"], runtime)
        else:
            assert runtime in e["names"], (e["number"], runtime, e["names"])
            assert names[e["number"]][2] == e["message"], (e["number"], names[e["number"]][2])


@pytest.mark.gpu
def test_the_table_agrees_with_the_cuda_driver(tmp_path):
    # cuGetErrorName comes from libcuda (the driver): run where a driver is installed
    names = _names(tmp_path, driver=True)
    for e in TABLE:
        driver = names[e["number"]][1]
        if e.get("legacy"):
            assert driver == "unrecognized", (e["number"], driver)
        elif driver != "unrecognized":  # some runtime-only numbers (35, 98) have no driver twin
            assert driver in e["names"], (e["number"], driver, e["names"])
