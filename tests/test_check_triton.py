"""The Triton step (torch.triton): torch's plain ops can work while every Triton kernel (torch.compile, vLLM,
flash-attn's Triton kernels) fails. Each fault below was reproduced on the H200 (session 34): a user's @triton.jit
kernel and torch.compile failed with the errors in tests/data/h200/s34_triton_user_errors.txt, and the probe child's
own answers there are s34_triton_<case>.txt, replayed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from fakes.system import FakeCmd
from helpers import check, ids, steps
from scenarios import MARK, h200, torch_stages, triton_answer

from cudadoctor.facts.triton import PROBE_SCRIPT, build_info
from cudadoctor.child.records import parse_marked


PY = "/opt/torch/.venv/bin/python"  # the probe child's sys.executable, recorded


def step(fs, **opt):
    return steps(check(fs, only=("torch.triton",), **opt))["torch.triton"]


def fids(r) -> dict:
    return {f.id: f.status.value for f in r.findings}


@pytest.mark.parametrize("case, fid", [
    ("nocc", "torch.triton.no-c-compiler"),
    ("nopyh", "torch.triton.no-python-headers"),
    ("noldcache", "torch.triton.libcuda-not-found"),
    ("noexec", "torch.triton.cache-noexec"),
    ("readonly", "torch.triton.cache-unwritable"),
])
def test_each_fault_recorded_on_the_h200_fails_with_its_cause(case, fid):
    r = step(h200(triton=triton_answer(case)))
    assert r.status.value == "fail" and fids(r)[fid] == "fail"
    assert all(f.fix is not None and f.fix.commands for f in r.findings if f.id == fid)


def test_healthy_h200_compiles_and_runs_a_kernel():
    r = step(h200())
    assert r.status.value == "ok" and fids(r) == {"torch.triton.ok": "ok"}
    assert "3.6.0" in r.summary and "NVIDIA H200" in r.summary


def test_no_python_headers_names_the_interpreters_package():
    # gcc's "fatal error: Python.h: No such file or directory" is on the child's stderr only; the exception is a bare
    # CalledProcessError
    f = step(h200(triton=triton_answer("nopyh"))).findings[0]
    assert "Python 3.12" in f.summary and "sudo apt-get install -y python3.12-dev" in f.fix.commands


def test_a_failed_linker_cache_lookup_points_triton_at_the_loaded_libcuda():
    fs = h200(triton=triton_answer("noldcache"), torch=FakeCmd(_torch_with_libcuda()))
    f = step(fs).findings[0]
    assert f.id == "torch.triton.libcuda-not-found" and "ldconfig -p` fails" in f.summary
    assert f.fix.commands[0] == "export TRITON_LIBCUDA_PATH=/usr/local/nvidia/lib64"


def test_both_noexec_caches_are_named():
    r = step(h200(triton=triton_answer("noexec")))
    noexec = [f for f in r.findings if f.id == "torch.triton.cache-noexec"]
    assert [f.evidence["folder"] for f in noexec] == ["/tmp/nx/t", "/tmp/nx/i"]
    assert noexec[0].fix.commands[0] == "export TRITON_CACHE_DIR=$HOME/.cache/triton"
    assert noexec[1].fix.commands[0] == "export TORCHINDUCTOR_CACHE_DIR=$HOME/.cache/torchinductor"
    assert "noexec" in r.summary  # the step's line says the problem, not the probe's own success


def _torch_with_libcuda() -> str:
    out = []
    for line in torch_stages().splitlines():
        rec = json.loads(line[len(MARK):]) if line.startswith(MARK) else None
        if rec and rec.get("stage") == "libs":
            rec["libraries"] = ["/usr/local/nvidia/lib64/libcuda.so.580.159.04"]
            line = MARK + " " + json.dumps(rec)
        out.append(line)
    return "\n".join(out) + "\n"


def _edited(case: str, stage: str, **change) -> FakeCmd:
    """A recorded answer with one stage's record changed (None removes a key; stage=None drops nothing)."""
    a = triton_answer(case)
    lines = []
    for line in a.stdout.splitlines():
        rec = json.loads(line[len(MARK):])
        if rec.get("stage") == stage:
            rec.update(change)
            rec = {k: v for k, v in rec.items() if v is not None}
        lines.append(MARK + " " + json.dumps(rec))
    return FakeCmd("\n".join(lines) + "\n", a.stderr)


def test_a_triton_of_another_release_line_than_torch_wants_warns():
    r = step(h200(triton=_edited("healthy", "import", wants="triton==3.7.0")))
    assert fids(r) == {"torch.triton.ok": "ok", "torch.triton.version-mismatch": "warn"}
    f = r.findings[1]
    assert f.fix.commands == (f"{PY} -m pip install triton==3.7.0",)


def test_a_patch_release_apart_is_not_a_mismatch():
    r = step(h200(triton=_edited("healthy", "import", wants="triton==3.6.1")))
    assert fids(r) == {"torch.triton.ok": "ok"}


def test_triton_missing_where_torch_wants_one_warns_with_the_pin():
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", wants_have="", file=None,
                  import_error="ModuleNotFoundError: No module named 'triton'")
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.missing": "warn"}
    assert r.findings[0].fix.commands == (f"{PY} -m pip install triton==3.6.0",)


def test_no_triton_where_torch_names_none_is_not_judged():
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", wants="", wants_have="",
                  import_error="ModuleNotFoundError: No module named 'triton'")
    assert fids(step(h200(triton=ans))) == {"torch.triton.none": "skip"}


def test_a_triton_that_fails_to_import_is_a_failure_with_a_reinstall():
    ans = _edited("healthy", "import", installed=False, not_found=False, version="3.6.0",
                  import_error="ImportError: libtriton.so: cannot open shared object file: No such file or directory")
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.import-failed": "fail"}
    assert r.findings[0].fix.commands == (f"{PY} -m pip install triton==3.6.0 --force-reinstall",)


def test_an_old_gpu_is_named_when_its_kernel_fails():
    ans = _edited("healthy", "run", ok=False, checked=False, capability="6.1", device="Tesla P40",
                  error_type="RuntimeError", error="Internal Triton PTX codegen error")
    assert fids(step(h200(triton=ans))) == {"torch.triton.gpu-unsupported": "fail"}


def test_another_kernel_failure_keeps_the_error_and_offers_explain():
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="RuntimeError",
                  error="Triton Error [CUDA]: an illegal memory access was encountered")
    f = step(h200(triton=ans)).findings[0]
    assert f.id == "torch.triton.kernel-failed" and "illegal memory access" in f.summary
    assert f.fix.commands[0].startswith("cudadoctor explain ")


def test_a_hung_probe_is_a_failure_not_a_hang():
    hung = FakeCmd(triton_answer("healthy").stdout.split('{"ok"')[0].rsplit("\n", 1)[0] + "\n", hang=True)
    r = step(h200(triton=hung))
    assert fids(r) == {"torch.triton.hung": "fail"} and "compiling and launching" in r.findings[0].summary


def test_a_cpu_only_torch_is_not_judged():
    fs = h200(torch=FakeCmd(torch_stages(version="2.11.0+cpu", cuda=None, available=False, count=0)))
    assert fids(step(fs)) == {"torch.triton.not-run": "skip"}


def test_the_full_checklist_waits_on_torch_cuda():
    fs = h200(torch=FakeCmd(torch_stages(available=False, count=0, init_error="RuntimeError: no driver")))
    r = steps(check(fs))["torch.triton"]
    assert r.status.value == "skip" and "torch.cuda" in r.summary


def test_the_healthy_full_checklist_has_no_warning():
    assert {k: v for k, v in ids(check(h200())).items() if v in ("warn", "fail", "error")} == {}


def test_build_info_reads_every_recorded_case():
    for case in ("healthy", "nocc", "nopyh", "noldcache", "noexec", "readonly"):
        t = build_info(parse_marked(triton_answer(case).stdout, MARK, key="stage"))
        assert t.installed and t.version == "3.6.0" and t.wants == "triton==3.6.0" and t.run is not None
        assert t.triton_cache is not None and t.inductor_cache is not None


# ---- the real child, in this interpreter (CI has no GPU and a CPU-only torch: the kernel is skipped there)

def _fake_triton(tmp_path, body: str):
    pkg = tmp_path / "site" / "triton"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    (pkg / "language.py").write_text("constexpr = int\n")
    return tmp_path / "site"


def _run_child(tmp_path, site, *args, env=None):
    e = dict(os.environ, PYTHONPATH=str(site), **(env or {}))
    p = subprocess.run([sys.executable, PROBE_SCRIPT, *args], env=e, capture_output=True, text=True, timeout=120)
    return {r["stage"]: r for r in parse_marked(p.stdout, MARK, key="stage")}, p


def test_the_child_reports_a_triton_that_fails_to_import(tmp_path):
    site = _fake_triton(tmp_path, "raise ImportError('libtriton.so: cannot open shared object file')\n")
    recs, p = _run_child(tmp_path, site, "--no-run")
    assert recs["import"]["installed"] is False and not recs["import"]["not_found"]
    assert "libtriton.so" in recs["import"]["import_error"] and "done" in recs


def test_the_child_inspects_the_users_caches_and_cleans_its_own(tmp_path):
    site = _fake_triton(tmp_path, "__version__ = '3.6.0'\ndef jit(f):\n    return f\n")
    root = tmp_path / "cache" / "triton"
    old = root / "run-killed"
    old.mkdir(parents=True)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    recs, p = _run_child(tmp_path, site, "--cache", str(root),
                         env={"TRITON_CACHE_DIR": str(tmp_path / "mine"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert recs["import"]["installed"] is True and recs["import"]["version"] == "3.6.0", p.stderr
    caches = recs["static"]["caches"]
    assert caches["triton"]["path"] == str(tmp_path / "mine") and caches["triton"]["checked"] == str(tmp_path)
    assert caches["inductor"]["exists"] is True and caches["inductor"]["noexec"] in (True, False)
    assert "run" in recs and "done" in recs  # no CUDA here: the kernel is skipped, or fails on a CPU-only torch
    assert os.listdir(root) == []  # the killed run's folder (2 h old) and this run's own are gone
    assert not (tmp_path / "mine").exists()  # the user's cache is only inspected, never created


def test_the_child_finds_the_c_compiler_as_triton_does(tmp_path):
    site = _fake_triton(tmp_path, "__version__ = '3.6.0'\n")
    recs, _ = _run_child(tmp_path, site, "--no-run", env={"CC": "/nonexistent/cc"})
    assert recs["static"]["compiler"] == {"cc": "/nonexistent/cc", "from": "CC", "found": False}
    recs, _ = _run_child(tmp_path, site, "--no-run", env={"CC": "", "PATH": str(tmp_path)})
    assert recs["static"]["compiler"]["found"] is False and "run" not in recs
