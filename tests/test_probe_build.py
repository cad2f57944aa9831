"""Probe builds: the per-arch plan, the cache (key, atomic writes, --no-cache), real nvcc builds read
back with the fatbin reader, and the parent side of the launch (records, verdicts)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys

import pytest

from cudadoctor.compat import NATIVE, NO_IMAGE, PTX_JIT, PTX_TOO_NEW
from cudadoctor.probes import build as B
from cudadoctor.probes import fatbin
from cudadoctor.probes import run as R
from cudadoctor.system.host import HostSystem

KERNELS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "probe_kernels")
NVCC13 = B.Compiler("nvcc", "nvcc", "13.0", "nvcc 13.0 V13.0.88",
                    ["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_110", "sm_103",
                     "sm_120", "sm_121"])


def _plan(cc, **kw):
    return {s.name: s.targets for s in B.plan(cc, NVCC13, **kw)}


def test_plan_for_h200():
    p = _plan((9, 0))
    assert p["native"] == (("compute_90", "sm_90"),)
    assert p["ptx-older"] == (("compute_89", "compute_89"),)
    assert p["sass-foreign"] == (("compute_89", "sm_89"),)  # an older major: "no kernel image" on 9.0
    assert p["ptx-newer"] == (("compute_100", "compute_100"),)
    assert p["arch-specific"] == (("compute_90a", "sm_90a"),)
    assert list(_plan((9, 0), quick=True)) == ["native", "sass-foreign"]


def test_plan_edges():
    p = _plan((7, 5))
    assert "ptx-older" not in p  # nothing older than the oldest arch nvcc 13 builds
    assert p["sass-foreign"] == (("compute_80", "sm_80"),)  # no older major: a newer one
    assert "arch-specific" not in p
    p = _plan((12, 1))
    assert p["arch-specific"] == (("compute_121a", "sm_121a"),)
    assert "ptx-newer" not in p
    assert p["sass-foreign"] == (("compute_110", "sm_110"),)


def test_every_plan_entry_is_judged_as_its_purpose_says():
    from cudadoctor.compat import select_image

    for cc in [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]:
        for spec in B.plan(cc, NVCC13):
            sass, ptx = spec.images
            v = select_image(sass, ptx, cc).verdict
            want = {"native": NATIVE, "arch-specific": NATIVE, "ptx-older": PTX_JIT,
                    "sass-foreign": NO_IMAGE, "ptx-newer": NO_IMAGE}[spec.name]
            assert v == want, (cc, spec.name)


def test_cache_key_depends_on_source_compiler_and_flags():
    k = B.cache_key(b"src", "nvcc 13.0 V13.0.88", ["-fatbin", "-gencode", "arch=compute_90,code=sm_90"])
    assert k == B.cache_key(b"src", "nvcc 13.0 V13.0.88", ["-fatbin", "-gencode", "arch=compute_90,code=sm_90"])
    assert k != B.cache_key(b"src2", "nvcc 13.0 V13.0.88", ["-fatbin", "-gencode", "arch=compute_90,code=sm_90"])
    assert k != B.cache_key(b"src", "nvcc 12.9 V12.9.86", ["-fatbin", "-gencode", "arch=compute_90,code=sm_90"])
    assert k != B.cache_key(b"src", "nvcc 13.0 V13.0.88", ["-fatbin", "-gencode", "arch=compute_80,code=sm_80"])


def _writer(path: str, fill: int, n: int) -> None:
    for _ in range(n):
        B.atomic_write(path, bytes([fill]) * 200_000, make_dirs=True)  # as the probe cache writes


def test_concurrent_atomic_writes_never_leave_a_partial_file(tmp_path):
    dest = str(tmp_path / "probes" / "x.fatbin")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(dest, fill, 30)) for fill in (1, 2, 3)]
    for p in procs:
        p.start()
    seen = 0
    while any(p.is_alive() for p in procs):
        if os.path.exists(dest):
            data = open(dest, "rb").read()
            assert len(data) == 200_000 and len(set(data)) == 1
            seen += 1
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(set(open(dest, "rb").read())) == 1
    assert not [n for n in os.listdir(tmp_path / "probes") if n.startswith(".tmp-")]


@pytest.mark.nvcc
def test_nvcc_build_is_cached_and_no_cache_rebuilds(tmp_path):
    s = HostSystem()
    comp = B.nvcc_compiler(s, B.find_nvcc(s))
    assert comp is not None and comp.kind == "nvcc" and comp.codes
    spec = B.plan((9, 0), comp)[0]
    first = B.build(s, comp, spec, KERNELS, cache_dir=str(tmp_path))
    assert first.ok and not first.cached, first.error
    assert first.path.startswith(str(tmp_path))
    assert fatbin.read_file(s, first.path).sass == ["sm_90"]
    again = B.build(s, comp, spec, KERNELS, cache_dir=str(tmp_path))
    assert again.cached and again.path == first.path
    fresh = B.build(s, comp, spec, KERNELS, use_cache=False, cache_dir=str(tmp_path))
    assert fresh.ok and not fresh.cached


@pytest.mark.nvcc
def test_nvcc_refusal_is_a_result(tmp_path):
    s = HostSystem()
    comp = B.nvcc_compiler(s, B.find_nvcc(s))
    spec = B.BuildSpec("arch-specific", "minimal.cu", (("compute_89a", "sm_89a"),))
    b = B.build(s, comp, spec, KERNELS, cache_dir=str(tmp_path))
    assert not b.ok and b.unsupported and b.error


@pytest.mark.nvcc
@pytest.mark.parametrize("source", ["gemm.cu", "attention.cu", "minimal.cu"])
def test_probe_kernels_compile_for_several_archs(tmp_path, source):
    s = HostSystem()
    comp = B.nvcc_compiler(s, B.find_nvcc(s))
    spec = B.BuildSpec("k", source, (("compute_80", "sm_80"), ("compute_90", "sm_90"), ("compute_90", "compute_90")))
    b = B.build(s, comp, spec, KERNELS, cache_dir=str(tmp_path))
    assert b.ok, b.error
    got = fatbin.read_file(s, b.path)
    assert (got.sass, got.ptx) == (["sm_80", "sm_90"], ["compute_90"])


@pytest.mark.nvcc
def test_run_probes_builds_and_predicts_without_a_gpu(tmp_path):
    """--cc on a machine without a usable driver: every build made, read back and judged; nothing launched."""
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("a GPU machine: the launch path is exercised by the gpu test")
    res = R.run_probes(HostSystem(), (9, 0), kernels=False, runtime=False, kernels_dir=KERNELS,
                       cache_dir=str(tmp_path))
    assert res.launch_error  # no libcuda here
    rows = {r.name: r for r in res.rows}
    assert {n: (r.sass, r.ptx, r.predicted) for n, r in rows.items()} == {
        "native": (["sm_90"], [], NATIVE),
        "ptx-older": ([], ["compute_89"], PTX_JIT),
        "sass-foreign": (["sm_89"], [], NO_IMAGE),
        "ptx-newer": ([], ["compute_100"], NO_IMAGE),
        "arch-specific": (["sm_90a"], [], NATIVE),
    }
    assert all(r.match is None for r in res.rows)  # nothing observed, nothing claimed
    d = res.to_dict()
    assert d["cc"] == "9.0" and d["mismatches"] == []


def test_launch_child_answers_with_records():
    s = HostSystem()
    recs, err, kind = R.launch_child(s, {"builds": []}, 60)
    kinds = {r.get("type") for r in recs}
    assert "device" in kinds or ("fatal" in kinds and err and kind)
    r = s.run([sys.executable, "-m", "cudadoctor.probes.launch"], timeout=60, input_bytes=b"{not json")
    assert '"bad-plan"' in r.stdout


def test_observed_verdicts_from_launch_records():
    ok = {"type": "build", "ok": True, "result_ok": True, "cuda_arch": 900}
    assert R.observed_from(ok, ["sm_90"], (9, 0))[0] == NATIVE
    jit = {"type": "build", "ok": True, "result_ok": True, "cuda_arch": 800}
    assert R.observed_from(jit, [], (9, 0))[0] == PTX_JIT
    # sm_75 SASS + compute_75 PTX on 9.0 (nvcc's default build): it ran, through the JIT
    assert R.observed_from({"ok": True, "cuda_arch": 750}, ["sm_75"], (9, 0))[0] == PTX_JIT
    e209 = {"ok": False, "error": {"call": "cuModuleLoadDataEx", "code": 209, "name": "CUDA_ERROR_NO_BINARY_FOR_GPU"}}
    v, text = R.observed_from(e209, ["sm_80"], (9, 0))
    assert v == NO_IMAGE and "209" in text
    assert R.observed_from({"ok": False, "error": {"code": 222}}, [], (9, 0))[0] == PTX_TOO_NEW
    assert R.observed_from({"ok": False, "error": {"code": 700, "name": "X"}}, [], (9, 0))[0] == "error:X"


def test_row_match_compares_every_observation():
    r = R.Row("native", "", "", ["sm_90"], [], predicted=NATIVE, driver_api=NATIVE, runtime_api=NATIVE)
    assert r.match is True
    r.runtime_api = NO_IMAGE
    assert r.match is False
    assert R.Row("x", "", "", predicted=NATIVE).match is None


def test_runtime_program_output_is_read(tmp_path):
    from fakes.system import FakeCmd, FakeSystem

    fs = FakeSystem()
    line = {"stage": "launch", "code": 209, "name": "cudaErrorNoKernelImageForDevice", "sync_code": 0,
            "result_ok": False}
    fs.add_exe("/cache/rt", FakeCmd(stdout=json.dumps(line) + "\n"))
    v, text = R.runtime_observed(fs, "/cache/rt", ["sm_80"], (9, 0))
    assert v == NO_IMAGE and "cudaErrorNoKernelImageForDevice" in text
    ok = dict(line, code=0, name="cudaSuccess", result_ok=True)
    fs.add_exe("/cache/rt2", FakeCmd(stdout=json.dumps(ok)))
    assert R.runtime_observed(fs, "/cache/rt2", ["sm_90"], (9, 0))[0] == NATIVE
    fs.add_exe("/cache/hang", FakeCmd(hang=True))
    assert R.runtime_observed(fs, "/cache/hang", [], (9, 0), timeout=0.1)[0] == "timeout"


def _nvrtc_site() -> list:
    import site

    extra = os.environ.get("CUDADOCTOR_TEST_NVRTC_SITE")
    return ([extra] if extra else []) + site.getsitepackages()


def test_nvrtc_builds_every_plan_entry(tmp_path):
    """The NVRTC fallback (libnvrtc from a toolkit or the nvidia-cuda-nvrtc wheel), when one is here."""
    s = HostSystem()
    comp, why = B.pick_compiler(s, "nvrtc", _nvrtc_site())
    if comp is None:
        pytest.skip(f"no libnvrtc here ({why}); set CUDADOCTOR_TEST_NVRTC_SITE to a folder holding nvidia/*/lib")
    assert comp.kind == "nvrtc" and comp.codes
    for spec in B.plan((9, 0), comp) + B.kernel_specs((9, 0)):
        b = B.build(s, comp, spec, KERNELS, cache_dir=str(tmp_path))
        assert b.ok, (spec.name, b.error)
        got = fatbin.read_file(s, b.path)
        assert (got.sass, got.ptx) == (list(spec.images[0]), list(spec.images[1]))
        assert got.format == ("cubin" if spec.images[0] else "ptx")
    bad = B.BuildSpec("x", "minimal.cu", (("compute_89a", "sm_89a"),))
    b = B.build(s, comp, bad, KERNELS, cache_dir=str(tmp_path))
    assert not b.ok and b.error
