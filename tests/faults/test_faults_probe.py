"""`cudadoctor probe` on a broken driver, and two probes sharing one build cache at once.

This machine has nvcc but no GPU: the probe builds its kernels (so the cache is exercised for real) and
the launch part meets whatever libcuda.so.1 the loader finds: none, or a fake one whose cuInit fails.
Documented exit codes: 0 reality matched the rule, 1 a mismatch or a kernel failed, 2 nothing could be
built or launched.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from faultkit import MARGIN, PY, need_command
import fakelibs


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory):
    if not fakelibs.compiler():
        pytest.skip("no C compiler to build a fake libcuda.so.1")
    d = tmp_path_factory.mktemp("fakecuda")
    fakelibs.build(d, "libcuda.so.1", fakelibs.CUDA_C)
    return d


@pytest.fixture
def probe(faults):
    need_command("probe")
    if not (os.path.exists("/usr/local/cuda/bin/nvcc") or subprocess.run(
            ["sh", "-c", "command -v nvcc"], capture_output=True).returncode == 0):
        pytest.skip("needs nvcc to build the probes")
    return faults


def _builds(rep) -> dict:
    return {b["name"]: b for b in rep["builds"]}


@pytest.mark.nvcc
def test_probe_cuinit_fails(probe, fake_libcuda):
    r = probe.run("probe", "--cc", "9.0", "--json", limit=60, codes=(0, 2),
                  env={"LD_LIBRARY_PATH": str(fake_libcuda), "FAKE_CUINIT": "999"})
    rep = r.report()
    assert "cuInit" in rep["launch_error"] and "CUDA_ERROR_UNKNOWN" in rep["launch_error"]
    assert rep["launch_kind"] == "cuda-error"
    assert all(b["sass"] or b["ptx"] or b["build_error"] for b in rep["builds"])


@pytest.mark.nvcc
def test_probe_exit_code_when_nothing_can_be_launched(probe, fake_libcuda):
    probe.run("probe", "--cc", "9.0", "--json", limit=60, codes=(2,),
              env={"LD_LIBRARY_PATH": str(fake_libcuda), "FAKE_CUINIT": "999"})


@pytest.mark.nvcc
@pytest.mark.slow
def test_probe_cuinit_hangs(probe, fake_libcuda):
    # the device query child has a fixed 30 s limit (cudadoctor/probes/run.py DEVICE_TIMEOUT)
    r = probe.run("probe", "--cc", "9.0", "--json", limit=30 + 2 + 60, codes=(0, 2),
                  env={"LD_LIBRARY_PATH": str(fake_libcuda), "FAKE_CUINIT": "hang"})
    rep = r.report()
    assert rep["launch_kind"] == "timeout" and "no answer" in rep["launch_error"]


@pytest.mark.nvcc
def test_probe_heals_a_damaged_cache(probe):
    r = probe.run("probe", "--cc", "8.6", "--json", "--quick", limit=120)
    for f in (probe.cache / "probes").iterdir():
        f.write_bytes(f.read_bytes()[:100])  # a truncated artifact (disk full, killed older version)
    r = probe.run("probe", "--cc", "8.6", "--json", "--quick", limit=120)
    for b in r.report()["builds"]:
        assert not b["build_error"], b


@pytest.mark.nvcc
@pytest.mark.slow
def test_two_probes_share_the_cache(probe):
    """Two probes at once on an empty cache: both complete, agree, and leave only whole artifacts."""
    env = dict(probe.env)
    argv = [PY, "-m", "cudadoctor", "probe", "--cc", "8.6", "--json"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(probe.tmp))
             for _ in range(2)]
    outs = [p.communicate(timeout=300 + MARGIN) for p in procs]
    took = time.monotonic() - t0
    import json

    reps = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode in (0, 1, 2) and b"Traceback" not in err, err[-2000:]
        reps.append(json.loads(out))
    a, b = (_builds(x) for x in reps)
    assert set(a) == set(b) and a
    assert any(not x["cached"] for x in list(a.values()) + list(b.values())), "nothing built: the cache was not empty"
    for name in a:
        assert (a[name]["sass"], a[name]["ptx"]) == (b[name]["sass"], b[name]["ptx"]), name
        assert not a[name]["build_error"] and not b[name]["build_error"], (a[name], b[name])
    files = sorted((probe.cache / "probes").iterdir())
    leftovers = [f.name for f in files if f.suffix not in (".fatbin", ".cubin", ".ptx", ".json", ".out", "")
                 or f.name.startswith(".") or ".tmp" in f.name]
    assert not leftovers, f"temporary files left in the cache: {leftovers}"
    # every artifact in the cache is whole: archs reads each one
    arts = [f for f in files if f.suffix in (".fatbin", ".cubin")]
    assert arts
    r = probe.run("archs", "--json", "--cc", "8.6", *arts, codes=(0, 1), limit=20)
    assert not [f for f in r.report()["files"] if f.get("error")]
    # and a third run takes everything from the cache
    r = probe.run("probe", "--cc", "8.6", "--json", limit=60, codes=(0, 1, 2))
    assert all(x["cached"] for x in r.report()["builds"] if not x["build_error"])
    assert took < 300


@pytest.mark.nvcc
@pytest.mark.parametrize("where", ["a-file", "unwritable"])
def test_probe_with_an_unusable_cache_dir(probe, where):
    target = probe.tmp / "afile" if where == "a-file" else "/proc/cudadoctor-cache"
    if where == "a-file":
        target.write_text("")
    r = probe.run("probe", "--quick", "--cc", "9.0", "--json", env={"CUDADOCTOR_CACHE_DIR": str(target)},
                  codes=(0, 1, 2), limit=120)
    assert "cache" in r.out + r.err
