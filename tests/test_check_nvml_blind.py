"""A machine where the driver is loaded but neither nvidia-smi nor NVML can list the GPUs (a compute-only
container: NVIDIA_DRIVER_CAPABILITIES=compute, no libnvidia-ml, no nvidia-smi): CUDA still sees the GPUs.

Before: the driver-API probe and the binary scan said "no GPU", topology and NCCL said "0 GPUs: nothing between
GPUs", and --expect-gpus failed with "the driver sees 0", though torch used the GPUs. Now the GPU count, the
compute capability and the pairs come from CUDA's own list (python -m cudadoctor.probes.peer)."""

from __future__ import annotations

import json
from pathlib import Path

from fakes.system import FakeCmd
from multigpu_scenarios import h200_peers, two_h200
from scenarios import PROBE_SCRIPT, PY, h200, torch_stages

from cudadoctor.doctor import run_check
from cudadoctor.facts.local_gpu import from_facts, local_gpu
from cudadoctor.facts.registry import Options, gather

RECORDED = Path(__file__).parent / "data" / "h200" / "s32_peer_no_nvml.txt"
NO_NVML = FakeCmd(json.dumps({"error": "LibraryNotFound", "message": "NVML Shared Library Not Found"}))
PEER = [PY, "-m", "cudadoctor.probes.peer"]
LIBCUDA = "/usr/local/nvidia/lib64/libcuda.so.1"  # where the H200's ldconfig cache names it
STEPS = ("topology", "nccl", "probe.scan", "probe.launch")


def peers(n: int = 2, visible=None) -> FakeCmd:
    """CUDA's list as python -m cudadoctor.probes.peer prints it: one GPU as recorded on the H200 with NVML unusable
    (tests/data/h200/s32_peer_no_nvml.txt); two from the 2x H200 capture (multigpu_scenarios.h200_peers)."""
    if n == 1 and visible is None:
        return FakeCmd(RECORDED.read_text())
    rec = json.loads(h200_peers(0).split("@@CDPEER@@")[1])
    rec["devices"], rec["visible_devices"], rec["count"] = rec["devices"][:n], visible, n
    rec["peers"] = [p for p in rec["peers"] if p["a"] < n and p["b"] < n]
    return FakeCmd("@@CDPEER@@" + json.dumps(rec) + "\n")


def blind(n: int = 2, visible=None, peer=None, files=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1")):
    fs = h200(smi=False, nvml=NO_NVML)
    fs.add_file("/.dockerenv", "")
    for f in files[:2 + n]:
        fs.add_file(f, "")
    fs.add_file(LIBCUDA, "")  # the compute capability mounts libcuda: CUDA works
    fs.on(PEER, peer or peers(n, visible))
    return fs


def check(fs, expect_gpus=None):
    opts = Options(gpu_ops=True)
    if expect_gpus is not None:
        opts.extra["expect_gpus"] = expect_gpus
    return run_check(fs, opts, STEPS)


def found(r) -> dict:
    return {f.id: f for s in r.steps for f in s.findings}


def peer_ran(fs) -> bool:
    return any(list(c[:3]) == PEER for c in fs.calls)


def test_cudas_list_names_the_gpu_when_nvml_cannot():
    fs = blind(1)
    g = local_gpu(fs)
    assert g.cc == (9, 0) and g.name == "NVIDIA H200" and peer_ran(fs)


def test_one_gpu_compute_only_container_is_one_gpu_not_zero():
    fs = blind(1)
    r = check(fs)
    f = found(r)
    assert f["topology.single"].status.value == "skip" and "CUDA shows 1 GPU" in f["topology.single"].summary
    assert "probe.scan.no-gpu" not in f  # the binaries are judged against the GPU CUDA named
    assert "0 GPUs" not in " ".join(x.summary for x in f.values())
    assert "CUDA shows 1 GPU" in f["nccl.not-run"].summary and "None" not in f["nccl.not-run"].summary


def test_the_driver_api_probe_is_tried_when_nvml_cannot_list_gpus():
    fs = blind(1)
    r = check(fs)
    assert any(list(c[1:3]) == ["-m", "cudadoctor.probes.launch"] for c in fs.calls)
    assert "no NVIDIA driver answered" not in found(r)["probe.launch.skipped"].summary


def test_two_gpus_compute_only_counts_cudas_gpus_and_runs_the_collective():
    fs = blind(2)
    r = check(fs, expect_gpus=2)
    f = found(r)
    assert f["topology.gpu-count"].status.value == "ok"
    assert f["topology.unreadable"].status.value == "skip" and "CUDA shows 2 GPUs" in f["topology.unreadable"].summary
    assert any(list(c[1:3]) == ["-m", "cudadoctor.child.nccl_launch"] for c in fs.calls)  # 2 ranks tried


def test_expect_gpus_fails_on_cudas_count_in_a_container_given_fewer():
    f = found(check(blind(2), expect_gpus=8))["topology.gpu-count"]
    assert f.status.value == "fail" and f.evidence["CUDA sees"] == 2 and "NVIDIA_VISIBLE_DEVICES" in f.fix.commands[0]


def test_expect_gpus_under_cuda_visible_devices_warns_not_fails():
    f = found(check(blind(2, visible="1,0"), expect_gpus=8))["topology.gpu-count"]
    assert f.status.value == "warn" and "env -u CUDA_VISIBLE_DEVICES" in f.fix.commands[0]


def test_cuda_also_failing_is_said_not_counted_as_zero():
    bad = FakeCmd("@@CDPEER@@" + json.dumps({"stage": "cuInit", "error": {"name": "CUDA_ERROR_UNKNOWN",
                                                                          "message": "unknown error"}}) + "\n")
    r = check(blind(peer=bad), expect_gpus=2)
    f = found(r)
    assert f["topology.gpu-count"].status.value == "skip" and "CUDA_ERROR_UNKNOWN" in f["topology.gpu-count"].summary
    assert f["topology.unreadable"].status.value == "skip"
    assert "neither nvidia-smi nor NVML" in f["probe.launch.skipped"].summary


def test_a_driver_that_lists_no_gpu_is_zero_and_runs_no_cuda_child():
    # nvidia-smi answers "No devices were found": that is the driver's word, not an unknown
    from test_check_scenarios import no_gpu_machine

    fs = no_gpu_machine()
    fs.on(PEER, peers(2))
    check(fs)
    assert not peer_ran(fs) and from_facts({}).cc is None


def test_no_driver_at_all_runs_no_cuda_child():
    fs = h200(smi=False, nvml=NO_NVML, proc=False)
    fs.on(PEER, peers(2))
    r = check(fs)
    assert not peer_ran(fs) and "no NVIDIA driver answered" in found(r)["probe.launch.skipped"].summary


# A review (a helper acting as a CUDA, container and Slurm expert, scenarios written before running) found these
# wrong on the first version of the change; each failed there.

def peer_error(stage: str, name: str, message: str) -> FakeCmd:
    return FakeCmd("@@CDPEER@@" + json.dumps({"visible_devices": None, "device_order": None, "stage": stage,
                                              "error": {"name": name, "message": message}}) + "\n")


def peer_list(devices: list, visible=None) -> FakeCmd:
    return FakeCmd("@@CDPEER@@" + json.dumps({"visible_devices": visible, "device_order": None, "driver_cuda": "13.0",
                                              "count": len(devices), "devices": devices, "peers": []}) + "\n")


def test_cpu_only_container_on_a_gpu_node_is_zero_gpus():
    # no --gpus: /proc/driver/nvidia is the host's, but no /dev/nvidia* is given: 0 GPUs here, and no CUDA child
    fs = h200(smi=False, nvml=NO_NVML)
    fs.add_file("/.dockerenv", "")
    fs.on(PEER, peer_error("load-libcuda", "no-libcuda", "libcuda.so.1: cannot open shared object file"))
    assert found(check(fs, expect_gpus=8))["topology.gpu-count"].status.value == "fail" and not peer_ran(fs)


def test_cuinit_no_device_is_a_count_of_zero():
    fs = blind(peer=peer_error("cuInit", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"))
    f = found(check(fs, expect_gpus=2))["topology.gpu-count"]
    assert f.status.value == "fail" and f.evidence["CUDA sees"] == 0


def test_a_mask_naming_every_expected_gpu_is_not_why_fewer_are_seen():
    # CUDA_VISIBLE_DEVICES=0..7 (a job given 8) but CUDA sees 2: the mask hides nothing; GPUs are missing
    assert found(check(blind(2, visible="0,1,2,3,4,5,6,7"), expect_gpus=8))["topology.gpu-count"].status.value == "fail"


def test_a_mig_instance_is_not_reported_as_missing_gpus():
    mig = [{"ordinal": 0, "bus": "0000:00:06.0", "name": "NVIDIA H200 MIG 1g.18gb", "uuid": "MIG-1234", "cc": "9.0"}]
    f = found(check(blind(peer=peer_list(mig)), expect_gpus=8))["topology.gpu-count"]
    assert f.status.value == "skip" and "MIG" in f.summary


def test_a_gpu_uuid_mask_in_a_compute_only_container_is_not_a_missing_gpu():
    u = "GPU-ae93dbb7-a691-a7b0-429e-6b4fd60d4d1f"
    fs = blind(1, peer=peers(1, u))
    fs.env["CUDA_VISIBLE_DEVICES"] = u
    r = run_check(fs, Options(gpu_ops=True), ("environment",))
    assert found(r)["env.cuda-visible-devices"].status.value == "ok"


def test_a_wedged_driver_starts_no_cuda_child():
    # nvidia-smi and NVML time out: that is the driver step's failure, not GPUs that cannot be listed; a cuInit child
    # would hang as well
    fs = h200(smi=FakeCmd(hang=True), smi_csv=FakeCmd(hang=True), nvml=FakeCmd(hang=True))
    fs.on(PEER, peers(1))
    for f in ("/dev/nvidiactl", "/dev/nvidia0"):
        fs.add_file(f, "")
    run_check(fs, Options(gpu_ops=True))
    assert not peer_ran(fs)


def test_the_binary_scan_on_a_multi_gpu_host_starts_no_cuda_child():
    # NVML lists the GPUs: nothing waits for CUDA's list (`explain` gathers probe_scan too)
    fs = two_h200()
    gather(fs, ["probe_scan"], Options())
    assert not peer_ran(fs)


def test_more_gpus_than_expected_is_not_worded_as_fewer():
    f = found(check(blind(2), expect_gpus=1))["topology.gpu-count"]
    assert f.status.value == "fail" and "fewer" not in f.detail and "1 GPUs" not in f.summary


def test_the_driver_step_says_the_gpus_cannot_be_listed_not_that_there_are_none():
    r = run_check(blind(1), Options(gpu_ops=True), ("driver",))
    assert "not listable" in r.steps[0].summary and found(r)["driver.smi-missing"].status.value == "warn"


def test_cuda_hanging_at_start_in_a_compute_only_container_is_a_failure_not_a_skip():
    # (session 33) CUDA's own list hangs (cuInit or the device count never returns) where nvidia-smi and NVML cannot list
    # the GPUs, in an interpreter without torch: before, every GPU step said "skip" and check ended with 0 problems
    fs = blind(2, peer=FakeCmd(hang=True))
    fs.on([PY, PROBE_SCRIPT], FakeCmd(torch_stages(not_installed=True)))
    opts = Options(gpu_ops=True)
    opts.extra["expect_gpus"] = 2
    f = found(run_check(fs, opts, ["driver", "torch.cuda", "probe.launch", "topology"], []))
    assert f["probe.launch.timeout"].status.value == "fail" and "hung" in f["probe.launch.timeout"].summary
    assert "dmesg" in " ".join(f["probe.launch.timeout"].fix.commands)
    assert f["topology.gpu-count"].status.value == "skip"  # counted nowhere: the probe's failure says why
