"""The real CLI: `envs` (table, --json, --markdown, --diff), `check --kernel`, and `check` on a target
without torch, against real venvs and kernelspec folders on this machine (no GPU here: none works)."""

from __future__ import annotations

import json

import pytest
from envs_support import PY, host_env, hung_python, kernel, make_venv, run_cli

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A torch venv (this venv's CPU torch through a .pth), a venv without torch, and a kernelspec folder:
    one kernel on the torch venv with CUDA_VISIBLE_DEVICES='' and a token in its env, one plain kernel."""
    tmp = tmp_path_factory.mktemp("envs")
    torch_py = make_venv(tmp / "torchvenv", torch=True)
    bare_py = make_venv(tmp / "bare")
    kernel(tmp / "jp", "torch-hidden", [str(torch_py)], env={"CUDA_VISIBLE_DEVICES": "", "HF_TOKEN": SECRET})
    kernel(tmp / "jp", "plain", [str(torch_py)])
    env = host_env(tmp, [torch_py.parent, bare_py.parent], JUPYTER_PATH=tmp / "jp")
    return tmp, env, torch_py, bare_py


def test_envs_json(machine):
    tmp, env, torch_py, bare_py = machine
    p = run_cli(["envs", "--json", "--timeout", "120"], env, tmp)
    assert p.returncode == 1, p.stderr  # no GPU here: no environment can use one
    assert SECRET not in p.stdout and "HF_TOKEN" not in p.stdout
    d = json.loads(p.stdout)
    rows = {(e["kind"], p): e for e in d["environments"] for p in [e["python"]] + e["aliases"]}
    venv = rows[("venv", str(torch_py))]  # found as bin/python3 first on PATH: bin/python is an alias
    assert venv["verdict"] == "cpu-only" and venv["torch"]["version"].startswith("2.13.0")
    assert "kernel plain" in venv["found_as"] and venv["finding"]["id"] == "torch.cuda.cpu-only"
    assert rows[("venv", str(bare_py))]["verdict"] == "no-torch"
    k = rows[("kernel", str(torch_py))]
    assert k["name"] == "torch-hidden" and k["env"] == {"CUDA_VISIBLE_DEVICES": ""} and k["env_not_shown"] == 1
    assert k["torch"]["visible_devices"] == ""
    ks = {x["name"]: x for x in d["kernels"]["kernels"]}
    assert ks["torch-hidden"]["env_applied_not_shown"] == 1 and ks["plain"]["env_applied"] == {}
    assert d["probe"]["workers"] >= 2 and d["exit_code"] == 1


def test_envs_console_and_markdown(machine):
    tmp, env, torch_py, _ = machine
    p = run_cli(["envs", "--timeout", "120"], env, tmp)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "cpu-only" in p.stdout and "kernel torch-hidden" in p.stdout and SECRET not in p.stdout
    m = run_cli(["envs", "--markdown", "--timeout", "120"], env, tmp)
    assert m.stdout.startswith("<details>") and str(tmp / "home") not in m.stdout


def test_envs_diff_venv_and_kernel(machine):
    tmp, env, torch_py, _ = machine
    p = run_cli(["envs", "--diff", str(torch_py), "torch-hidden", "--json", "--timeout", "120"], env, tmp)
    assert p.returncode == 0, p.stderr
    rows = {(r["section"], r["item"]): r for r in json.loads(p.stdout)["rows"]}
    assert rows[("environment", "CUDA_VISIBLE_DEVICES")]["differs"]
    assert rows[("cuda", "CUDA_VISIBLE_DEVICES seen")]["b"] == "'' (empty)"
    assert not rows[("torch", "version")]["differs"] and not rows[("interpreter", "prefix")]["differs"]


def test_check_kernel_applies_the_kernels_env(machine):
    tmp, env, torch_py, _ = machine
    p = run_cli(["check", "--kernel", "torch-hidden", "--json", "--timeout", "120"], env, tmp)
    assert p.returncode == 1, p.stderr
    assert SECRET not in p.stdout and "HF_TOKEN" not in p.stdout
    d = json.loads(p.stdout)
    assert d["target_python"] == str(torch_py)
    kf = d["facts"]["jupyter_kernel"]
    assert kf["state"] == "found" and kf["value"]["env_applied"] == {"CUDA_VISIBLE_DEVICES": ""}
    assert d["facts"]["env"]["value"]["vars"]["CUDA_VISIBLE_DEVICES"] == ""
    found = {f["id"]: f for s in d["steps"] for f in s["findings"]}
    empty = found["env.cuda-visible-devices.empty"]
    assert any(kf["value"]["resource_dir"] in c for c in empty["fix"]["commands"])


def test_check_kernel_usage_errors(machine, tmp_path):
    tmp, env, torch_py, _ = machine
    bad = kernel(tmp_path / "jp2", "broken", [PY])
    (bad / "kernel.json").write_text("{")
    kernel(tmp_path / "jp2", "ir", ["R"], language="R")
    e2 = dict(env, JUPYTER_PATH=f"{tmp / 'jp'}:{tmp_path / 'jp2'}")
    for args, needle in ((["--kernel", "nope"], "no such Jupyter kernel"),
                         (["--kernel", "plain", "--python", PY], "cannot be used together"),
                         (["--kernel", "broken"], "not JSON"),
                         (["--kernel", "ir"], "not Python")):
        p = run_cli(["check", *args], e2, tmp)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def test_envs_usage_errors(machine):
    tmp, env, _, _ = machine
    for args, needle in ((["--add", str(tmp / "nothing")], "no interpreter"),
                         (["--diff", "nope", "plain"], "no environment 'nope'"),
                         (["--diff", "plain", "plain"], "same environment"),
                         (["--json", "--markdown"], "cannot be used together")):
        p = run_cli(["envs", *args], env, tmp)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def test_envs_hung_interpreter_is_a_finding(tmp_path):
    hung = hung_python(tmp_path / "hung")
    env = host_env(tmp_path)
    p = run_cli(["envs", "--add", str(hung), "--timeout", "3", "--json"], env, tmp_path, timeout=60)
    d = json.loads(p.stdout)
    row = next(e for e in d["environments"] if e["python"] == str(hung))
    assert (row["verdict"], row["finding"]["id"]) == ("hung", "torch.cuda.probe-hung") and p.returncode == 1


def test_check_without_torch_is_a_warning_here(machine):
    tmp, env, _, bare_py = machine
    p = run_cli(["check", "--python", str(bare_py), "--only", "torch.cuda", "--json"], env, tmp)
    d = json.loads(p.stdout)
    f = d["steps"][0]["findings"][0]
    assert (f["id"], f["status"]) == ("torch.cuda.not-installed", "warn") and p.returncode == 0
    assert d["facts"]["other_envs"]["state"] == "not_applicable"  # no driver: nothing could work elsewhere
