"""Probing many environments: concurrently and bounded by CPU count, a hung interpreter as a timed-out
fact, a kernel's env reaching its child, rows that turn out to run one environment merged."""

from __future__ import annotations

import sys
import time

from envs_support import PY, host_env, hung_python, kernel, make_venv
from fakes.system import FakeCmd, FakeSystem
from scenarios import torch_stages

from cudadoctor.facts.python_envs import find_all, probe_all
from cudadoctor.facts.python_types import PythonEnv
from cudadoctor.facts.torch import PROBE_SCRIPT
from cudadoctor.system.host import HostSystem


def fake_envs(n: int, delay: float, cpus: int) -> tuple:
    fs = FakeSystem(env={"PATH": ""})
    fs.cpus = cpus
    envs = []
    for i in range(n):
        py = f"/e{i}/bin/python"
        fs.add_exe(py)
        fs.on([py, PROBE_SCRIPT, "--no-op"], FakeCmd(torch_stages(python=py, not_installed=True), delay=delay))
        envs.append(PythonEnv(python=py, kind="venv", prefix=f"/e{i}"))
    return fs, envs


def test_probes_run_at_once_up_to_the_cpu_count():
    fs, envs = fake_envs(6, 0.5, cpus=8)
    t0 = time.monotonic()
    res = probe_all(fs, envs, timeout=10)
    wall = time.monotonic() - t0
    assert res.workers == 6 and wall < 1.5, wall  # about the slowest one, not 6 x 0.5 s
    fs, envs = fake_envs(6, 0.4, cpus=2)
    t0 = time.monotonic()
    res = probe_all(fs, envs, timeout=10)
    assert res.workers == 2 and time.monotonic() - t0 >= 1.1  # bounded: 3 rounds of 2
    assert [e.python for e in res.envs] == [f"/e{i}/bin/python" for i in range(6)]  # order kept


def test_a_hung_interpreter_times_out_while_the_others_finish(tmp_path):
    hung = hung_python(tmp_path / "hung")
    plain = make_venv(tmp_path / "plain")
    s = HostSystem(host_env(tmp_path))
    envs = [PythonEnv(python=str(hung), kind="other"), PythonEnv(python=str(plain), kind="venv")]
    t0 = time.monotonic()
    res = probe_all(s, envs, timeout=3)
    wall = time.monotonic() - t0
    by = {e.python: e for e in res.envs}
    assert by[str(hung)].torch_state == "timeout" and "no answer within 3 s" in by[str(hung)].torch_error
    assert by[str(plain)].torch_state == "not_found"
    assert wall < 3 + 6, wall  # the timeout, the kill grace, start-up; never the sleep's 300 s


def test_a_kernels_env_reaches_its_child(tmp_path):
    venv = make_venv(tmp_path / "v")
    kernel(tmp_path / "jp", "hidden", [str(venv)], env={"CUDA_VISIBLE_DEVICES": "", "X_OTHER": "1"})
    s = HostSystem(host_env(tmp_path, JUPYTER_PATH=tmp_path / "jp"))
    envs, info = find_all(s)
    rows = [e for e in envs if e.kind == "kernel"]
    assert len(rows) == 1 and rows[0].env == {"CUDA_VISIBLE_DEVICES": "", "X_OTHER": "1"}
    res = probe_all(s, rows, timeout=60)
    t = res.envs[0].torch
    assert t.visible_devices == "" and t.python == str(venv)  # seen by the kernel's interpreter itself


def test_a_kernel_without_env_is_one_more_way_to_find_its_interpreter(tmp_path):
    venv = make_venv(tmp_path / "v")
    kernel(tmp_path / "jp", "plain", [str(venv)])
    s = HostSystem(host_env(tmp_path, JUPYTER_PATH=tmp_path / "jp"))
    envs, _ = find_all(s, extra=[str(venv)])
    row = next(e for e in envs if e.python == str(venv))
    assert row.kind == "venv" and "kernel plain" in row.found_as and "--add" in row.found_as
    assert not [e for e in envs if e.kind == "kernel"]


def test_rows_that_run_one_environment_merge_after_probing():
    fs = FakeSystem(env={"PATH": "/home/u/.pyenv/shims", "HOME": "/home/u"})
    shim, real = "/home/u/.pyenv/shims/python3", "/home/u/.pyenv/versions/3.12.1/bin/python"
    answer = FakeCmd(torch_stages(python=real, not_installed=True))
    for p in (shim, real):
        fs.add_exe(p)
        fs.on([p, PROBE_SCRIPT, "--no-op"], answer)
    envs, _ = find_all(fs, kernels=False)
    assert len(envs) == 2
    res = probe_all(fs, envs, timeout=5)
    assert len(res.envs) == 1
    e = res.envs[0]
    assert (e.kind, e.name, e.python) == ("pyenv", "3.12.1", real) and shim in e.aliases
    assert e.found_as == ["PATH", "pyenv versions"]


def test_this_venvs_real_torch_through_a_pth_venv(tmp_path):
    venv = make_venv(tmp_path / "tv", torch=True)
    res = probe_all(HostSystem(host_env(tmp_path)), [PythonEnv(python=str(venv), kind="venv")], timeout=120)
    e = res.envs[0]
    assert e.torch_state == "found" and e.torch.version.startswith("2.13.0") and e.torch.python == str(venv)
    assert PY != str(venv)



def test_env_overlay_delegates_every_port_with_its_variables(tmp_path):
    # A kernel's or conda env's variables reach every child the overlay starts (run, start), and the ports it
    # does not change are the inner system's: wait (which stops at a child's last record), home (which falls
    # back to the password database when HOME is unset), walk_tree
    from cudadoctor.system.host import HostSystem

    inner = HostSystem()
    inner.env = {k: v for k, v in inner.env.items() if k != "HOME"}
    o = inner.with_env({"CUDADOCTOR_T": "x1"})
    code = "import os, sys, time; print(os.environ.get('CUDADOCTOR_T'), flush=True); time.sleep(float(sys.argv[1]))"
    assert o.run([sys.executable, "-c", code, "0"], 10).stdout.strip() == "x1"
    t0 = time.monotonic()
    res = o.wait(o.start([sys.executable, "-c", code, "3"]), 10, until=lambda out: out.endswith(b"x1\n"))
    assert res.stdout.strip() == "x1" and time.monotonic() - t0 < 2.0  # stopped at the record, not the exit
    assert o.home() == inner.home() != ""
    assert inner.with_env({"HOME": "/h"}).home() == "/h"
    (tmp_path / "a").write_text("")
    assert list(o.walk_tree(str(tmp_path))) == list(inner.walk_tree(str(tmp_path)))
