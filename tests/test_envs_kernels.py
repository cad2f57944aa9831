"""Jupyter kernelspecs: jupyter_core's search order, what each kernel.json really runs, its env, and the
answer of a real jupyter_client (the test extras install it) against cudadoctor's own reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from envs_support import PY, base_python, conda_layout, host_env, kernel, make_venv, wrapper_python
from fakes.system import FakeCmd, FakeSystem

from cudadoctor.facts import kernelspecs as ks
from cudadoctor.system.host import HostSystem


def kernels_by_name(info) -> dict:
    return {k.name: k for k in info.kernels}


def test_search_order_mirrors_jupyter_core():
    fs = FakeSystem(env={"HOME": "/home/u", "JUPYTER_PATH": "/a:/b/", "PYTHONUSERBASE": "/ub", "IPYTHONDIR": "/ip"})
    dirs = [d for d, _, _ in ks.search_dirs(fs, ["/envs/one"])]
    assert dirs == ["/a/kernels", "/b/kernels", "/home/u/.local/share/jupyter/kernels", "/ub/share/jupyter/kernels",
                    "/envs/one/share/jupyter/kernels", "/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels",
                    "/ip/kernels"]
    fs = FakeSystem(env={"HOME": "/home/u", "JUPYTER_DATA_DIR": "/jd", "XDG_DATA_HOME": "/xdg",
                         "JUPYTER_PLATFORM_DIRS": "1", "XDG_DATA_DIRS": "/s1:/s2"})
    dirs = [d for d, _, _ in ks.search_dirs(fs)]
    assert dirs[0] == "/jd/kernels" and "/xdg/jupyter/kernels" not in dirs
    assert "/s1/jupyter/kernels" in dirs and "/usr/share/jupyter/kernels" not in dirs
    fs = FakeSystem(env={"HOME": "/home/u", "JUPYTER_PLATFORM_DIRS": "0"})  # jupyter_core's envset: "0" is off
    assert "/usr/share/jupyter/kernels" in [d for d, _, _ in ks.search_dirs(fs)]


def test_search_order_agrees_with_the_real_jupyter_core(tmp_path):
    pytest.importorskip("jupyter_core")
    env = host_env(tmp_path, JUPYTER_PATH=tmp_path / "jp", JUPYTER_PREFER_ENV_PATH="0")
    code = "import json; from jupyter_core.paths import jupyter_path; print(json.dumps(jupyter_path('kernels')))"
    real = json.loads(subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True).stdout)
    mine = [d for d, src, _ in ks.search_dirs(HostSystem(env), [sys.prefix]) if src != "ipython"]
    assert mine == real


def test_what_each_kernel_json_runs(tmp_path):
    venv = make_venv(tmp_path / "tv")
    root = conda_layout(tmp_path / "mc", {"ml": None})
    jp = tmp_path / "jp"
    kernel(jp, "direct", [str(venv)])
    kernel(jp, "envwrap", ["/usr/bin/env", "CUDA_VISIBLE_DEVICES=1", str(venv)])
    kernel(jp, "condarun", ["conda", "run", "-n", "ml", "python"])
    one = wrapper_python(tmp_path / "wrap1" / "start-kernel", str(venv))
    kernel(jp, "wrapped", [str(one)])
    two = tmp_path / "wrap2" / "start-kernel"
    two.parent.mkdir()
    two.write_text("#!/bin/sh\n[ -n \"$X\" ] && exec /opt/a/bin/python \"$@\"\nexec /opt/b/bin/python \"$@\"\n")
    two.chmod(0o755)
    kernel(jp, "ambiguous", [str(two)])
    kernel(jp, "ir", ["R", "--slave"], language="R")
    env_dir = tmp_path / "tv" / "share" / "jupyter"
    kernel(env_dir, "relative", ["python"])
    s = HostSystem(host_env(tmp_path, JUPYTER_PATH=jp, CONDA_EXE=root / "bin" / "conda"))
    k = kernels_by_name(ks.gather_kernels(s, [str(tmp_path / "tv")]))
    assert k["direct"].interpreter == str(venv) and k["direct"].interpreter_how == "argv[0]"
    assert k["envwrap"].interpreter == str(venv) and k["envwrap"].env_applied == {"CUDA_VISIBLE_DEVICES": "1"}
    assert k["condarun"].interpreter == str(root / "envs" / "ml" / "bin" / "python")
    assert k["wrapped"].interpreter == str(venv)
    assert k["ambiguous"].interpreter == "" and "does not name one interpreter" in k["ambiguous"].interpreter_how
    assert k["ir"].language == "R"
    # 'python' in an environment's own share/jupyter is started by that environment's Jupyter
    assert k["relative"].interpreter == str(tmp_path / "tv" / "bin" / "python")
    assert k["relative"].source == f"env {tmp_path / 'tv'}"


def test_env_values_are_templates_filled_from_the_environment(tmp_path):
    jp = tmp_path / "jp"
    kernel(jp, "t", [PY], env={"LD_LIBRARY_PATH": "/opt/x:${LD_LIBRARY_PATH}", "A": "$NOT_SET", "N": "1"})
    s = HostSystem(host_env(tmp_path, JUPYTER_PATH=jp, LD_LIBRARY_PATH="/usr/local/nvidia/lib64"))
    t = kernels_by_name(ks.gather_kernels(s))["t"]
    assert t.env_applied == {"LD_LIBRARY_PATH": "/opt/x:/usr/local/nvidia/lib64", "A": "$NOT_SET", "N": "1"}
    assert t.env["LD_LIBRARY_PATH"] == "/opt/x:${LD_LIBRARY_PATH}"


def test_first_folder_wins_and_broken_kernel_json(tmp_path):
    jp, home = tmp_path / "jp", tmp_path / "home"
    kernel(jp, "Torch", [PY])  # names are lower-cased, as jupyter_client does
    kernel(home / ".local" / "share" / "jupyter", "torch", [PY])
    env_pre = tmp_path / "envx"
    kernel(env_pre / "share" / "jupyter", "shared", [PY])
    kernel(home / ".local" / "share" / "jupyter", "shared", [PY])
    bad = kernel(jp, "bad", [PY])
    (bad / "kernel.json").write_text("{not json")
    s = HostSystem(host_env(tmp_path, JUPYTER_PATH=jp))
    info = ks.gather_kernels(s, [str(env_pre)])
    torch = [k for k in info.kernels if k.name == "torch"]
    assert [k.source for k in torch] == ["JUPYTER_PATH", "user"]
    assert torch[0].shadowed_by == "" and torch[1].shadowed_by == str(jp / "kernels" / "Torch")
    # a user kernel and an environment's kernel of one name: which wins depends on the Jupyter run; no claim
    assert all(k.shadowed_by == "" for k in info.kernels if k.name == "shared")
    assert ks.find(info, "TORCH").resource_dir == str(jp / "kernels" / "Torch")
    assert "not JSON" in kernels_by_name(info)["bad"].error


def test_the_jupyter_on_path_is_asked_through_jupyter_client(tmp_path):
    pytest.importorskip("jupyter_client")
    jp = tmp_path / "jp"
    kernel(jp, "torch", [PY])
    kernel(tmp_path / "home" / ".local" / "share" / "jupyter", "torch", [PY])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "jupyter").write_text(f"#!{PY}\nprint('a jupyter')\n")
    (bindir / "jupyter").chmod(0o755)
    s = HostSystem(host_env(tmp_path, [bindir], JUPYTER_PATH=jp))
    info = ks.gather_kernels(s)
    assert info.method.startswith("jupyter_client ") and info.jupyter_python == PY, info.error
    assert info.dirs[0] == str(jp / "kernels")
    user = next(k for k in info.kernels if k.source == "user")
    assert user.shadowed_by == str(jp / "kernels" / "torch")  # jupyter_client's own answer


def test_a_native_kernel_only_jupyter_client_knows_of():
    jpy = "/envs/j/bin/python"
    rd = "/envs/j/lib/python3.12/site-packages/ipykernel/resources"
    answer = {"python": jpy, "jupyter_client": "8.6.3", "kernel_dirs": ["/home/u/.local/share/jupyter/kernels"],
              "specs": {"python3": {"resource_dir": rd, "spec": {
                  "argv": [jpy, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python",
                  "display_name": "Python 3 (ipykernel)", "env": {}}}}}
    fs = FakeSystem(env={"HOME": "/home/u", "PATH": "/envs/j/bin"})
    fs.add_exe("/envs/j/bin/jupyter")
    fs.add_file("/envs/j/bin/jupyter", f"#!{jpy}\n# -*- coding: utf-8 -*-\n")
    fs.add_exe(jpy)
    fs.on([jpy, ks.CHILD], FakeCmd(f"warning line\n{ks.CHILD_MARK} {json.dumps(answer)}\n"))
    info = ks.gather_kernels(fs)
    k = kernels_by_name(info)["python3"]
    assert k.source == "ipykernel (built in)" and k.interpreter == jpy and k.resource_dir == rd
    assert info.method == f"jupyter_client 8.6.3 of {jpy}"


def test_a_jupyter_that_hangs_leaves_the_folders():
    fs = FakeSystem(env={"HOME": "/home/u", "PATH": "/b", "JUPYTER_PATH": "/jp"})
    fs.add_exe("/b/jupyter")
    fs.add_file("/b/jupyter", "#!/b/python3\n")
    fs.add_exe("/b/python3", FakeCmd(hang=True))
    fs.add_file("/jp/kernels/k/kernel.json", json.dumps({"argv": ["/b/python3", "-m", "ipykernel_launcher"]}))
    info = ks.gather_kernels(fs, timeout=1.0)
    assert "no answer within" in info.error and info.method == ks.MIRRORED
    assert [k.name for k in info.kernels] == ["k"]


def test_the_child_reports_without_jupyter_client(tmp_path):
    env = host_env(tmp_path)
    p = subprocess.run([base_python(), ks.CHILD], capture_output=True, text=True, env=env, timeout=60)
    rec = json.loads(p.stdout.split(ks.CHILD_MARK, 1)[1])
    assert p.returncode == 0 and "jupyter_client_error" in rec and "specs" not in rec
    assert os.path.realpath(rec["python"]) == os.path.realpath(base_python())


def test_diff_names_the_kernel_jupyter_starts_not_a_shadowed_one():
    """`envs --diff kernel:NAME` (and a bare NAME): the kernel Jupyter starts under that name, even when a
    shadowed kernel of the same name comes first in the list; a shadowed one only when it is the only one."""
    from cudadoctor.commands.envs import resolve
    from cudadoctor.facts.python_types import KernelSpecInfo, PythonEnv

    def row(py, rd, shadowed=""):
        k = KernelSpecInfo(name="torch", resource_dir=rd, interpreter=py, shadowed_by=shadowed)
        return PythonEnv(python=py, kind="kernel", name="torch", kernel=k, key="kernel:" + rd,
                         found_as=["kernel torch" + (f" (shadowed by {shadowed})" if shadowed else "")])

    shadowed = row("/old/bin/python", "/home/u/.local/share/jupyter/kernels/torch", "/srv/jp/kernels/torch")
    live = row("/new/bin/python", "/srv/jp/kernels/torch")
    plain = PythonEnv(python="/venv/bin/python", kind="venv", found_as=["PATH", "kernel other (shadowed by /x)"])
    envs = [shadowed, live, plain]

    class NoFiles:
        def exists(self, path):
            return False

    fs = NoFiles()
    for spec in ("kernel:torch", "torch", "kernel:TORCH"):
        assert resolve(fs, envs, spec) is live, spec
    assert resolve(fs, [shadowed, plain], "kernel:torch") is shadowed  # the only one of that name
    assert resolve(fs, envs, "kernel:other") is plain  # found only through a shadowed kernel's label
    assert resolve(fs, envs, "kernel:none") is None
