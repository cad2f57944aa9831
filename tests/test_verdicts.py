"""Issue 13: verdicts as severe as what the program meets, on the layer where it breaks.

The real probe script runs against a CPU torch that behaves like the H200's torch did under each fault
(tests/fake_cuda_torch.py, texts from tests/data/h200x2); its output then goes through the whole checklist
on the recorded H200 machine (tests/scenarios.py)."""

from __future__ import annotations

import json

import pytest
from fake_cuda_torch import messages, run_probe
from fakes.system import FakeCmd
from helpers import check, ids, status, steps
from scenarios import h200

from cudadoctor.facts.torch import build_info, parse_stages

UUID1 = "GPU-98c8e6bb-71cb-01a3-2789-aeaadd598bf2"
TORCH_UUID0 = "GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d"  # the fake torch's device 0 (the recorded H200's)


def nvml2(procs0=(), used0=0, mode0="Default", procs1=(), used1=0) -> str:
    """Two H200s as NVML saw them on the recon machine; processes as [(pid, MiB)]."""
    def gpu(i, uuid, procs, used, mode):
        return {"index": i, "name": "NVIDIA H200", "uuid": uuid, "pci_bus_id": f"00000000:00:0{6 + i}.0",
                "compute_capability": "9.0", "memory_total_mib": 143771, "memory_used_mib": used, "mig_mode": False,
                "persistence_mode": True, "compute_mode": mode, "ecc_enabled": True,
                "processes": [{"pid": p, "used_mib": m} for p, m in procs]}
    return json.dumps({"error": "", "driver_version": "580.159.04", "nvml_version": "13.580.159.04",
                       "cuda_driver_version": "13.0", "device_count": 2,
                       "gpus": [gpu(0, TORCH_UUID0, procs0, used0, mode0), gpu(1, UUID1, procs1, used1, "Default")]})


SMI2 = ("0, NVIDIA H200, GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d, 00000000:00:06.0, 9.0, 143771, 580.159.04, "
        "Disabled, Enabled, Default\n1, NVIDIA H200, GPU-98c8e6bb-71cb-01a3-2789-aeaadd598bf2, 00000000:00:07.0, 9.0, "
        "143771, 580.159.04, Disabled, Enabled, Default\n")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """scenario -> (stdout, returncode) of the real probe script; each scenario runs once."""
    cache: dict = {}

    def run(scenario: str):
        if scenario not in cache:
            r = run_probe(tmp_path_factory.mktemp(scenario), scenario)
            cache[scenario] = (r.stdout, r.returncode)
        return cache[scenario]
    return run


def machine(probe_out, env=None, nvml=None, procs=None):
    out, rc = probe_out
    fs = h200(env=env, torch=FakeCmd(out, returncode=rc), nvml=FakeCmd(nvml or nvml2()),
              smi_csv=FakeCmd(SMI2))
    fs.procs.update(procs or {})
    return fs


def finding(report, fid):
    return next(f for s in report.steps for f in s.findings if f.id == fid)


# ---------------------------------------------------------------- the probe itself


def test_probe_stops_calling_cuda_after_torchs_init_raised(probe):
    out, rc = probe("alloc")
    assert rc == 0  # 0.1.0's probe died here by SIGSEGV (tests/data/h200x2/c13_alloc_check.json)
    t = build_info(parse_stages(out))
    assert t.available is True and t.device_count == 2
    assert t.first_use_error == "ValueError: " + messages()["alloc"]  # verbatim
    assert t.op is None and t.devices == [] and not t.stopped


def test_probe_reports_cudnn_versions_and_the_conv(probe):
    t = build_info(parse_stages(probe("cudnn")[0]))
    assert (t.cudnn.compiled, t.cudnn.runtime) == ("9.19.0", "9.14.0")
    assert t.cudnn.version_error == "RuntimeError: " + messages()["cudnn"]
    assert t.cudnn_version is None
    assert t.op.ok and t.conv.ok and t.conv.checked
    healthy = build_info(parse_stages(probe("healthy")[0]))
    assert healthy.cudnn.version == 91900 and healthy.conv.ok and healthy.pid


def test_probe_names_the_stage_it_died_in(probe):
    out, rc = probe("segv-matmul")
    assert rc == -11
    t = build_info(parse_stages(out))
    assert t.stopped_part == "op" and "matmul" in t.stopped_doing
    assert t.libraries  # what was mapped before the op began


# ---------------------------------------------------------------- case 1: a bad allocator setting


def test_alloc_conf_case_is_the_ops_failure_not_torch_cuda(probe):
    r = check(machine(probe("alloc"), env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:maybe"}))
    st = status(r)
    assert st["torch.cuda"] == "ok" and "2 devices" in steps(r)["torch.cuda"].summary
    assert st["device.capability"] == "ok"
    assert steps(r)["device.capability"].summary.startswith("2× NVIDIA H200 · cc 9.0")
    f = finding(r, "torch.op.first-use-failed")
    assert f.status.value == "fail"
    assert f.evidence["torch.cuda.init()"] == "ValueError: " + messages()["alloc"]
    assert f.evidence["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:maybe"
    assert "unset PYTORCH_CUDA_ALLOC_CONF" in f.fix.commands
    assert ids(r)["env.alloc-conf"] == "fail"
    assert r.exit_code == 1


def test_a_death_in_the_op_keeps_torch_cuda_and_capability(probe):
    r = check(machine(probe("segv-matmul")))
    st = status(r)
    assert st["torch.cuda"] == "ok" and st["device.capability"] == "ok"
    f = finding(r, "torch.op.crashed")
    assert f.status.value == "fail" and "SIGSEGV" in f.summary and "matmul" in f.summary
    assert "torch.cuda.probe-crashed" not in ids(r)
    assert r.facts["torch"].state.value == "found" and r.facts["torch"].error  # the stages it finished stand


def test_a_hang_in_the_op_is_the_ops_failure():
    from cudadoctor.facts.torch import settle
    from cudadoctor.model import Fact
    from scenarios import torch_stages

    out = torch_stages(upto="devices") + '@@CUDADOCTOR@@ {"stage": "begin", "part": "op.ones", "doing": "torch.ones(1).cuda()"}\n'
    t = build_info(parse_stages(out))
    fact = settle(Fact.timeout("probe", "the torch probe gave no answer within 120 s while torch.ones(1).cuda() (killed)",
                               value=t), "timeout")
    assert fact.state.value == "found" and t.stopped_kind == "timeout" and t.stopped_part == "op"
    from cudadoctor.checks.registry import ordered, run_steps

    res = {s.id: s for s in run_steps(ordered(["torch.cuda", "torch.op"]), {"torch": fact})}
    assert res["torch.cuda"].status.value == "ok"
    assert res["torch.op"].findings[0].id == "torch.op.hung"


# ---------------------------------------------------------------- case 2: an older cuDNN first on the path


def test_conv_failure_is_its_own_verdict(probe):
    r = check(machine(probe("conv")))
    f = finding(r, "torch.op.cudnn-failed")
    assert f.status.value == "fail" and f.evidence["error"] == "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"
    assert status(r)["torch.cuda"] == "ok"


def test_healthy_op_runs_the_conv(probe):
    r = check(machine(probe("healthy")))
    assert ids(r)["torch.op.ok"] == "ok"
    assert "3×3 conv (cuDNN)" in steps(r)["torch.op"].summary
    assert status(r)["torch.cuda"] == "ok" and status(r)["container"] == "ok"
    assert ids(r)["health.gpu-memory"] == "ok"


# ---------------------------------------------------------------- case 3: another process holds the memory


def test_out_of_memory_names_the_process_that_holds_it(probe):
    fs = machine(probe("oom"), env={"CUDA_VISIBLE_DEVICES": "0"}, nvml=nvml2([(2662, 142892)], 143515),
                 procs={2662: {"name": "python3", "user": "root", "uses_gpu": True}})
    r = check(fs)
    f = finding(r, "torch.op.out-of-memory")
    assert f.status.value == "fail"
    assert "PID 2662 python3 (root, 142892 MiB)" in f.summary
    assert any(c.startswith("kill 2662") for c in f.fix.commands)
    assert any(c.startswith("CUDA_VISIBLE_DEVICES=1 ") for c in f.fix.commands)
    assert f.evidence["error"].startswith("AcceleratorError: CUDA error: out of memory")
    w = finding(r, "health.gpu-memory-full")
    assert w.status.value == "warn" and "PID 2662" in w.summary
    assert status(r)["torch.cuda"] == "ok"


def test_out_of_memory_holder_in_another_pid_namespace(probe):
    fs = machine(probe("oom"), nvml=nvml2([(4242, 142892)], 143515),
                 procs={4242: {"name": "bash", "user": "alice", "uses_gpu": False}})  # a stranger with that PID
    f = finding(check(fs), "torch.op.out-of-memory")
    assert "another PID namespace" in f.summary
    assert not any(c.startswith("kill") for c in f.fix.commands)
    fs = machine(probe("oom"), nvml=nvml2([(4242, 142892)], 143515))  # no such PID here at all
    f = finding(check(fs), "torch.op.out-of-memory")
    assert "not in this PID namespace" in f.summary and "ask whoever runs them" in f.fix.text


def test_a_busy_exclusive_gpu_names_its_holder(probe):
    fs = machine(probe("busy"), nvml=nvml2([(3131, 900)], 1500, mode0="Exclusive_Process"),
                 procs={3131: {"name": "trainer", "user": "bob", "uses_gpu": True}})
    r = check(fs)
    f = finding(r, "torch.op.gpu-busy")
    assert f.status.value == "fail" and "Exclusive_Process" in f.summary and "PID 3131 trainer" in f.summary
    assert any("nvidia-smi -i 0 -c DEFAULT" in c for c in f.fix.commands)
    w = finding(r, "health.compute-mode-exclusive")
    assert w.status.value == "warn" and "PID 3131" in w.summary


def test_a_gpu_full_through_others_warns_without_a_torch_failure(probe):
    r = check(machine(probe("healthy"), nvml=nvml2(procs1=[(77, 140000)], used1=140500),
                      procs={77: {"name": "vllm", "user": "carol", "uses_gpu": True}}))
    f = finding(r, "health.gpu-memory-full")
    assert f.status.value == "warn" and "GPU 1" in f.summary and "PID 77 vllm (carol, 140000 MiB)" in f.summary
    assert r.exit_code == 0  # a warning: nothing failed
    ok = [x for x in steps(r)["container"].findings if x.id == "health.gpu-memory"]
    assert ok and "no other process" in ok[0].summary


def test_own_probe_is_not_counted_as_another_process(probe):
    out, rc = probe("healthy")
    pid = build_info(parse_stages(out)).pid
    r = check(machine((out, rc), nvml=nvml2([(pid, 600)], 140000)))
    assert "health.gpu-memory-full" not in ids(r)


def test_gpu_processes_fact_from_nvml_and_the_process_table():
    from cudadoctor.facts.registry import Options, gather

    fs = h200(nvml=FakeCmd(nvml2([(10, 5), (11, 6), (12, 7)])))
    fs.procs.update({10: {"name": "python3", "user": "root", "uses_gpu": True, "cmdline": "python3 a.py --token=x"},
                     12: {"name": "sshd", "user": "root", "uses_gpu": False}})
    info = gather(fs, ["gpu_processes"], Options())["gpu_processes"].value
    by = {p.pid: p for p in info.processes}
    assert by[10].seen_here and by[10].cmdline == "python3 a.py"  # later arguments can carry secrets
    assert not by[11].visible and not by[11].seen_here
    assert by[12].visible and not by[12].seen_here and "another PID namespace" in by[12].label()


# ---------------------------------------------------------------- helpers


def test_two_identical_gpus_are_said_once():
    from cudadoctor.checks.capability import grouped

    assert grouped(["NVIDIA H200 · cc 9.0", "NVIDIA H200 · cc 9.0"]) == "2× NVIDIA H200 · cc 9.0"
    assert grouped(["A", "B", "A"]) == "2× A; B"


@pytest.mark.gpu
def test_real_gpu_probe_runs_every_stage():
    """On the GPU machine: the real probe in a CUDA torch reaches every stage, the conv included."""
    import os
    import sys

    from cudadoctor.facts.registry import Options
    from cudadoctor.facts.torch import gather_torch
    from cudadoctor.system.host import HostSystem

    py = os.environ.get("CUDADOCTOR_TEST_PYTHON") or (
        "/opt/torch/.venv/bin/python3" if os.path.exists("/opt/torch/.venv/bin/python3") else sys.executable)
    fact = gather_torch(HostSystem(), Options(python=py, timeout_torch=180), {})
    t = fact.value
    if t is None or not t.cuda:
        pytest.skip(f"no CUDA torch in {py}")
    assert fact.state.value == "found" and not t.stopped and t.available, fact.error
    assert t.op.ok and t.op.checked and not t.first_use_error
    if t.cudnn is not None and t.cudnn.available:
        assert t.conv.ok and t.conv.checked, t.conv
        assert t.cudnn.compiled and t.cudnn.runtime
