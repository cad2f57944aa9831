"""The topology (95) and nccl (96) steps on the real 2x H200 captures and on fakes of other machines:
8 GPUs on NVSwitch, a mixed node, a PCIe-only node with P2P blocked."""

from __future__ import annotations

import json

import pytest
from helpers import ids, status
from multigpu_scenarios import (
    H100_BUSES,
    L40S_BUSES,
    PY,
    config_space,
    dgx_h100,
    h200_nccl,
    h200_nccl_badif,
    h200_nccl_hang,
    launcher_output,
    mixed_node,
    pcie_node,
    rank_records,
    rec,
    run_ok,
    two_h200,
)
from scenarios import h200

from cudadoctor.doctor import run_check
from cudadoctor.facts.registry import Options
from cudadoctor.model import Status

STEPS = ("topology", "nccl")
LAUNCH = (PY, "-m", "cudadoctor.child.nccl_launch")
BUSES = {two_h200: ["0000:00:06.0", "0000:00:07.0"], dgx_h100: ["0000" + b for b in H100_BUSES],
         mixed_node: ["0000:02:00.0", "0000:03:00.0", "0000:01:00.0"], pcie_node: ["0000" + b for b in L40S_BUSES]}


def check(system, only=(), expect_gpus=None, gpu_ops=True):
    opts = Options(gpu_ops=gpu_ops)
    if expect_gpus is not None:
        opts.extra["expect_gpus"] = expect_gpus
    return run_check(system, opts, only)


def finding(report, fid):
    return next(f for s in report.steps for f in s.findings if f.id == fid)


def commands(report) -> list:
    return [c for s in report.steps for f in s.findings if f.fix for c in f.fix.commands]


# ------------------------------------------------------------------ the 2x H200 machine (recon captures)


def test_healthy_two_h200_nv18_peer_access_and_a_real_figure():
    r = check(two_h200())
    assert status(r)["topology"] == "ok" and status(r)["nccl"] == "ok"
    assert ids(r)["topology.links"] == "ok" and ids(r)["topology.ordinals"] == "ok" and ids(r)["nccl.ok"] == "ok"
    links = finding(r, "topology.links")
    assert "NV18" in links.summary and "peer access" in links.summary
    ok = finding(r, "nccl.ok")
    assert "260.1 GB/s" in ok.summary and "P2P" in ok.summary  # nccl_healthy.txt's 64 MiB figure, via P2P/CUMEM
    assert r.exit_code == 0


def test_p2p_and_shm_disabled_warns_far_below_nvlink_and_names_both_variables():
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    r = check(two_h200(env=env, nccl=h200_nccl("nccl_nop2p_noshm.txt")))
    f = finding(r, "nccl.slow")
    assert f.status is Status.WARN and status(r)["nccl"] == "warn"
    below = float(f.summary.split(" is ")[1].split("× below")[0])
    assert below >= 50  # 4.0 GB/s against ~256 GB/s at 64 MiB (the 100x is at 1 GiB: 326 vs 3-4)
    assert "NET/Socket" in f.summary
    assert "unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE" in f.fix.commands
    assert r.facts["nccl"].value.env_read["NCCL_P2P_DISABLE"] == "1"


def test_p2p_disabled_alone_falls_back_to_shm_and_still_warns():
    r = check(two_h200(env={"NCCL_P2P_DISABLE": "1"}, nccl=h200_nccl("nccl_nop2p.txt")), only=STEPS)
    f = finding(r, "nccl.slow")
    assert "SHM" in f.summary and f.fix.commands[0] == "unset NCCL_P2P_DISABLE"


def test_bad_socket_ifname_fails_at_init_with_the_interface_fix():
    env = {"NCCL_SOCKET_IFNAME": "eth9", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    r = check(two_h200(env=env, nccl=h200_nccl_badif()), only=STEPS)
    f = finding(r, "nccl.error")
    assert f.status is Status.FAIL and r.exit_code == 1
    assert "init" in f.summary and "no socket interface found" in f.summary
    assert f.fix.commands[0].startswith("export NCCL_SOCKET_IFNAME=eth0")
    assert not any("NCCL_P2P_DISABLE" in c for c in f.fix.commands)  # it slows, it does not break bootstrap


def test_a_rank_that_never_joins_is_a_hang_in_the_collective_naming_it():
    r = check(two_h200(nccl=h200_nccl_hang(1)), only=STEPS)
    f = finding(r, "nccl.hang")
    assert f.status is Status.FAIL
    assert "hung in the collective" in f.summary and "rank 1 on GPU 1" in f.summary and "rank 0" in f.summary
    run = r.facts["nccl"].value
    assert run.outcome == "hang" and run.stage == "collective" and [x.rank for x in run.laggards] == [1]


@pytest.mark.parametrize("stage", ["rendezvous", "init"])
def test_hang_stage_is_named(stage):
    stages = ("rendezvous",) if stage == "init" else ()
    recs = rank_records(0, "0000:00:06.0", stages) + [rec(0, "begin", what=stage)]
    recs += rank_records(1, "0000:00:07.0", stages)
    r = check(two_h200(nccl=launcher_output(recs, how="deadline", killed=(0, 1))), only=STEPS)
    assert r.facts["nccl"].value.stage == stage
    assert f"hung in {'the rendezvous' if stage == 'rendezvous' else 'NCCL'}" in finding(r, "nccl.hang").summary


def test_wrong_sum_fails():
    recs = rank_records(0, "0000:00:06.0") + rank_records(1, "0000:00:07.0")
    recs.append(rec(1, "check", ok=False, expected=3.0, got_min=2.0, got_max=3.0))
    r = check(two_h200(nccl=launcher_output(recs + [rec(0, "done", ok=False), rec(1, "done", ok=False)])),
              only=STEPS)
    assert ids(r)["nccl.wrong-result"] == "fail"


def test_cuda_visible_devices_reversed_maps_ordinals_to_bus_ids():
    r = check(two_h200(env={"CUDA_VISIBLE_DEVICES": "1,0"}, peers_run=2,
                       nccl=h200_nccl(buses=("0000:00:07.0", "0000:00:06.0"))), only=STEPS)
    f = finding(r, "topology.ordinals")
    assert f.status is Status.OK and "renumbers" in f.summary
    assert f.evidence["CUDA 0"] == "0000:00:07.0 = nvidia-smi GPU 1"
    assert ids(r)["nccl.ok"] == "ok"


def test_expect_gpus_counts_the_node():
    assert ids(check(two_h200(), only=STEPS, expect_gpus=2))["topology.gpu-count"] == "ok"
    r = check(two_h200(), only=STEPS, expect_gpus=8)
    assert ids(r)["topology.gpu-count"] == "fail" and "expected 8 GPUs, the driver sees 2" in r.steps[0].summary
    r = check(h200(), only=STEPS, expect_gpus=2)  # one GPU left: the count is still judged
    assert ids(r)["topology.gpu-count"] == "fail"


def test_one_gpu_runs_no_child_and_skips():
    fs = h200()
    r = check(fs, only=STEPS)
    assert status(r) == {"topology": "skip", "nccl": "skip"}
    ran = {c[2] for c in fs.calls if len(c) > 2 and c[1] == "-m"}
    assert not ran & {"cudadoctor.system.nvml_links", "cudadoctor.probes.peer", "cudadoctor.child.nccl_launch"}


def test_no_gpu_ops_runs_no_collective():
    fs = two_h200()
    r = check(fs, only=STEPS, gpu_ops=False)
    assert ids(r)["nccl.not-run"] == "skip" and LAUNCH not in fs.calls


def test_mig_runs_no_collective():
    r = check(two_h200(nvml_over={0: {"mig_mode": True, "mig_devices": [{"uuid": "MIG-x"}]}}), only=STEPS)
    assert ids(r)["nccl.not-run"] == "skip" and "MIG" in r.steps[1].summary


def test_the_plan_inherits_the_environment_and_only_changes_logging():
    fs = two_h200()
    check(fs, only=STEPS)
    plan = json.loads(fs.inputs[LAUNCH])
    assert plan["world"] == 2 and plan["python"] == PY and plan["script"].endswith("child/nccl_rank.py")
    assert plan["env"] == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,ENV,NET", "NCCL_DEBUG_FILE": None}
    assert plan["deadline_s"] <= 120 and "--nvlink" in plan["args"]
    assert plan["args"][plan["args"].index("--bytes") + 1] == str(64 << 20)


# ------------------------------------------------------------------ other machines


def test_eight_gpus_on_nvswitch_all_nv18():
    r = check(dgx_h100(), only=STEPS)
    assert status(r) == {"topology": "ok", "nccl": "ok"}
    links = finding(r, "topology.links")
    assert links.summary.startswith("8 GPUs · NV18 between every pair · peer access on all 28 pairs")
    assert r.facts["nccl"].value.world == 8


def test_a_gpu_with_links_down_on_nvswitch():
    r = check(dgx_h100(down={3: (16, 17)}), only=STEPS)
    f = finding(r, "topology.nvlink-down")
    assert f.status is Status.WARN and "GPU 3" in f.summary and "16 of 18" in f.summary
    assert "nvidia-smi nvlink -s -i 3" in f.fix.commands


def test_nvlink_counters_rising_during_the_collective():
    before = {"0": {"0": [0, 0, 0], "1": [5, 0, 0]}, "1": {"0": [0, 0, 0]}}
    rising = {"0": {"0": [0, 2, 0], "1": [5, 0, 0]}, "1": {"0": [3, 0, 9]}}  # GPU 0 link 0 retrained twice
    buses = ["0000:18:00.0", "0000:2a:00.0"]
    r = check(dgx_h100(nccl=run_ok(buses, 250, nvlink=(before, rising))), only=STEPS)
    assert ids(r)["topology.nvlink-errors"] == "warn" and "GPU 0" in finding(r, "topology.nvlink-errors").summary
    quiet = {"0": {"0": [0, 0, 7], "1": [9, 0, 0]}, "1": {"0": [0, 0, 0]}}  # CRC and a few replays: not a fault
    r = check(dgx_h100(nccl=run_ok(buses, 250, nvlink=(before, quiet))), only=STEPS)
    assert "topology.nvlink-errors" not in ids(r)


def test_healthy_h200_counters_are_not_a_fault():
    """CRC-data counters 3-48 on every link of the healthy machine (nvml_dump.txt): no finding."""
    r = check(two_h200(), only=STEPS)
    assert "topology.nvlink-errors" not in ids(r) and "topology.nvlink-down" not in ids(r)


def test_mixed_node_names_the_models_and_the_numbering():
    r = check(mixed_node(), only=STEPS)
    mixed = finding(r, "topology.mixed")
    assert mixed.status is Status.WARN and "RTX A6000" in mixed.summary and "RTX 4090" in mixed.summary
    assert mixed.fix.commands == ("export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1,2",)
    order = finding(r, "topology.ordinals")
    assert order.status is Status.WARN and "CUDA 0 = GPU 1 (0000:02:00.0)" in order.summary
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID" in order.fix.commands
    assert ids(r)["topology.peer-unsupported"] == "ok"  # the GeForce card: NVML says the GPU cannot
    assert "topology.no-peer-access" not in ids(r)
    links = finding(r, "topology.links")
    assert "NV4 (1 pair)" in links.summary and "PHB (2 pairs)" in links.summary


def test_mixed_node_in_pci_order_is_not_a_numbering_problem():
    r = check(mixed_node(cuda_order=[0, 1, 2], order_env="PCI_BUS_ID", env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
              only=STEPS)
    assert ids(r)["topology.ordinals"] == "ok"


def test_pcie_node_with_p2p_blocked_by_iommu_and_acs():
    r = check(pcie_node(), only=STEPS)
    f = finding(r, "topology.no-peer-access")
    assert f.status is Status.WARN and "GPU 0-GPU 1 (PXB)" in f.summary
    assert "IOMMU" in f.detail and "ACS" in f.detail
    assert "sudo setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000" in f.fix.commands
    assert any("iommu=pt" in c for c in f.fix.commands)
    assert sum(1 for s in r.steps for x in s.findings if x.id == "topology.no-peer-access") == 1
    # SHM is what the topology gives without peer access: the figure itself is not "far below"
    assert ids(r)["nccl.ok"] == "ok"


def test_pcie_node_with_acs_hangs_in_the_collective():
    ranks = [rank_records(i, b, ("rendezvous", "init")) + [rec(i, "begin", what="collective")]
             for i, b in enumerate(["0000:03:00.0", "0000:04:00.0", "0000:83:00.0", "0000:84:00.0"])]
    hang = launcher_output([x for r in ranks for x in r], how="deadline", world=4, killed=(0, 1, 2, 3))
    r = check(pcie_node(iommu=False, access=True, nccl=hang), only=STEPS)
    assert ids(r)["topology.acs-redirect"] == "warn"
    f = finding(r, "nccl.hang")
    assert "every rank waited" in f.summary
    assert any(c.startswith("sudo setpci -s 0000:02:08.0") for c in f.fix.commands)


def test_acs_off_is_quiet():
    r = check(pcie_node(iommu=False, acs=False, access=True, nccl=run_ok(
        ["0000:03:00.0", "0000:04:00.0", "0000:83:00.0", "0000:84:00.0"], 18.0)), only=STEPS)
    assert status(r) == {"topology": "ok", "nccl": "ok"}


def test_acs_unreadable_without_root_is_not_called_off_or_on():
    r = check(pcie_node(iommu=False, access=True, files={
        f"/sys/bus/pci/devices/0000:0{n}:0{d}.0/config": config_space(6, 0x1D)[:64] for n, d in ((2, 8), (2, 9))}),
        only=STEPS)
    host = r.facts["host_links"].value
    assert not host.acs["0000:03:00.0"][-1].readable


def test_small_shm_in_a_container_is_named_when_nccl_uses_shm():
    files = {"/proc/mounts": "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n", "/.dockerenv": ""}
    slow = run_ok(["0000:00:06.0", "0000:00:07.0"], 3.0, "SHM/direct/direct")
    r = check(two_h200(env={"NCCL_P2P_DISABLE": "1"}, nccl=slow, files=files), only=STEPS)
    f = finding(r, "nccl.slow")
    assert "/dev/shm is only 64 MiB" in f.fix.text and any("--shm-size" in c for c in f.fix.commands)


def test_p2p_level_below_the_path_is_a_cause():
    slow = run_ok(["0000:00:06.0", "0000:00:07.0"], 28.0, "SHM/direct/direct")
    r = check(two_h200(env={"NCCL_P2P_LEVEL": "LOC"}, nccl=slow), only=STEPS)
    assert "unset NCCL_P2P_LEVEL" in finding(r, "nccl.slow").fix.commands


def test_infiniband_disabled_with_devices_warns():
    r = check(two_h200(env={"NCCL_IB_DISABLE": "1"}, files={"/sys/class/infiniband/mlx5_0/node_type": "1"}),
              only=STEPS)
    assert ids(r)["nccl.ib-disabled"] == "warn"
    assert ids(check(two_h200(env={"NCCL_IB_DISABLE": "1"}), only=STEPS)).get("nccl.ib-disabled") is None


def test_other_processes_on_the_gpus_are_named_when_slow():
    slow = run_ok(["0000:00:06.0", "0000:00:07.0"], 40.0)
    r = check(two_h200(nccl=slow, nvml_over={1: {"processes": [{"pid": 4242, "used_mib": 70000}]}}), only=STEPS)
    f = finding(r, "nccl.slow")
    assert "pid 4242 on GPU 1" in f.fix.text


@pytest.mark.parametrize("machine", [two_h200, dgx_h100, mixed_node, pcie_node])
def test_never_advises_turning_multicast_on_or_its_off_switches_off(machine):
    env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_ALGO": "Ring"}
    fs = machine(env=env, nccl=run_ok(BUSES[machine], 0.5, "NET/Socket/0"))
    r = check(fs)
    cmds = commands(r)
    unset = {w for c in cmds if c.startswith("unset ") for w in c.split()[1:]}
    assert "NCCL_P2P_DISABLE" in unset and "NCCL_ALGO" in unset  # the steps did give advice
    assert not unset & {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}
    text = " ".join(cmds)
    for bad in ("NCCL_NVLS_ENABLE=1", "TORCH_SYMM_MEM_DISABLE_MULTICAST=0", "NVSHMEM_DISABLE_NVLS=0"):
        assert bad not in text
    plan = json.loads(fs.inputs[LAUNCH])
    assert not {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"} & set(plan["env"])


def test_saved_report_rejudges_to_the_same_verdicts(tmp_path):
    from cudadoctor.facts.registry import facts_from_dict
    from cudadoctor.render.json_report import render_json

    r = check(two_h200(env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
                       nccl=h200_nccl("nccl_nop2p_noshm.txt")), only=("driver",) + STEPS)
    saved = json.loads(render_json(r, {}))
    from cudadoctor.doctor import run_check

    again = run_check(two_h200(), only=("driver",) + STEPS, given_facts=facts_from_dict(saved["facts"]))
    assert {f.id: f.status for s in again.steps for f in s.findings} == \
        {f.id: f.status for s in r.steps for f in s.findings}


def test_visible_devices_numbered_in_cuda_order_are_not_nvidia_smi_s():
    """FASTEST_FIRST with CUDA_VISIBLE_DEVICES=0,1: CUDA's ordinal 1 is nvidia-smi's GPU 2, not GPU 1."""
    r = check(mixed_node(cuda_order=[0, 2], env={"CUDA_VISIBLE_DEVICES": "0,1"},
                         nccl=run_ok(["0000:01:00.0", "0000:03:00.0"], 12.0, "SHM/direct/direct")), only=STEPS)
    f = finding(r, "topology.ordinals")
    assert f.status is Status.WARN and f.summary.startswith("CUDA_VISIBLE_DEVICES=0,1 names CUDA's numbers")
    assert "CUDA 1 = GPU 2 (0000:03:00.0)" in f.summary


def test_a_libnccl_shadowed_through_ld_library_path_is_a_cause():
    from cudadoctor.checks.registry import Context, load_all, run_one
    from cudadoctor.facts.libs import LibFile, LibsInfo
    from cudadoctor.facts.registry import gather
    from cudadoctor.model import Fact

    wheel = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    old = "/opt/nccl-2.18/lib/libnccl.so.2"
    recs = rank_records(0, "0000:00:06.0") + rank_records(1, "0000:00:07.0") + [
        rec(0, "libs", libnccl=[old]),
        rec(0, "measure", coll="all_reduce", bytes=64 << 20, time_us=2200.0, algbw=30.0, busbw=30.0),
        rec(0, "done", ok=True), rec(1, "done", ok=True)]
    slow = launcher_output(recs)
    env = {"LD_LIBRARY_PATH": "/opt/nccl-2.18/lib:/usr/local/nvidia/lib64"}
    fs = two_h200(env=env, nccl=slow)
    facts = gather(fs, load_all()["nccl"].facts)
    facts["libs"] = Fact.found(LibsInfo(copies=[LibFile(family="libnccl", path=wheel, realpath=wheel,
                                                        origin="pip-wheel")]))
    res = run_one(load_all()["nccl"], Context(facts=facts))
    f = next(x for x in res.findings if x.id == "nccl.slow")
    assert "libnccl comes from LD_LIBRARY_PATH entry /opt/nccl-2.18/lib" in f.fix.text
    assert "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in f.fix.commands


def test_skipping_the_nccl_step_runs_no_collective():
    # `check --skip nccl` (README, Between GPUs) must not gather the nccl fact through another step: on the
    # 2x H200 the topology step asked for it, and a skipped nccl step still cost its 6.5 s collective.
    from cudadoctor.checks import registry as checks

    assert "nccl" in checks.needed_facts(checks.ordered())
    assert "nccl" not in checks.needed_facts(checks.ordered(skip=["nccl"]))
    assert "nccl" not in checks.needed_facts(checks.ordered(only=["topology"]))
