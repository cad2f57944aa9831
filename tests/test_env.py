"""Environment variables and their traps (step `environment`, command `env`)."""

from __future__ import annotations

import json

import pytest
from libs_support import H200_UUID, FakeSystem, base_facts, finding_ids, h200_env, h200_nvml, h200_system

from cudadoctor.checks.environment import check_alloc_conf, parse_arch_list
from cudadoctor.checks.registry import Context, load_all, run_one
from cudadoctor.facts.types import EnvInfo
from cudadoctor.model import Fact, Status
from cudadoctor.redact import allowed_env


def run_env(extra: dict = None, drop: tuple = (), **over):
    env = h200_env()
    env.update(extra or {})
    for k in drop:
        env.pop(k, None)
    facts = base_facts(h200_system(env), **over)
    facts["env"] = Fact.found(EnvInfo(vars=allowed_env(env)))
    return run_one(load_all()["environment"], Context(facts=facts))


def test_h200_environment_has_no_trap():
    r = run_env()
    ids = finding_ids(r)
    assert r.status is Status.OK, r.findings
    assert ids["env.torch-cuda-arch-list"] is Status.OK  # 9.0a on cc 9.0
    assert ids["env.library-path"] is Status.OK  # stubs in LIBRARY_PATH are fine


@pytest.mark.parametrize("value,fid,status", [
    ("", "env.cuda-visible-devices.empty", Status.FAIL),
    ("-1", "env.cuda-visible-devices.none", Status.FAIL),
    ("7", "env.cuda-visible-devices.none", Status.FAIL),
    ("0,7", "env.cuda-visible-devices.truncated", Status.WARN),
    ("0", "env.cuda-visible-devices", Status.OK),
    (H200_UUID, "env.cuda-visible-devices", Status.OK),
    ("GPU-8493e5ec", "env.cuda-visible-devices", Status.OK),  # a unique UUID prefix is accepted
    ("GPU-deadbeef-0000", "env.cuda-visible-devices.none", Status.FAIL),
    ("MIG-4f5e7a1c-1111-2222-3333-444455556666", "env.cuda-visible-devices.none", Status.FAIL),
])
def test_cuda_visible_devices(value, fid, status):
    r = run_env({"CUDA_VISIBLE_DEVICES": value})
    assert finding_ids(r)[fid] is status


def test_cuda_visible_devices_mig_instance_that_exists():
    mig = "MIG-4f5e7a1c-1111-2222-3333-444455556666"
    nvml = h200_nvml(mig_mode=True, mig_devices=[{"index": 0, "uuid": mig, "name": "NVIDIA H200 1g.18gb"}])
    r = run_env({"CUDA_VISIBLE_DEVICES": mig}, nvml=Fact.found(nvml))
    assert finding_ids(r)["env.cuda-visible-devices"] is Status.OK


@pytest.mark.parametrize("value,fid,status", [
    ("9.0a", "env.torch-cuda-arch-list", Status.OK),
    ("8.0;8.6", "env.torch-cuda-arch-list.mismatch", Status.WARN),
    ("8.0+PTX", "env.torch-cuda-arch-list", Status.OK),  # PTX 8.0 JIT-compiles on 9.0
    ("8.0 9.0", "env.torch-cuda-arch-list", Status.OK),
    ("10.0a", "env.torch-cuda-arch-list.mismatch", Status.WARN),
    ("sm_90", "env.torch-cuda-arch-list.syntax", Status.WARN),
    ("Hopper", "env.torch-cuda-arch-list", Status.OK),
])
def test_torch_cuda_arch_list_vs_gpu(value, fid, status):
    r = run_env({"TORCH_CUDA_ARCH_LIST": value})
    assert finding_ids(r)[fid] is status


def test_parse_arch_list():
    assert parse_arch_list("8.0;8.6+PTX 9.0a") == [((8, 0), "", False), ((8, 6), "", True), ((9, 0), "a", False)]


def test_cuda_launch_blocking():
    assert finding_ids(run_env({"CUDA_LAUNCH_BLOCKING": "1"}))["env.cuda-launch-blocking"] is Status.WARN
    assert "env.cuda-launch-blocking" not in finding_ids(run_env({"CUDA_LAUNCH_BLOCKING": "0"}))


@pytest.mark.parametrize("value,status", [
    ("expandable_segments:True", Status.OK),
    ("expandable_segments:True,max_split_size_mb:128", Status.OK),
    ("backend:cudaMallocAsync", Status.OK),
    ("expandable_segments=True", Status.FAIL),
    ("expandable_segments:yes", Status.FAIL),
    ("max_split_size_mb:lots", Status.FAIL),
    ("expandible_segments:True", Status.FAIL),
])
def test_alloc_conf_syntax(value, status):
    assert finding_ids(run_env({"PYTORCH_CUDA_ALLOC_CONF": value}))["env.alloc-conf"] is status


def test_alloc_conf_messages():
    assert check_alloc_conf("a=b")[0].endswith("(use ':' not '=')")


def test_nccl_transports_disabled():
    r = run_env({"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO"})
    f = next(x for x in r.findings if x.id == "env.nccl-transports-off")
    assert f.status is Status.WARN
    assert set(f.evidence) == {"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE"}
    assert "env.nccl-transports-off" not in finding_ids(run_env({"NCCL_DEBUG": "INFO"}))


def test_ld_library_path_stubs_other_toolkit_and_missing_dirs():
    r = run_env({"LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs:/usr/local/cuda-12.1/lib64:/nope/lib"})
    ids = finding_ids(r)
    assert ids["env.ld-library-path.stubs"] is Status.FAIL
    assert ids["env.ld-library-path.other-toolkit"] is Status.WARN
    assert ids["env.ld-library-path.missing-dirs"] is Status.WARN


def test_container_variables_where_the_container_lacks_what_they_give():
    # no GPU listed and no GPU device file: NVIDIA_VISIBLE_DEVICES=void is the reason
    from cudadoctor.facts.types import NvmlInfo, SmiInfo, UserspaceDriverInfo

    none = dict(nvidia_smi=Fact.found(SmiInfo(path="/usr/bin/nvidia-smi", driver_version="580.159.04", gpus=[])),
                nvml=Fact.found(NvmlInfo(driver_version="580.159.04", gpus=[])))
    assert finding_ids(run_env({"NVIDIA_VISIBLE_DEVICES": "void"}, **none))["env.nvidia-visible-devices"] is Status.FAIL
    # no libcuda: NVIDIA_DRIVER_CAPABILITIES without compute is the reason
    ids = finding_ids(run_env({"NVIDIA_DRIVER_CAPABILITIES": "utility"},
                              userspace_driver=Fact.found(UserspaceDriverInfo(libnvidia_ml="/usr/lib/libnvidia-ml.so.1"))))
    assert ids["env.nvidia-driver-capabilities"] is Status.WARN


def test_container_variables_set_inside_a_container_that_has_its_gpu_are_not_blamed():
    # (session 35, the H200: exported in a shell inside a container with its GPU, both changed nothing for torch or
    # nvidia-smi; `check` failed NVIDIA_VISIBLE_DEVICES=void as "the container runtime exposes no GPU")
    assert finding_ids(run_env({"NVIDIA_VISIBLE_DEVICES": "void"}))["env.nvidia-visible-devices"] is Status.OK
    assert finding_ids(run_env({"NVIDIA_DRIVER_CAPABILITIES": "graphics"}))["env.nvidia-driver-capabilities"] is Status.OK


def test_cuda_cache_disabled():
    assert finding_ids(run_env({"CUDA_CACHE_DISABLE": "1"}))["env.cuda-cache"] is Status.WARN


def test_cuda_home_conflict():
    r = run_env({"CUDA_PATH": "/usr/local/cuda-12.4"})
    assert finding_ids(r)["env.cuda-home-conflict"] is Status.WARN


def test_device_order_with_mixed_gpus():
    from cudadoctor.facts.types import GpuInfo
    from libs_support import h200_smi

    smi = h200_smi()
    smi.gpus.append(GpuInfo(1, "NVIDIA RTX A4000", "GPU-1111", "00000000:01:00.0", "8.6"))
    r = run_env({}, nvidia_smi=Fact.found(smi))
    assert finding_ids(r)["env.cuda-device-order"] is Status.WARN
    r = run_env({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, nvidia_smi=Fact.found(smi))
    assert "env.cuda-device-order" not in finding_ids(r)


# ---------------------------------------------------------------- the command

def _patch_command(monkeypatch, env: dict):
    from cudadoctor.commands import libs as cmd_libs
    from cudadoctor.doctor import run_check

    system = FakeSystem(env=env, host="gpu-node-17", user="alice")

    def fake_run(step_ids, python, timeout=120.0):
        facts = base_facts(h200_system(env))
        facts["env"] = Fact.found(EnvInfo(vars=allowed_env(env)))
        return system, run_check(system, only=step_ids, given_facts=facts)

    monkeypatch.setattr(cmd_libs, "run_steps_for", fake_run)


def test_env_command_json_and_markdown_redaction(monkeypatch):
    from typer.testing import CliRunner

    from cudadoctor.cli import app

    env = {"PATH": "/home/alice/.local/bin:/usr/bin", "HOME": "/home/alice", "CUDA_VISIBLE_DEVICES": "0",
           "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz123456", "NCCL_SOCKET_IFNAME": "eth0",
           "CUDA_CACHE_PATH": "/home/alice/.nv/gpu-node-17-cache", "SECRET_THING": "s3cr3t-value-1234"}
    _patch_command(monkeypatch, env)
    res = CliRunner().invoke(app, ["env", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "CUDA_VISIBLE_DEVICES" in out["variables"]
    assert "HF_TOKEN" not in out["variables"] and "SECRET_THING" not in out["variables"]
    assert out["variables"]["CUDA_VISIBLE_DEVICES"]["meaning"]
    res = CliRunner().invoke(app, ["env", "--markdown"])
    assert res.exit_code == 0, res.output
    assert "alice" not in res.stdout and "gpu-node-17" not in res.stdout
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in res.stdout
    assert "`CUDA_VISIBLE_DEVICES`" in res.stdout


def test_env_command_usage_error(monkeypatch):
    from typer.testing import CliRunner

    from cudadoctor.cli import app

    res = CliRunner().invoke(app, ["env", "--json", "--markdown"])
    assert res.exit_code == 2


def test_triton_and_torch_compile_settings_are_shown_but_secrets_are_not():
    env = {"TRITON_CACHE_DIR": "/scratch/t", "TRITON_LIBCUDA_PATH": "/usr/lib/wsl/lib",
           "TORCHINDUCTOR_CACHE_DIR": "/scratch/i", "TRITON_API_KEY": "abc", "OTHER": "x"}
    assert allowed_env(env) == {"TORCHINDUCTOR_CACHE_DIR": "/scratch/i", "TRITON_CACHE_DIR": "/scratch/t",
                                "TRITON_LIBCUDA_PATH": "/usr/lib/wsl/lib"}
