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
    ("empty", "torch.triton.cache-empty"),
    ("nouser", "torch.triton.no-user-name"),
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


def test_a_noexec_inductor_folder_beside_a_good_triton_cache_is_a_warning_as_recorded():
    # recorded on the H200: with TRITON_CACHE_DIR fine, a user's torch.compile ran although Inductor's folder was noexec
    r = step(h200(triton=triton_answer("indnx")))
    assert fids(r) == {"torch.triton.ok": "ok", "torch.triton.cache-noexec": "warn"}


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


def test_both_noexec_caches_are_named_with_a_folder_that_works():
    r = step(h200(triton=_edited("noexec", "static", usable=["/root/.cache", "/var/tmp"])))
    noexec = [f for f in r.findings if f.id == "torch.triton.cache-noexec"]
    assert [(f.evidence["folder"], f.status.value) for f in noexec] == [("/tmp/nx/t", "fail"), ("/tmp/nx/i", "fail")]
    assert noexec[0].fix.commands[0] == "export TRITON_CACHE_DIR=/root/.cache/triton"
    assert noexec[1].fix.commands[0] == "export TORCHINDUCTOR_CACHE_DIR=/root/.cache/torchinductor"
    assert "noexec" in r.summary  # the step's line says the problem, not the probe's own success


def test_no_usable_folder_is_said_not_invented():
    f = next(f for f in step(h200(triton=_edited("noexec", "static", usable=[]))).findings
             if f.id == "torch.triton.cache-noexec")
    assert f.fix.commands[0].startswith("# no writable folder") and "$HOME" not in " ".join(f.fix.commands)


def _torch_with_libcuda() -> str:
    out = []
    for line in torch_stages().splitlines():
        rec = json.loads(line[len(MARK):]) if line.startswith(MARK) else None
        if rec and rec.get("stage") == "libs":
            rec["libraries"] = ["/usr/local/nvidia/lib64/libcuda.so.580.159.04"]
            line = MARK + " " + json.dumps(rec)
        out.append(line)
    return "\n".join(out) + "\n"


def _edited(case: str, stage: str, upto: str = "", stderr=None, returncode: int = 0, **change) -> FakeCmd:
    """A recorded answer with one stage's record changed (None removes a key); `upto`: cut after that record (a child
    that died there)."""
    a = triton_answer(case)
    lines = []
    for line in a.stdout.splitlines():
        rec = json.loads(line[len(MARK):])
        if rec.get("stage") == stage:
            for k, v in change.items():
                if isinstance(v, dict) and isinstance(rec.get(k), dict):
                    rec[k] = dict(rec[k], **v)
                else:
                    rec[k] = v
            rec = {k: v for k, v in rec.items() if v is not None}
        lines.append(MARK + " " + json.dumps(rec))
        if upto and (rec.get("stage"), rec.get("part")) == tuple(upto.split(":")):
            break
    return FakeCmd("\n".join(lines) + "\n", a.stderr if stderr is None else stderr, returncode)


def test_a_triton_of_another_release_line_than_torch_wants_warns():
    r = step(h200(triton=_edited("healthy", "import", torch_requires=['triton==3.7.0; platform_system == "Linux"'])))
    assert fids(r) == {"torch.triton.ok": "ok", "torch.triton.version-mismatch": "warn"}
    f = r.findings[1]
    assert f.fix.commands == (f"{PY} -m pip install triton==3.7.0",)


def test_a_patch_release_apart_is_not_a_mismatch():
    r = step(h200(triton=_edited("healthy", "import", torch_requires=["triton==3.6.1"])))
    assert fids(r) == {"torch.triton.ok": "ok"}


def test_triton_missing_where_torch_wants_one_warns_with_the_pin():
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", file=None,
                  dists={"triton": "", "pytorch-triton": ""}, import_error="ModuleNotFoundError: No module named 'triton'")
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.missing": "warn"}
    assert r.findings[0].fix.commands == (f"{PY} -m pip install triton==3.6.0",)


def test_no_triton_where_torch_names_none_is_not_judged():
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", torch_requires=[],
                  dists={"triton": "", "pytorch-triton": ""}, import_error="ModuleNotFoundError: No module named 'triton'")
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
    for case in ("healthy", "nocc", "nopyh", "noldcache", "noexec", "readonly", "indnx", "empty", "nouser"):
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


# ---- the review's cases (session 34): each a wrong verdict of the first version

def test_a_child_that_dies_in_the_kernel_is_a_crash_not_a_skip():
    ans = _edited("healthy", "static", upto="begin:run", stderr="Fatal Python error: Segmentation fault\n",
                  returncode=-11)
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.crashed": "fail"}
    assert "--no-gpu-ops" not in " ".join(f.summary + f.detail for f in r.findings)


def test_a_child_that_dies_before_the_kernel_is_a_warning():
    ans = _edited("healthy", "import", upto="begin:static", stderr="AttributeError: module 'os' has no attribute\n",
                  returncode=1)
    assert fids(step(h200(triton=ans))) == {"torch.triton.probe-failed": "warn"}


def test_no_gpu_ops_is_said_only_when_asked():
    ans = _edited("healthy", "run", skipped="torch.cuda.is_available() is False", ok=False)
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.not-run": "skip"} and "--no-gpu-ops" not in r.summary


def test_a_ptxas_without_its_exec_bit_is_not_blamed_on_the_cache():
    tool = "/opt/torch/.venv/lib/python3.12/site-packages/triton/backends/nvidia/bin/ptxas"
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="PermissionError",
                  error=f"[Errno 13] Permission denied: '{tool}'")
    f = step(h200(triton=ans)).findings[0]
    assert f.id == "torch.triton.tool-not-executable" and tool in f.summary and f"chmod +x {tool}" in f.fix.commands


def test_a_noexec_folder_of_cudadoctors_own_is_not_the_users():
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="ImportError", work="/root/.cache/cudadoctor/t/run-1",
                  error="/root/.cache/cudadoctor/t/run-1/ABC/cuda_utils.so: failed to map segment from shared object")
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.probe-cache": "warn"}


def test_no_compiler_is_not_read_from_the_word_compiler():
    ans = _edited("healthy", "static", compiler={"cc": "", "from": "", "found": False})
    ans = FakeCmd(ans.stdout.replace('"ok": true', '"ok": false, "error_type": "PTXASError", "error": "PTXAS error: '
                                     'Internal Triton PTX codegen error", "where": "triton/compiler/compiler.py"'),
                  ans.stderr)
    assert fids(step(h200(triton=ans))) == {"torch.triton.kernel-failed": "fail"}


def test_a_conda_cc_that_is_not_there_is_named():
    ans = _edited("healthy", "static", compiler={"cc": "x86_64-conda-linux-gnu-cc", "from": "CC", "found": False})
    ans = FakeCmd(ans.stdout.replace('"ok": true', '"ok": false, "error_type": "FileNotFoundError", "error": '
                                     '"[Errno 2] No such file or directory: \'x86_64-conda-linux-gnu-cc\'"'), ans.stderr)
    f = step(h200(triton=ans)).findings[0]
    assert f.id == "torch.triton.no-c-compiler" and "CC=x86_64-conda-linux-gnu-cc is not found" in f.summary


def test_no_package_manager_command_off_linux():
    from cudadoctor.checks.registry import Context
    from cudadoctor.checks.triton_failures import _install
    from cudadoctor.facts.types import PlatformInfo
    from cudadoctor.model import Fact

    assert _install(Context({"platform": Fact.found(PlatformInfo(system="Windows"))}), "gcc", "gcc") == ()
    linux = Context({"platform": Fact.found(PlatformInfo(system="Linux", distro="Rocky Linux 9.4"))})
    assert _install(linux, "gcc", "gcc") == ("sudo dnf install -y gcc",)


def test_an_old_gpu_beside_the_probes_is_named():
    devs = [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "total_memory_mib": 143155, "uuid": "x"},
            {"index": 1, "name": "Tesla P40", "capability": "6.1", "total_memory_mib": 22919, "uuid": "y"}]
    r = step(h200(torch=FakeCmd(torch_stages(count=2, devices=devs))))
    assert fids(r) == {"torch.triton.ok": "ok", "torch.triton.gpu-unsupported": "warn"}
    f = r.findings[1]
    assert "cuda:1 Tesla P40 (cc 6.1)" in f.summary and "export CUDA_VISIBLE_DEVICES=0" in f.fix.commands


def test_markers_are_evaluated_for_this_interpreter():
    req = ['triton==3.1.0; platform_system == "Linux" and platform_machine == "x86_64" and python_version < "3.13"']
    env = {"platform_system": "Linux", "platform_machine": "aarch64", "python_version": "3.12"}
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", file=None, torch_requires=req,
                  marker_env=env, dists={"triton": "", "pytorch-triton": ""},
                  import_error="ModuleNotFoundError: No module named 'triton'")
    assert fids(step(h200(triton=ans))) == {"torch.triton.none": "skip"}
    ans = _edited("healthy", "import", installed=False, not_found=True, version="", file=None, torch_requires=req,
                  marker_env=dict(env, platform_machine="x86_64"), dists={"triton": "", "pytorch-triton": ""},
                  import_error="ModuleNotFoundError: No module named 'triton'")
    assert fids(step(h200(triton=ans))) == {"torch.triton.missing": "warn"}


def test_a_nightlys_triton_comes_from_the_nightly_index_and_two_installs_are_named():
    ans = _edited("healthy", "import", torch_requires=["pytorch-triton==3.6.0+git9a2b3c4d"], marker_env={},
                  dists={"triton": "3.5.0", "pytorch-triton": "3.6.0+git9a2b3c4d"}, version="3.5.0")
    r = step(h200(triton=ans))
    got = fids(r)
    assert got["torch.triton.two-installs"] == "warn" and got["torch.triton.version-mismatch"] == "warn"
    mm = next(f for f in r.findings if f.id == "torch.triton.version-mismatch")
    assert "--index-url https://download.pytorch.org/whl/nightly/" in mm.fix.commands[0]
    two = next(f for f in r.findings if f.id == "torch.triton.two-installs")
    assert two.fix.commands[0].endswith("pip uninstall -y triton")


def test_an_empty_triton_cache_dir_fails():
    ans = _edited("healthy", "static", caches={"triton": {"path": "", "exists": False, "checked": "", "env": "empty"},
                                               "inductor": {"path": "/tmp/torchinductor_root", "exists": True,
                                                            "checked": "/tmp/torchinductor_root", "writable": True,
                                                            "noexec": False}})
    assert fids(step(h200(triton=ans)))["torch.triton.cache-empty"] == "fail"


def test_a_noexec_inductor_folder_is_a_warning_when_triton_caches_elsewhere():
    caches = {"triton": {"path": "/root/tc", "exists": True, "checked": "/root/tc", "writable": True, "noexec": False,
                         "env": "set"},
              "inductor": {"path": "/tmp/nx/i", "exists": False, "checked": "/tmp/nx", "writable": True, "noexec": True}}
    r = step(h200(triton=_edited("healthy", "static", caches=caches)))
    assert fids(r) == {"torch.triton.ok": "ok", "torch.triton.cache-noexec": "warn"}


def test_a_uid_without_a_name_fails_torch_compiles_default_folder():
    caches = {"inductor": {"path": "/tmp/torchinductor_unknown", "exists": False, "checked": "/tmp", "writable": True,
                           "noexec": False, "env": "", "user_error": "KeyError: 'getpwuid(): uid not found: 4242'"}}
    r = step(h200(triton=_edited("healthy", "static", caches=caches, usable=["/tmp"])))
    f = next(f for f in r.findings if f.id == "torch.triton.no-user-name")
    assert f.status.value == "fail" and f.fix.commands[0] == "export TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor"


def test_headers_installed_but_looked_for_elsewhere():
    stderr = "/tmp/x/main.c:1:10: fatal error: Python.h: No such file or directory\n"
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="CalledProcessError", stderr=stderr,
                  error="Command '['/usr/bin/gcc', '/tmp/x/main.c', '-I/usr/local/include/python3.10']' returned "
                        "non-zero exit status 1.")
    f = step(h200(triton=ans)).findings[0]
    assert f.id == "torch.triton.python-headers-elsewhere" and "/usr/local/include/python3.10" in f.summary


def test_no_ldconfig_at_all_gives_only_the_variable():
    ans = _edited("noldcache", "static", libcuda={"ldconfig_error": "FileNotFoundError: [Errno 2] No such file or "
                                                                    "directory: '/sbin/ldconfig'", "ldconfig_missing": True})
    ans = FakeCmd(ans.stdout.replace("Command '['/sbin/ldconfig', '-p']' returned non-zero exit status 1.",
                                     "[Errno 2] No such file or directory: '/sbin/ldconfig'"), "")
    f = step(h200(triton=ans, torch=FakeCmd(_torch_with_libcuda()))).findings[0]
    assert f.id == "torch.triton.libcuda-not-found" and "no /sbin/ldconfig" in f.summary
    assert f.fix.commands == ("export TRITON_LIBCUDA_PATH=/usr/local/nvidia/lib64",)


def test_a_busy_exclusive_gpu_is_not_a_triton_failure():
    from scenarios import nvml_answer
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="RuntimeError",
                  error="CUDA error: CUDA-capable device(s) is/are busy or unavailable")
    fs = h200(triton=ans, nvml=FakeCmd(nvml_answer(gpu={"compute_mode": "Exclusive_Process"})))
    assert fids(step(fs)) == {"torch.triton.not-run": "skip"}


def test_a_slow_import_is_not_called_a_hang():
    hung = FakeCmd(triton_answer("healthy").stdout.split('{"torch_version"')[0].rsplit("\n", 1)[0] + "\n", hang=True)
    r = step(h200(triton=hung))
    assert fids(r) == {"torch.triton.slow": "warn"}


def test_a_crash_while_importing_triton_is_a_failure():
    ans = _edited("healthy", "python", upto="begin:import", stderr="Fatal Python error: Segmentation fault\n",
                  returncode=-11)
    r = step(h200(triton=ans))
    assert fids(r) == {"torch.triton.crashed": "fail"} and "importing triton" in r.findings[0].detail


def test_an_exclusive_mode_gpu_is_left_to_the_torch_probe():
    # one process at a time may hold it: the Triton probe does not launch beside the torch probe (its statics stand)
    from scenarios import nvml_answer
    fs = h200(nvml=FakeCmd(nvml_answer(gpu={"compute_mode": "Exclusive_Process"})),
              triton=_edited("noexec", "run", ok=None, checked=None, device=None, capability=None, seconds=None))
    r = step(fs)
    got = fids(r)
    assert got["torch.triton.not-run"] == "skip" and got["torch.triton.cache-noexec"] == "fail"
    assert "exclusive compute mode" in next(f for f in r.findings if f.id == "torch.triton.not-run").summary
    assert any("--no-run" in c for c in fs.calls)


def test_a_kernel_that_fails_under_forced_ptx_jit_names_the_variable():
    # (session 35, the H200 under CUDA_FORCE_PTX_JIT=1: "a Triton kernel failed: CUDA error: no kernel image is
    # available for execution on the device"; Triton loads SASS only, which the variable makes CUDA ignore)
    ans = _edited("healthy", "run", ok=False, checked=False, error_type="RuntimeError",
                  error="CUDA error: no kernel image is available for execution on the device")
    f = step(h200(env={"CUDA_FORCE_PTX_JIT": "1"}, triton=ans)).findings[0]
    assert f.id == "torch.triton.kernel-failed" and f.fix.commands[0] == "unset CUDA_FORCE_PTX_JIT"
    f = step(h200(triton=ans)).findings[0]
    assert f.id == "torch.triton.kernel-failed" and f.fix.commands[0].startswith("cudadoctor explain ")
