"""`check` on a target without torch (or with a CPU-only one) names another environment of the machine
whose torch uses the GPU, with the commands to use it (the H200 scenario, other environments faked)."""

from __future__ import annotations

from fakes.system import FakeCmd
from helpers import ids, steps
from scenarios import PY, h200, torch_stages

from cudadoctor.doctor import run_check
from cudadoctor.facts.registry import Options
from cudadoctor.facts.torch import PROBE_SCRIPT

SYS_PY = "/usr/bin/python3"
ML = "/opt/conda/envs/ml/bin/python"


def machine(venv_torch=True, conda_torch=False, target=None, **kw):
    """The H200 machine with a target /usr/bin/python3, the torch venv on PATH and a conda env ml."""
    fs = h200(**kw)
    fs.add_file("/opt/torch/.venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n")
    fs.add_exe(SYS_PY)
    fs.on([SYS_PY, PROBE_SCRIPT], target or FakeCmd(torch_stages(python=SYS_PY, not_installed=True)))
    fs.on([PY, PROBE_SCRIPT, "--no-op"], FakeCmd(torch_stages(python=PY)) if venv_torch else FakeCmd(
        torch_stages(python=PY, not_installed=True)))
    fs.env["CONDA_EXE"] = "/opt/conda/bin/conda"
    fs.add_file("/opt/conda/conda-meta/history", "")
    fs.add_file("/opt/conda/envs/ml/conda-meta/history", "")
    fs.add_exe("/opt/conda/bin/python")
    fs.on(["/opt/conda/bin/python", PROBE_SCRIPT, "--no-op"], FakeCmd(torch_stages(python="/opt/conda/bin/python",
                                                                                   not_installed=True)))
    fs.add_exe(ML)
    fs.on([ML, PROBE_SCRIPT, "--no-op"], FakeCmd(torch_stages(python=ML) if conda_torch else torch_stages(
        python=ML, version="2.13.0+cpu", cuda=None, available=False, arch=[])))
    return fs


def check(fs, **extra):
    return run_check(fs, Options(python=SYS_PY, extra=extra), only=["torch.cuda", "torch.op"])


def test_no_torch_points_to_the_venv_that_works():
    r = check(machine())
    f = steps(r)["torch.cuda"].findings[0]
    assert (f.id, f.status.value) == ("torch.cuda.not-installed", "warn")
    assert "torch with CUDA is in /opt/torch/.venv (venv)" in f.summary
    assert f.fix.commands[0] == f"{PY} your_script.py"
    assert f"{PY} -m ipykernel install --user --name torch-cuda --display-name 'Python (torch-cuda)'" in f.fix.commands
    assert f"{PY} -m pip install ipykernel" in f.fix.commands  # not known to be installed there
    assert f.evidence["working environments"].startswith(PY)
    assert ids(r)["torch.op.not-run"] == "skip"
    assert r.exit_code == 0  # a warning


def test_a_conda_env_is_named_by_its_name():
    r = check(machine(venv_torch=False, conda_torch=True))
    f = steps(r)["torch.cuda"].findings[0]
    assert "torch with CUDA is in /opt/conda/envs/ml (conda env ml)" in f.summary
    assert any("ipykernel install --user --name ml " in c for c in f.fix.commands)


def test_cpu_only_target_fails_and_points_to_the_working_env():
    cpu = FakeCmd(torch_stages(python=SYS_PY, version="2.13.0+cpu", cuda=None, available=False, arch=[]))
    r = check(machine(target=cpu))
    f = steps(r)["torch.cuda"].findings[0]
    assert (f.id, f.status.value) == ("torch.cuda.cpu-only", "fail") and "/opt/torch/.venv" in f.summary
    assert any("--force-reinstall torch==2.13.0" in c for c in f.fix.commands)  # the old fix is kept after


def test_for_a_kernel_the_fix_re_registers_that_kernel():
    r = check(machine(), kernel="mykernel")
    f = steps(r)["torch.cuda"].findings[0]
    assert any("--name mykernel" in c for c in f.fix.commands) and "kernel mykernel" in f.fix.text


def test_no_working_env_no_pointer():
    r = check(machine(venv_torch=False))
    f = steps(r)["torch.cuda"].findings[0]
    assert f.id == "torch.cuda.not-installed" and "torch with CUDA" not in f.summary
    other = r.facts["other_envs"]
    assert other.state.value == "found" and {e.python for e in other.value.envs} >= {PY, ML}
    assert SYS_PY not in {e.python for e in other.value.envs}  # the target itself is not "another" env


def test_without_a_driver_no_environment_is_probed():
    fs = machine(smi=False, nvml=FakeCmd('{"error": "NVML_ERROR_LIBRARY_NOT_FOUND"}'), proc=False)
    r = check(fs)
    assert r.facts["other_envs"].state.value == "not_applicable"
    assert not [c for c in fs.calls if c[-1] == "--no-op"]
    assert ids(r)["torch.cuda.not-installed"] == "warn"


def test_a_target_with_cuda_torch_does_not_look_elsewhere():
    fs = machine(target=FakeCmd(torch_stages(python=SYS_PY)))
    r = check(fs)
    assert r.facts["other_envs"].state.value == "not_applicable"
    assert not [c for c in fs.calls if c[-1] == "--no-op"]


def test_a_saved_report_is_re_judged_with_its_pointer():
    import json

    from cudadoctor.facts.registry import facts_from_dict
    from cudadoctor.model import Fact

    r = check(machine())
    saved = json.loads(json.dumps({k: v.to_dict() for k, v in r.facts.items() if isinstance(v, Fact)}))
    again = run_check(machine(), Options(python=SYS_PY), only=["torch.cuda"], given_facts=facts_from_dict(saved))
    f = steps(again)["torch.cuda"].findings[0]
    assert f.status.value == "warn" and "torch with CUDA is in /opt/torch/.venv" in f.summary
