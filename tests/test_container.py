"""Containers and device health: MIG, MPS, compute mode, memory errors, Xid, fabric manager, profiling."""

from __future__ import annotations

from libs_support import FakeCmd, FakeSystem, data, finding_ids, h200_kernel_module, h200_nvml

from cudadoctor.checks.registry import Context, load_all, run_one
from cudadoctor.facts.container import parse_xids
from cudadoctor.facts.registry import Options, gather
from cudadoctor.facts.types import NvmlGpu
from cudadoctor.model import Fact, Status, from_jsonable


def container_system(docker: bool = True, nodes: bool = True, dmesg: FakeCmd = None, procs: dict = None,
                     user: str = "alice", env: dict = None) -> FakeSystem:
    s = FakeSystem(env=env or {"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "0",
                               "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}, user=user)
    if docker:
        s.add_file("/.dockerenv", b"")
    if nodes:
        for n in ("nvidia0", "nvidiactl", "nvidia-uvm"):
            s.add_file(f"/dev/{n}", b"")
    s.add_file("/dev/null", b"")
    for pid, comm in (procs or {"1": "bash"}).items():
        s.add_file(f"/proc/{pid}/comm", comm + "\n")
    s.add_exe("/usr/bin/dmesg", dmesg or FakeCmd(stdout=""))
    return s


def run_health(s: FakeSystem, nvml=None, km=None):
    facts = gather(s, ["platform", "container"], Options())
    facts["nvml"] = Fact.found(nvml or h200_nvml())
    facts["kernel_module"] = Fact.found(km or h200_kernel_module())
    return run_one(load_all()["container"], Context(facts=facts)), facts


def test_h200_healthy_bare():
    r, facts = run_health(container_system(docker=False))
    ids = finding_ids(r)
    assert r.status is Status.OK
    assert ids["health.profiling"] is Status.OK  # RmProfilingAdminOnly: 0 on the H200
    assert "container.detected" not in ids


def test_docker_detected_with_gpus():
    r, facts = run_health(container_system())
    c = facts["container"].value
    assert c.kind == "docker" and "/dev/nvidia0" in c.device_nodes
    assert finding_ids(r)["container.detected"] is Status.OK


def test_container_without_gpu_nodes():
    r, _ = run_health(container_system(nodes=False))
    assert finding_ids(r)["container.no-gpu-nodes"] is Status.FAIL
    # a container that never asked for GPUs: the driver step says it, no second FAIL here
    r, _ = run_health(container_system(nodes=False, env={"PATH": "/usr/bin"}))
    assert "container.no-gpu-nodes" not in finding_ids(r)


def test_mig_on_without_instances_and_with():
    r, _ = run_health(container_system(), nvml=h200_nvml(mig_mode=True, mig_devices=[]))
    assert finding_ids(r)["health.mig-no-instances"] is Status.FAIL
    mig = [{"index": 0, "uuid": "MIG-4f5e7a1c-1111-2222-3333-444455556666", "name": "NVIDIA H200 1g.18gb"}]
    r, _ = run_health(container_system(), nvml=h200_nvml(mig_mode=True, mig_devices=mig))
    assert finding_ids(r)["health.mig"] is Status.OK


def test_compute_modes_and_mps():
    r, _ = run_health(container_system(), nvml=h200_nvml(compute_mode="Prohibited"))
    assert finding_ids(r)["health.compute-mode-prohibited"] is Status.FAIL
    r, _ = run_health(container_system(), nvml=h200_nvml(compute_mode="Exclusive_Process"))
    assert finding_ids(r)["health.compute-mode-exclusive"] is Status.WARN
    s = container_system(procs={"1": "bash", "77": "nvidia-cuda-mps-control"})
    r, facts = run_health(s, nvml=h200_nvml(compute_mode="Exclusive_Process"))
    ids = finding_ids(r)
    assert facts["container"].value.mps_daemon
    assert ids["health.compute-mode-exclusive"] is Status.OK
    assert ids["health.mps"] is Status.OK


def test_retired_pages_and_remapped_rows():
    r, _ = run_health(container_system(), nvml=h200_nvml(remapped_rows_pending=True))
    assert finding_ids(r)["health.reset-pending"] is Status.WARN
    r, _ = run_health(container_system(), nvml=h200_nvml(remapped_rows_failure=True))
    assert finding_ids(r)["health.remapped-rows-failure"] is Status.FAIL
    r, _ = run_health(container_system(), nvml=h200_nvml(ecc_uncorrected_volatile=3))
    assert finding_ids(r)["health.ecc-uncorrected"] is Status.WARN


def test_xid_79_in_kernel_log():
    r, facts = run_health(container_system(dmesg=FakeCmd(stdout=data("container", "dmesg_xid.txt"))))
    ev = facts["container"].value.xid_events
    assert [(e.pci, e.code) for e in ev] == [("0000:18:00", 79)]
    assert finding_ids(r)["health.xid"] is Status.FAIL


def test_application_xids_are_not_hardware_faults():
    assert [e.code for e in parse_xids(data("container", "dmesg_xid_app.txt"))] == [31, 13]
    r, _ = run_health(container_system(dmesg=FakeCmd(stdout=data("container", "dmesg_xid_app.txt"))))
    assert finding_ids(r)["health.xid-app"] is Status.OK


def test_kernel_log_unreadable():
    cmd = FakeCmd(stderr="dmesg: read kernel buffer failed: Operation not permitted", returncode=1)
    r, facts = run_health(container_system(dmesg=cmd))
    assert "Operation not permitted" in facts["container"].value.xid_error
    assert finding_ids(r)["health.xid-unreadable"] is Status.SKIP


def test_fabric_manager_not_started():
    r, _ = run_health(container_system(docker=False), nvml=h200_nvml(fabric_state=1))
    f = next(x for x in r.findings if x.id == "health.fabric-manager")
    assert f.status is Status.FAIL
    assert "sudo systemctl enable --now nvidia-fabricmanager" in f.fix.commands


def test_fabric_state_read_from_probe_json():
    g = from_jsonable(NvmlGpu, {"index": 0, "name": "H100", "fabric_state": 2})
    assert g.fabric_state == 2


def test_profiling_admin_only_for_non_root_and_root():
    km = h200_kernel_module(RmProfilingAdminOnly="1")
    r, _ = run_health(container_system(docker=False), km=km)
    f = next(x for x in r.findings if x.id == "health.profiling-admin-only")
    assert f.status is Status.WARN
    assert any("NVreg_RestrictProfilingOnlyToAdminUsers=0" in c for c in f.fix.commands)
    r, _ = run_health(container_system(docker=False, user="root"), km=km)
    assert finding_ids(r)["health.profiling"] is Status.OK
