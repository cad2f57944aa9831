"""The real CLI as a user runs it, in a subprocess, on this machine (no GPU in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cudadoctor.facts.registry import Options
from cudadoctor.facts.torch import gather_torch
from cudadoctor.system.host import HostSystem


def run_cli(*args, env=None, timeout=180):
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("NO_COLOR", "1")
    p = subprocess.run([sys.executable, "-m", "cudadoctor", *args], capture_output=True, text=True,
                       env=e, timeout=timeout)
    return p


def test_help_is_fast_and_light():
    code = ("import sys, cudadoctor.cli; heavy = [m for m in ('torch', 'pynvml', 'rich.console') "
            "if m in sys.modules]; print(heavy)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "[]", p.stdout + p.stderr
    p = run_cli("--help")
    assert p.returncode == 0 and "check" in p.stdout


def test_version():
    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.startswith("cudadoctor ")


def test_checks_lists_steps_in_order():
    p = run_cli("checks", "--json")
    ids = [s["id"] for s in json.loads(p.stdout)]
    assert ids[:6] == ["driver", "torch.cuda", "device.capability", "torch.op", "torch.triton", "toolkit.nvcc"]


def test_real_cpu_only_torch_wheel_is_recognised():
    pytest.importorskip("torch")
    import torch

    fact = gather_torch(HostSystem(), Options(timeout_torch=180), {})
    t = fact.value
    assert fact.state.value == "found", fact.error
    assert t.installed and t.version == torch.__version__
    if torch.version.cuda is None:
        assert t.cpu_only and t.available is False and t.cuda is None


def test_check_json_is_valid_and_versioned():
    p = run_cli("check", "--json")
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    assert rep["schema_version"] == "1.1" and rep["tool"] == "cudadoctor"
    assert [s["id"] for s in rep["steps"]][:6] == ["driver", "torch.cuda", "device.capability", "torch.op",
                                                    "torch.triton", "toolkit.nvcc"]
    assert rep["exit_code"] == p.returncode
    for s in rep["steps"]:
        assert s["status"] in ("ok", "warn", "fail", "skip", "error")
        for f in s["findings"]:
            assert f["id"] and f["status"] in ("ok", "warn", "fail", "skip", "error")
            if f["status"] in ("warn", "fail"):
                assert f["fix"] and f["fix"]["text"]


def test_no_gpu_machine_says_so_and_exits_1():
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    p = run_cli("check", "--json")
    rep = json.loads(p.stdout)
    driver = [s for s in rep["steps"] if s["id"] == "driver"][0]
    assert driver["status"] == "fail" and p.returncode == 1
    nvcc = [s for s in rep["steps"] if s["id"] == "toolkit.nvcc"][0]
    assert nvcc["status"] != "skip"


SECRETS = {
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz012345",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "LD_LIBRARY_PATH": "/opt/ghp_abcdefghijklmnopqrstuvwxyz0123456789/lib:/usr/local/nvidia/lib64",
    "HTTPS_PROXY": "http://bob:hunter2secret@proxy.example:3128",
    "CUDA_CACHE_PATH": "/tmp/cache/token=supersecretvalue123",
}


@pytest.mark.parametrize("fmt", [["--json"], ["--markdown"], []])
def test_no_secret_in_any_output(fmt):
    p = run_cli("check", "--only", "toolkit.nvcc", "--only", "driver", *fmt, env=SECRETS)
    out = p.stdout + p.stderr
    for v in ("hf_abcdefghijklmnopqrstuvwxyz012345", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
              "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "hunter2secret", "supersecretvalue123"):
        assert v not in out


def test_markdown_hides_user_home_and_host(tmp_path):
    import socket

    home = str(tmp_path / "home" / "carol")
    os.makedirs(home)
    p = run_cli("check", "--only", "toolkit.nvcc", "--markdown",
                env={"HOME": home, "CUDA_HOME": home + "/cuda"})
    assert p.returncode in (0, 1)
    assert home not in p.stdout
    host = socket.gethostname()
    if len(host) >= 4:
        assert host not in p.stdout
    assert "<details>" in p.stdout


def test_usage_errors_exit_2_without_traceback():
    for args in (["check", "--only", "nope"], ["check", "--python", "/does/not/exist"], ["check", "--python", ""],
                 ["check", "--json", "--markdown"], ["check", "--facts", "/does/not/exist.json"], ["frobnicate"]):
        p = run_cli(*args)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout


def test_facts_file_rejudged_offline(tmp_path):
    p = run_cli("check", "--json")
    f = tmp_path / "r.json"
    f.write_text(p.stdout)
    q = run_cli("check", "--json", "--facts", str(f))
    a, b = json.loads(p.stdout), json.loads(q.stdout)
    assert [(s["id"], s["status"]) for s in a["steps"]] == [(s["id"], s["status"]) for s in b["steps"]]
    assert b["source"].startswith("facts file")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run_cli("check", "--facts", str(bad)).returncode == 2


def test_strict_makes_warnings_fail(tmp_path):
    # nvcc missing with CUDA_HOME set to a missing folder: a warning only
    p = run_cli("check", "--only", "toolkit.nvcc", env={"CUDA_HOME": str(tmp_path / "nope"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout
    p = run_cli("check", "--only", "toolkit.nvcc", "--strict", env={"CUDA_HOME": str(tmp_path / "nope"),
                                                                    "PATH": "/usr/bin:/bin"})
    assert p.returncode == 1


def test_children_get_cudadoctors_jit_cache_and_srun_the_users_environment(tmp_path):
    from cudadoctor.system import proc

    base = {"PATH": "/usr/bin", "CUDA_CACHE_PATH": "/home/u/.nv/cache", "LANG": "de_DE.UTF-8"}
    env = proc.child_env(base)
    assert env["CUDA_CACHE_PATH"].endswith("nv-compute-cache") and env["LC_ALL"] == "C"
    back = proc.child_env(base, proc.user_env_overrides(base))
    assert back == base  # the user's own values, nothing added


def test_only_takes_a_comma_separated_list():
    p = run_cli("check", "--only", "toolkit.nvcc,environment", "--json")
    assert p.returncode in (0, 1), p.stderr
    assert [s["id"] for s in json.loads(p.stdout)["steps"]] == ["toolkit.nvcc", "environment"]
    p = run_cli("check", "--only", "toolkit.nvcc,nope")
    assert p.returncode == 2 and "unknown step id nope" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("check", "--only", ",")
    assert p.returncode == 2 and "--only needs at least one step id" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("check", "--skip", ",")
    assert p.returncode == 2 and "--skip needs at least one step id" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("check", "--skip", " , ")
    assert p.returncode == 2 and "--skip needs at least one step id" in p.stderr
