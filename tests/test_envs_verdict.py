"""One verdict per environment, judged by check's own steps from the H200's recorded driver facts and
torch probe outputs; exit codes; fixes that point at kernel.json or the conda env's variables."""

from __future__ import annotations

import json

import pytest
from fakes.system import FakeCmd
from scenarios import h200, torch_stages

from cudadoctor.checks import envs_verdict as ev
from cudadoctor.facts import registry as facts
from cudadoctor.facts.python_envs import probe_all
from cudadoctor.facts.python_types import KernelSpecInfo, PythonEnv
from cudadoctor.facts.torch import PROBE_SCRIPT

PY = "/opt/envs/x/bin/python"


def judged(answer, env=None, kernel=None, env_source=""):
    fs = h200()
    fs.add_exe(PY)
    fs.on([PY, PROBE_SCRIPT, "--no-op"], answer)
    e = PythonEnv(python=PY, kind="kernel" if kernel else "venv", name=kernel.name if kernel else "",
                  env=env or {}, env_source=env_source or (kernel.kernel_json if kernel else ""), kernel=kernel)
    res = probe_all(fs, [e], timeout=5)
    shared = facts.gather(fs, list(ev.SHARED_FACTS), facts.Options())
    return ev.judge_env(res.envs[0], shared)


@pytest.mark.parametrize("answer,verdict,fid,archs", [
    (FakeCmd(torch_stages(python=PY)), "works", "torch.cuda.ok", "sm_90"),
    (FakeCmd(torch_stages(python=PY, not_installed=True)), "no-torch", "torch.cuda.not-installed", "-"),
    (FakeCmd(torch_stages(python=PY, version="2.13.0+cpu", cuda=None, available=False, arch=[])), "cpu-only",
     "torch.cuda.cpu-only", "-"),
    (FakeCmd(torch_stages(python=PY, arch=["sm_80"])), "unsupported", "device.capability.unsupported", "none"),
    (FakeCmd(torch_stages(python=PY, arch=["sm_80", "compute_80"])), "works", "device.capability.ptx-jit", "PTX"),
    (FakeCmd(torch_stages(python=PY, import_error="ImportError: libcudnn.so.9: cannot open shared object file")),
     "broken", "torch.cuda.import-failed", "-"),
    (FakeCmd(torch_stages(python=PY, op={"ok": False, "error": "CUDA error: out of memory",
                                         "error_type": "AcceleratorError"})), "broken", "torch.op.out-of-memory", "sm_90"),
    (FakeCmd(hang=True), "hung", "torch.cuda.probe-hung", "-"),
    (FakeCmd(torch_stages(python=PY, upto="import")), "broken", "torch.cuda.probe-crashed", "sm_90"),
])
def test_verdicts(answer, verdict, fid, archs):
    r = judged(answer)
    assert (r.verdict, r.finding.id, r.archs) == (verdict, fid, archs)


def test_a_kernel_that_hides_the_gpus_is_no_gpu_and_the_fix_edits_kernel_json():
    k = KernelSpecInfo(name="torch-nogpu", resource_dir="/home/u/.local/share/jupyter/kernels/torch-nogpu",
                       env={"CUDA_VISIBLE_DEVICES": ""}, env_applied={"CUDA_VISIBLE_DEVICES": ""}, interpreter=PY)
    r = judged(FakeCmd(torch_stages(python=PY, available=False, visible="")), env={"CUDA_VISIBLE_DEVICES": ""},
               kernel=k)
    assert (r.verdict, r.finding.id, r.finding.status.value) == ("no-gpu", "torch.cuda.hidden-by-visible-devices",
                                                                 "fail")
    cmds = " ".join(r.finding.fix.commands)
    assert k.kernel_json in cmds and "pop('CUDA_VISIBLE_DEVICES')" in cmds and "unset CUDA_VISIBLE_DEVICES" not in cmds
    assert r.finding.evidence["CUDA_VISIBLE_DEVICES set by"] == k.kernel_json


def test_a_conda_env_variable_is_fixed_with_conda():
    e_src = "/opt/conda/envs/ml/conda-meta/state (conda env config vars)"
    fs_answer = FakeCmd(torch_stages(python=PY, available=False, visible="-1"))
    r = judged(fs_answer, env={"CUDA_VISIBLE_DEVICES": "-1"}, env_source=e_src)
    assert r.verdict == "no-gpu"
    assert r.finding.fix.commands[0].startswith("conda env config vars unset CUDA_VISIBLE_DEVICES")


def test_a_missing_kernel_interpreter_is_fixed_at_the_kernel():
    k = KernelSpecInfo(name="old", resource_dir="/k/old", interpreter="/gone/bin/python")
    fs = h200()
    e = PythonEnv(python="/gone/bin/python", kind="kernel", name="old", kernel=k)
    res = probe_all(fs, [e], timeout=5)
    r = ev.judge_env(res.envs[0], facts.gather(fs, list(ev.SHARED_FACTS), facts.Options()))
    assert (r.verdict, r.finding.id) == ("broken", "torch.cuda.python-missing")
    assert r.finding.fix.commands[0] == "jupyter kernelspec remove old"


def test_kernels_that_cannot_be_resolved():
    bad = PythonEnv(kind="kernel", name="bad", kernel=KernelSpecInfo(name="bad", resource_dir="/k/bad",
                                                                     error="kernel.json is not JSON (x)"))
    wrap = PythonEnv(kind="kernel", name="w", note="starts through /opt/w, which does not name one interpreter",
                     kernel=KernelSpecInfo(name="w", resource_dir="/k/w", argv=["/opt/w"]))
    assert (ev.judge_env(bad, {}).verdict, ev.judge_env(bad, {}).finding.id) == ("broken", "envs.kernel-unreadable")
    assert (ev.judge_env(wrap, {}).verdict, ev.judge_env(wrap, {}).finding.id) == (
        "unknown", "envs.kernel-interpreter-unknown")


def _rows(*verdicts):
    from cudadoctor.model import Finding, Status

    return [ev.EnvVerdict(PythonEnv(), v, Finding("x", Status.OK, "")) for v in verdicts]


def test_exit_codes():
    assert ev.exit_code(_rows("works", "no-gpu")) == 0
    assert ev.exit_code(_rows("works", "no-gpu"), strict=True) == 1
    assert ev.exit_code(_rows("works", "no-torch", "cpu-only"), strict=True) == 0
    assert ev.exit_code(_rows("cpu-only", "no-torch")) == 1
    assert ev.exit_code([]) == 1


def test_archs_column_judges_the_gpus_this_environment_sees():
    """An environment whose CUDA_VISIBLE_DEVICES leaves it only the H200 is not 'none' because of a hidden
    GPU torch has no kernels for: the column agrees with the capability step (which applies the variable)."""
    from fakes.system import FakeCmd as Cmd
    from scenarios import nvml_answer, smi_csv_answer

    second = {"index": 1, "name": "NVIDIA GeForce RTX 5090", "uuid": "GPU-5090", "pci_bus_id": "00000000:00:07.0",
              "compute_capability": "12.0"}
    first = json.loads(nvml_answer())["gpus"][0]
    two = nvml_answer(device_count=2, gpus=[first, dict(first, **second)])
    csv = smi_csv_answer() + "1, NVIDIA GeForce RTX 5090, GPU-5090, 00000000:00:07.0, 12.0, 32607, 580.159.04, " \
                             "Disabled, Enabled, Default\n"
    for visible, archs in (("0", "sm_90"), (None, "none"), ("", "-")):
        fs = h200(nvml=Cmd(two), smi_csv=Cmd(csv))
        fs.add_exe(PY)
        fs.on([PY, PROBE_SCRIPT, "--no-op"], Cmd(torch_stages(python=PY, upto="import", visible=visible, arch=["sm_90"])))
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        res = probe_all(fs, [PythonEnv(python=PY, kind="venv", env=env)], timeout=5)
        r = ev.judge_env(res.envs[0], facts.gather(fs, list(ev.SHARED_FACTS), facts.Options()))
        assert r.archs == archs, (visible, r.archs)
