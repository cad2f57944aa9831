"""Facts between GPUs: the pair classification against the real `nvidia-smi topo -m`, the host readers
(/dev/shm, ACS in PCI config space, IOMMU), NCCL's log read back from the real captures, the data table."""

from __future__ import annotations

import json
import threading

import pytest
from fakes.system import FakeCmd, FakeSystem
from multigpu_scenarios import DATA, PY, capture_json, config_space, h200_links, h200_peers, nccl_lines, two_h200

from cudadoctor.child.nccl_launch import Reader
from cudadoctor.facts.gpu_links import GpuLinksInfo, GpuPeersInfo, gather_gpu_links, gather_gpu_peers, pairs
from cudadoctor.facts.host_links import (
    AcsBridge,
    HostLinksInfo,
    acs_control,
    norm_bus,
    parse_size,
    port_type,
    shm_size,
)
from cudadoctor.facts.registry import Options, gather
from cudadoctor.matrix import links as L
from cudadoctor.model import FactState, from_jsonable
from cudadoctor.probes.nccl_run import build_run, parse_marked, transport_kind


def smi_topo_labels() -> dict:
    """(GPU a, GPU b) -> label from the real `nvidia-smi topo -m` capture."""
    out = {}
    for line in (DATA / "smi_topo.txt").read_text().splitlines():
        cols = line.split("\t")
        if cols and cols[0].startswith("GPU") and cols[0][3:].isdigit():
            a = int(cols[0][3:])
            for b, cell in enumerate(cols[1:3]):
                if cell.strip() != "X":
                    out[(min(a, b), max(a, b))] = cell.strip()
    return out


def test_pairs_reproduce_nvidia_smi_topo_on_the_h200_machine():
    """NV18 from NVML alone: 18 active links per GPU, the far end an unseen NVSwitch (FFFFFFFF:FF:FF.0, type 2)."""
    info = from_jsonable(GpuLinksInfo, h200_links())
    got = {(p.a, p.b): p.label for p in pairs(info)}
    assert got == smi_topo_labels() == {(0, 1): "NV18"}
    p = pairs(info)[0]
    assert p.via_switch and p.nvlink_version == 6 and p.path == "PHB"  # common ancestor 30 (HOSTBRIDGE)


def test_peer_access_joins_by_bus_id_under_every_order():
    info = from_jsonable(GpuLinksInfo, h200_links())
    for run in range(4):  # default, PCI_BUS_ID, CUDA_VISIBLE_DEVICES=1,0, FASTEST_FIRST
        peers = from_jsonable(GpuPeersInfo, json.loads(h200_peers(run).split("@@CDPEER@@")[1]))
        assert pairs(info, peers)[0].access is True
    reversed_ = from_jsonable(GpuPeersInfo, json.loads(h200_peers(2).split("@@CDPEER@@")[1]))
    assert reversed_.visible_devices == "1,0" and reversed_.ordinal_of("00000000:00:07.0") == 0


def test_direct_links_and_pcie_paths():
    def g(i, bus, remote, n):
        return {"index": i, "bus": bus, "name": "A", "links": [
            {"link": k, "active": True, "version": 4, "remote_bus": remote, "remote_type": 0} for k in range(n)]}
    info = from_jsonable(GpuLinksInfo, {"gpus": [g(0, "0000:01:00.0", "0000:02:00.0", 4),
                                                 g(1, "0000:02:00.0", "0000:01:00.0", 4),
                                                 {"index": 2, "bus": "0000:81:00.0", "links": []}],
                                        "pairs": [{"a": 0, "b": 2, "ancestor": 50}, {"a": 1, "b": 2, "ancestor": 20}]})
    assert {(p.a, p.b): p.label for p in pairs(info)} == {(0, 1): "NV4", (0, 2): "SYS", (1, 2): "PXB"}


def test_bus_ids_normalise():
    assert norm_bus("00000000:00:06.0") == "0000:00:06.0" == norm_bus("0000:00:06.0")
    assert norm_bus("0000:5D:00.0") == "0000:5d:00.0"
    assert norm_bus("FFFFFFFF:FF:FF.0") == "ffffffff:ff:ff.0"


def test_shm_size_from_the_recon_mounts():
    mounts = "\n".join(ln for ln in (DATA / "sys.txt").read_text().splitlines() if " on /dev/shm " in ln)
    proc = "\n".join(f"tmpfs /dev/shm tmpfs {ln.split('(')[1].rstrip(')')} 0 0" for ln in mounts.splitlines())
    size, src = shm_size(proc, "")
    assert size == 268435456 * 1024 and "size=268435456k" in src  # two tmpfs mounts there: the last one wins
    assert shm_size("shm /dev/shm tmpfs rw,nosuid,size=65536k 0 0\n", "")[0] == 64 << 20  # Docker's default
    assert shm_size("tmpfs /dev/shm tmpfs rw 0 0\n", "MemTotal:  1000 kB\n")[0] == 512000
    assert shm_size("proc /proc proc rw 0 0\n", "")[0] is None
    assert parse_size("8g") == 8 << 30 and parse_size("x") is None


def test_acs_and_port_type_from_config_space():
    cfg = config_space(6, 0x1D)
    assert acs_control(cfg) == 0x1D and port_type(cfg) == "switch downstream port"
    assert acs_control(config_space(4, 0)) == 0 and port_type(config_space(4, 0)) == "root port"
    assert acs_control(cfg[:256]) is None and acs_control(b"") is None  # no extended space: unknown, not off
    host = HostLinksInfo(acs={"0000:03:00.0": [AcsBridge("0000:00:01.0", "root port", 0x1D, ["ReqRedir"]),
                                               AcsBridge("0000:02:08.0", "switch downstream port", 0x1D,
                                                         ["SrcValid", "ReqRedir", "CmpltRedir"])]})
    assert [b.bdf for b in host.redirecting("00000000:03:00.0")] == ["0000:02:08.0"]


def test_iommu_pass_through_is_not_translation():
    assert HostLinksInfo(iommu_units=["dmar0"]).iommu_on
    assert not HostLinksInfo(iommu_units=["dmar0"], cmdline_iommu=["intel_iommu=on", "iommu=pt"]).iommu_on
    assert not HostLinksInfo().iommu_on


def test_the_h200_machine_host_facts():
    facts = gather(two_h200(), ["host_links"])
    h = facts["host_links"].value
    assert h.net_interfaces == ["eth0", "lo"] and h.ib_devices == [] and not h.iommu_on
    assert h.shm_bytes == 256 << 30


# ------------------------------------------------------------------ NCCL's log, read back from the captures


@pytest.mark.parametrize("name,transport,network", [
    ("nccl_healthy.txt", "P2P/CUMEM", "Socket"),
    ("nccl_nop2p.txt", "SHM/direct/direct", "Socket"),
    ("nccl_nop2p_noshm.txt", "NET/Socket/0", "Socket"),
])
def test_transports_from_the_recorded_logs(name, transport, network):
    run = build_run(nccl_lines(name), world=2)
    assert run.transports == [transport] and run.network == network
    assert run.nccl_version == "2.28.9+cuda13.0"
    assert run.env_read["NCCL_NVLS_ENABLE"] == "0"
    assert transport_kind(transport) == {"P2P/CUMEM": "p2p", "SHM/direct/direct": "shm",
                                         "NET/Socket/0": "net-socket"}[transport]


def test_the_reader_keeps_one_line_per_peer_and_transport():
    lines = [ln for ln in (DATA / "nccl_healthy.txt").read_text().splitlines() if " via " in ln]
    assert len(lines) >= 48  # 24 channels each way
    out: list = []
    rd = Reader(0, iter(()), threading.Lock())
    rd.relay = out.append
    for ln in lines:
        rd.nccl_line(ln)
    assert len(out) == 2  # 0[0] -> 1[1] and 1[1] -> 0[0]


def test_bad_ifname_warning_is_kept():
    run = build_run(nccl_lines("nccl_badif.txt"), world=2)
    assert "Bootstrap : no socket interface found" in run.warnings
    assert run.env_read["NCCL_SOCKET_IFNAME"] == "eth9"


def test_torch_allreduce_figures_of_the_recon():
    """ar.py's RESULT lines (1 MiB, 64 MiB, 1 GiB): the 64 MiB busbw the data table's NVLink row rests on."""
    text = (DATA / "nccl_healthy.txt").read_text()
    assert "(67108864, 258.1, 260.1, 260.1)" in text
    e = L.nvlink_expectation(18, 6, ["NVIDIA H200"])
    assert e.raw_gbps == 450 and 240 <= e.busbw_gbps <= 270


# ------------------------------------------------------------------ the data table


def test_links_table_is_sourced_and_sane():
    t = L.table()
    srcs = t["sources"]
    rows = t["nvlink"] + t["nvlink_by_name"] + t["path"]
    for r in rows:
        assert r["source"] and all(s in srcs for s in r["source"]), r
        assert r["confidence"] in ("verified", "verified-secondary", "inferred"), r
    for s in srcs.values():
        assert s["title"] and s["url"].startswith("https://")
    assert sorted(r["nvml_version"] for r in t["nvlink"]) == list(range(1, 8))
    assert 0 < L.warn_below() < 1 and L.check_size() == 64 << 20
    assert L.link_gbps(4, ["NVIDIA RTX A6000"])[0] == 14.0625 and L.link_gbps(4, ["NVIDIA A100-SXM4-80GB"])[0] == 25
    assert L.pcie_expectation(31.5, True).kind == "pcie-p2p" and L.pcie_expectation(31.5, False).kind == "pcie-shm"


# ------------------------------------------------------------------ the gatherers' failure paths


def _sys(links_answer=None, peer_answer=None) -> FakeSystem:
    fs = two_h200()
    if links_answer is not None:
        fs.on([PY, "-m", "cudadoctor.system.nvml_links"], links_answer)
    if peer_answer is not None:
        fs.on([PY, "-m", "cudadoctor.probes.peer"], peer_answer)
    return fs


def test_gatherers_turn_child_failures_into_fact_states():
    deps = gather(two_h200(), ["nvidia_smi", "nvml"])
    opts = Options()
    assert gather_gpu_links(_sys(FakeCmd(hang=True)), opts, deps).state is FactState.TIMEOUT
    assert gather_gpu_links(_sys(FakeCmd("junk")), opts, deps).state is FactState.FAILED
    bad = gather_gpu_links(_sys(FakeCmd('{"error": "NVML_ERROR_UNKNOWN", "message": "x"}')), opts, deps)
    assert bad.state is FactState.FAILED and "NVML_ERROR_UNKNOWN" in bad.error
    assert gather_gpu_peers(_sys(peer_answer=FakeCmd(hang=True)), opts, deps).state is FactState.TIMEOUT
    nolib = FakeCmd('@@CDPEER@@{"stage": "load-libcuda", "error": {"name": "no-libcuda", "message": "cannot load"}}')
    assert gather_gpu_peers(_sys(peer_answer=nolib), opts, deps).state is FactState.NOT_FOUND
    init = FakeCmd('@@CDPEER@@{"stage": "cuInit", "error": {"name": "CUDA_ERROR_UNKNOWN", "code": 999}}')
    f = gather_gpu_peers(_sys(peer_answer=init), opts, deps)
    assert f.state is FactState.FAILED and "cuInit" in f.error
    crash = gather_gpu_peers(_sys(peer_answer=FakeCmd("", "Segmentation fault", returncode=-11)), opts, deps)
    assert crash.state is FactState.FAILED and "SIGSEGV" in crash.error


def test_recon_peer_capture_is_what_the_child_prints():
    d = capture_json("peer.txt", 0)
    assert d["peer"] == {"0->1": [0, 1], "1->0": [0, 1]} and d["devices"][0]["bus"] == "0000:00:06.0"
    assert parse_marked(h200_peers(0), "@@CDPEER@@")[0]["peers"][0]["access"] is True
