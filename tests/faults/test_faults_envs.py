"""`cudadoctor envs` and `check --kernel` on hostile environments: a hung interpreter, an interpreter that
dies at once, kernel.json files that are binary garbage, a FIFO, a folder, or huge; a `jupyter` on PATH that
hangs. Each must end within its limit, exit with a documented code and say what happened."""

from __future__ import annotations

import json
import os

from faultkit import KILL_GRACE, PY, T_TOOL, need_command, write_tool

T_ENVS = 3.0


def _kernel(root, name, body):
    d = root / "kernels" / name
    d.mkdir(parents=True)
    if body is not None:
        (d / "kernel.json").write_bytes(body)
    return d


def test_envs_on_hostile_interpreters_and_kernels(faults):
    need_command("envs")
    jp = faults.tmp / "jp"
    _kernel(jp, "garbage", b"\x00\xff\x7fELF" * 100)
    os.mkfifo(_kernel(jp, "fifo", None) / "kernel.json")  # opening it for reading would block forever
    (_kernel(jp, "folder", None) / "kernel.json").mkdir()
    _kernel(jp, "huge", b'{"argv": ["' + b"x" * (3 * 1024 * 1024) + b'"]}')
    _kernel(jp, "noargv", json.dumps({"display_name": "x", "language": "python"}).encode())
    _kernel(jp, "ok", json.dumps({"argv": [PY, "-m", "ipykernel_launcher"], "language": "python",
                                  "env": {"CUDA_VISIBLE_DEVICES": "\x1b[2J"}}).encode())
    hung = write_tool(faults.tmp / "hung" / "bin", "python", "exec sleep 300\n")
    dies = write_tool(faults.tmp / "dies" / "bin", "python", "kill -SEGV $$\n")
    faults.tool("jupyter", "exec sleep 300\n")  # a `jupyter` that is not a Python script at all
    r = faults.run("envs", "--json", "--timeout", str(T_ENVS), "--add", hung, "--add", dies,
                   env={"JUPYTER_PATH": str(jp)}, limit=T_ENVS + KILL_GRACE + T_TOOL + 8, codes=(1,))
    d = json.loads(r.out)
    rows = {e["python"]: e for e in d["environments"]}
    assert rows[str(hung)]["verdict"] == "hung" and rows[str(dies)]["verdict"] == "broken"
    assert rows[str(dies)]["finding"]["id"] in ("torch.cuda.python-unusable", "torch.cuda.probe-crashed")
    kernels = {k["name"]: k for k in d["kernels"]["kernels"]}
    assert kernels["garbage"]["error"] and kernels["huge"]["error"] and kernels["noargv"]["error"]
    assert "\x1b" not in r.out  # a control character in a kernel's env is shown escaped, never sent to the terminal


def test_check_kernel_with_a_hung_interpreter(faults):
    need_command("envs")
    jp = faults.tmp / "jp"
    hung = write_tool(faults.tmp / "hung" / "bin", "python", "exec sleep 300\n")
    _kernel(jp, "stuck", json.dumps({"argv": [str(hung), "-m", "ipykernel_launcher"], "language": "python"}).encode())
    r = faults.run("check", "--kernel", "stuck", "--only", "torch.cuda", "--json", "--timeout", "3",
                   env={"JUPYTER_PATH": str(jp)}, limit=3 + KILL_GRACE + 4, codes=(1,))
    assert r.finding("torch.cuda.probe-hung")["status"] == "fail"
    assert r.report()["facts"]["jupyter_kernel"]["value"]["name"] == "stuck"
