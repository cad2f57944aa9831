"""Multi-GPU machines for the topology and nccl steps: the real 2x H200 captures of tests/data/multigpu
(see its README) turned into the answers of cudadoctor's own children, and fakes of other machines
(8 GPUs on NVSwitch, a mixed node, a PCIe-only node with P2P blocked) built the same way."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from fakes.system import FakeCmd
from scenarios import PY, h200, nvml_answer, torch_stages

from cudadoctor.child.nccl_launch import Reader
from cudadoctor.probes.nccl_run import MARK

DATA = Path(__file__).parent / "data" / "multigpu"
SMI = "/usr/local/nvidia/bin/nvidia-smi"
MIB = 1 << 20
H200_UUIDS = ("GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d", "GPU-98c8e6bb-71cb-01a3-2789-aeaadd598bf2")  # sys.txt


def capture_json(name: str, which: int = 0) -> dict:
    """The `which`-th JSON object of a capture: one per line (peer.txt), or one pretty-printed (nvml_dump.txt)."""
    text = (DATA / name).read_text()
    one_line = [ln for ln in text.splitlines() if ln.startswith("{") and ln.endswith("}")]
    if one_line:
        return json.loads(one_line[which])
    return json.loads(text[text.index("\n{") + 1:text.rindex("}") + 1])


# ------------------------------------------------------------------ the 2x H200 captures as child answers


def h200_links() -> dict:
    """nvml_dump.txt (pynvml, every NVLink and pair) in the shape python -m cudadoctor.system.nvml_links prints."""
    d = capture_json("nvml_dump.txt")
    gpus = []
    for g in d["gpus"]:
        links = [{"link": x["link"], "active": x["state"] == 1, "version": x["version"], "remote_bus": x["remote"],
                  "remote_type": x["remote_type"], "replay": x["err0"], "recovery": x["err1"], "crc_flit": x["err2"],
                  "crc_data": x["err3"]} for x in g["nvlinks"] if isinstance(x["state"], int)]
        gpus.append({"index": g["index"], "name": g["name"], "uuid": H200_UUIDS[g["index"]], "bus": g["bus"],
                     "memory_total_mib": g["mem"][0] // MIB, "pcie_gen_max": 5, "pcie_width_max": 16,
                     "compute_capability": "9.0", "links": links})
    pairs = []
    for key, p in d["pairs"].items():
        a, b = (int(x) for x in key.split("-"))
        pairs.append({"a": a, "b": b, "ancestor": p["ancestor"], "p2p_read": None, "p2p_write": p["p2p_WRITE"],
                      "p2p_nvlink": p["p2p_NVLINK"], "p2p_atomics": p["p2p_ATOMICS"]})
    return {"error": "", "gpus": gpus, "pairs": pairs}


def h200_peers(which: int = 0) -> str:
    """peer.txt (ctypes cuDeviceGetPCIBusId / cuDeviceCanAccessPeer), run 0: default, 1: CUDA_DEVICE_ORDER=
    PCI_BUS_ID, 2: CUDA_VISIBLE_DEVICES=1,0, 3: FASTEST_FIRST; as python -m cudadoctor.probes.peer prints it."""
    d = capture_json("peer.txt", which)
    uuid = {"0000:00:06.0": H200_UUIDS[0], "0000:00:07.0": H200_UUIDS[1]}
    rec = {"visible_devices": d["CUDA_VISIBLE_DEVICES"], "device_order": d["CUDA_DEVICE_ORDER"], "driver_cuda": "13.0",
           "count": len(d["devices"]),
           "devices": [{"ordinal": x["ordinal"], "bus": x["bus"], "name": x["name"], "uuid": uuid[x["bus"]],
                        "cc": "9.0", "memory_bytes": 150754820096} for x in d["devices"]],
           "peers": [{"a": int(k[0]), "b": int(k[-1]), "access": bool(v[1]) if v[0] == 0 else None, "rank": 0,
                      "atomics": True} for k, v in d["peer"].items()]}
    return "@@CDPEER@@" + json.dumps(rec) + "\n"


def result_line(name: str) -> list:
    """ar.py's RESULT line: [(bytes, µs, algbw, busbw), ...]."""
    line = next(ln for ln in (DATA / name).read_text().splitlines() if ln.startswith("RESULT"))
    return json.loads(line.split(" ", 3)[3].replace("(", "[").replace(")", "]"))


def nccl_lines(name: str) -> list:
    """The records the launcher relays for a capture's NCCL_DEBUG lines (child/nccl_launch.Reader's own filter)."""
    out: list = []
    readers = {}
    for line in (DATA / name).read_text().splitlines():
        if " NCCL " not in line:
            continue
        cuda_dev = line.split("[", 1)[1].split("]", 1)[0] if "[" in line else "0"
        rd = readers.setdefault(cuda_dev, Reader(int(cuda_dev) if cuda_dev.isdigit() else 0, iter(()),
                                                 threading.Lock()))
        rd.relay = out.append
        rd.nccl_line(line)
    return out


def rec(rank, stage, **kw) -> dict:
    return dict(kw, stage=stage, rank=rank)


def rank_records(rank: int, bus: str, stages=("rendezvous", "init", "collective", "measure")) -> list:
    out = [rec(rank, "start", host="vm", python=PY, backend="nccl"),
           rec(rank, "import", ok=True, torch="2.11.0+cu130", nccl="2.28.9"),
           rec(rank, "device", ordinal=rank, name="NVIDIA H200", bus=bus)]
    for st in stages:
        out.append(rec(rank, "begin", what=st))
        if st == "collective":
            out.append(rec(rank, "check", ok=True, expected=3.0))
        out.append(rec(rank, "end", what=st, seconds=0.1))
    return out


def launcher_output(records: list, how: str = "finished", world: int = 2, killed=(), rcs=None, tails=None) -> str:
    lines = [{"stage": "launcher", "event": "start", "world": world, "port": 29500}] + records
    if how != "finished":
        lines.append({"stage": "launcher", "event": how, "alive": list(killed), "seconds": 30.0})
    for r in range(world):
        lines.append({"stage": "launcher", "event": "exit", "rank": r, "rc": (rcs or {}).get(r, 0),
                      "killed": r in killed, "tail": (tails or {}).get(r, [])})
    lines.append({"stage": "launcher", "event": "end", "how": how, "seconds": 9.5})
    return "".join(f"{MARK} {json.dumps(x)}\n" for x in lines)


def h200_nccl(name: str = "nccl_healthy.txt", buses=("0000:00:06.0", "0000:00:07.0")) -> str:
    """A healthy 2-rank run with the capture's NCCL lines and its 64 MiB all-reduce figures."""
    size, us, algbw, busbw = next(r for r in result_line(name) if r[0] == 64 * MIB)
    recs = nccl_lines(name)
    for r, bus in enumerate(buses):
        recs += rank_records(r, bus)
    recs.append(rec(0, "measure", coll="all_reduce", bytes=size, time_us=us, algbw=algbw, busbw=busbw))
    recs += [rec(r, "done", ok=True) for r in range(2)]
    return launcher_output(recs)


def h200_nccl_badif() -> str:
    """nccl_badif.txt: NCCL_SOCKET_IFNAME=eth9; rank 0 raised at init, rank 1 was stopped."""
    text = (DATA / "nccl_badif.txt").read_text()
    err = text[text.index("torch.distributed.DistBackendError"):text.index("[W1130")].strip()
    recs = nccl_lines("nccl_badif.txt") + rank_records(0, "0000:00:06.0", ("rendezvous",))
    recs += [rec(0, "begin", what="init"), rec(0, "error", what="init", error=err)]
    recs += rank_records(1, "0000:00:07.0", ("rendezvous",)) + [rec(1, "begin", what="init")]
    return launcher_output(recs, how="stopped after a rank failed", killed=(1,), rcs={0: 1, 1: -9})


def h200_nccl_hang(hang_rank: int = 1, buses=("0000:00:06.0", "0000:00:07.0")) -> str:
    """The test hook's run: rank `hang_rank` stops before the collective; the others wait in it."""
    recs = []
    for r, bus in enumerate(buses):
        recs += rank_records(r, bus, ("rendezvous", "init"))
        if r != hang_rank:
            recs.append(rec(r, "begin", what="collective"))
    return launcher_output(recs, how="deadline", killed=(0, 1), rcs={0: -9, 1: -9})


def two_h200(env=None, peers_run: int = 0, nccl: str = None, links: dict = None, files: dict = None,
             nvml_over: dict = None):
    """The 2x H200 machine: nvidia-smi, NVML, both children and the launcher answer from the captures."""
    env = dict(env or {})
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    csv = "".join(f"{i}, NVIDIA H200, {u}, 00000000:00:0{6 + i}.0, 9.0, 143771, 580.159.04, Disabled, Enabled, "
                  "Default\n" for i, u in enumerate(H200_UUIDS))
    gpus = [{"index": i, "name": "NVIDIA H200", "uuid": u, "pci_bus_id": f"00000000:00:0{6 + i}.0",
             "compute_capability": "9.0", "memory_total_mib": 143771, "memory_used_mib": 0, "mig_mode": False,
             "pcie_gen_max": 5, "pcie_width_max": 16, "processes": []} for i, u in enumerate(H200_UUIDS)]
    for g in gpus:
        g.update((nvml_over or {}).get(g["index"], {}))
    devices = [{"index": i, "name": "NVIDIA H200", "capability": "9.0", "total_memory_mib": 143155,
                "multi_processor_count": 132, "uuid": u[4:]} for i, u in enumerate(H200_UUIDS)]
    fs = h200(env=env, smi_csv=FakeCmd(csv), nvml=FakeCmd(nvml_answer(device_count=2, gpus=gpus)),
              torch=FakeCmd(torch_stages(count=2, devices=devices)))
    fs.on([PY, "-m", "cudadoctor.system.nvml_links"], FakeCmd(json.dumps(links or h200_links())))
    fs.on([PY, "-m", "cudadoctor.probes.peer"], FakeCmd(h200_peers(peers_run)))
    fs.on([PY, "-m", "cudadoctor.child.nccl_launch"], FakeCmd(nccl if nccl is not None else h200_nccl()))
    host_files = {"/sys/class/net/eth0/operstate": "up\n", "/sys/class/net/lo/operstate": "unknown\n",
                  "/proc/mounts": "tmpfs /dev/shm tmpfs rw,relatime,size=268435456k 0 0\n",
                  "/proc/cmdline": "console=ttyS0 reboot=k panic=1 pci=realloc=off\n"}
    host_files.update(files or {})
    for p, c in host_files.items():
        fs.add_file(p, c)
    return fs



# ------------------------------------------------------------------ other machines, built the same way


def links(n: int, version: int = 6, remote: str = "FFFFFFFF:FF:FF.0", remote_type: int = 2, down=(),
          counters=(0, 0, 0, 5)) -> list:
    """`n` NVLinks of one GPU as the NVML links child lists them; `down` are inactive."""
    return [{"link": i, "active": i not in down, "version": version, "remote_bus": remote, "remote_type": remote_type,
             "replay": counters[0], "recovery": counters[1], "crc_flit": counters[2], "crc_data": counters[3]}
            for i in range(n)]


def gpu(index: int, name: str, bus: str, mem: int, cc: str = "9.0", pcie=(5, 16), nvlinks=(), processes=()) -> dict:
    return {"index": index, "name": name, "bus": bus, "mem": mem, "cc": cc, "pcie": pcie, "links": list(nvlinks),
            "uuid": f"GPU-{index:08x}-0000-0000-0000-{int(bus.split(':')[1], 16):012x}", "processes": list(processes)}


def run_ok(buses: list, busbw: float, transport: str = "P2P/CUMEM", size: int = 64 * MIB, nvlink=None) -> str:
    """A finished all-reduce over `buses` (one rank each) with NCCL's transport line and the figure."""
    recs = [rec(0, "nccl-log", line=f"vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via {transport}"),
            rec(0, "nccl-log", line="vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0")]
    for r, bus in enumerate(buses):
        recs += rank_records(r, bus)
    if nvlink is not None:
        recs.append(rec(0, "nvlink", before=nvlink[0], after=nvlink[1]))
    recs.append(rec(0, "measure", coll="all_reduce", bytes=size, time_us=1000.0, algbw=busbw, busbw=busbw))
    recs += [rec(r, "done", ok=True) for r in range(len(buses))]
    return launcher_output(recs, world=len(buses))


def machine(gpus: list, ancestor, p2p=lambda a, b: 0, cuda_order=None, access=lambda a, b: True, nccl: str = "",
            env=None, files=None, symlinks=None, order_env=None):
    """A FakeSystem of several GPUs. `ancestor(a, b)` / `p2p(a, b)`: NVML's common ancestor and P2P status per
    pair (nvidia-smi indices); `cuda_order`: nvidia-smi index of each CUDA ordinal (default: the same order);
    `access(a, b)`: cuDeviceCanAccessPeer by nvidia-smi index."""
    order = list(cuda_order) if cuda_order is not None else [g["index"] for g in gpus]
    by = {g["index"]: g for g in gpus}
    csv = "".join(f"{g['index']}, {g['name']}, {g['uuid']}, 0000{g['bus']}, {g['cc']}, {g['mem']}, 580.159.04, Disabled, "
                  "Enabled, Default\n" for g in gpus)
    nv = [{"index": g["index"], "name": g["name"], "uuid": g["uuid"], "pci_bus_id": "0000" + g["bus"],
           "compute_capability": g["cc"], "memory_total_mib": g["mem"], "memory_used_mib": 0, "mig_mode": False,
           "pcie_gen_max": g["pcie"][0], "pcie_width_max": g["pcie"][1], "processes": g["processes"]} for g in gpus]
    devices = [{"index": o, "name": by[i]["name"], "capability": by[i]["cc"], "total_memory_mib": by[i]["mem"],
                "uuid": by[i]["uuid"][4:]} for o, i in enumerate(order)]
    fs = h200(env=dict({"NCCL_NVLS_ENABLE": "0"}, **(env or {})), smi_csv=FakeCmd(csv),
              nvml=FakeCmd(nvml_answer(device_count=len(gpus), gpus=nv)),
              torch=FakeCmd(torch_stages(count=len(order), devices=devices)))
    link_answer = {"error": "", "gpus": [
        {"index": g["index"], "name": g["name"], "uuid": g["uuid"], "bus": "0000" + g["bus"], "memory_total_mib": g["mem"],
         "pcie_gen_max": g["pcie"][0], "pcie_width_max": g["pcie"][1], "compute_capability": g["cc"],
         "links": g["links"]} for g in gpus],
        "pairs": [{"a": a["index"], "b": b["index"], "ancestor": ancestor(a["index"], b["index"]),
                   "p2p_read": p2p(a["index"], b["index"]), "p2p_write": p2p(a["index"], b["index"])}
                  for a in gpus for b in gpus if a is not b]}
    peer = {"visible_devices": (env or {}).get("CUDA_VISIBLE_DEVICES"), "device_order": order_env, "driver_cuda": "13.0",
            "count": len(order),
            "devices": [{"ordinal": o, "bus": "0000" + by[i]["bus"], "name": by[i]["name"], "uuid": by[i]["uuid"],
                         "cc": by[i]["cc"]} for o, i in enumerate(order)],
            "peers": [{"a": oa, "b": ob, "access": access(ia, ib)} for oa, ia in enumerate(order)
                      for ob, ib in enumerate(order) if oa != ob]}
    fs.on([PY, "-m", "cudadoctor.system.nvml_links"], FakeCmd(json.dumps(link_answer)))
    fs.on([PY, "-m", "cudadoctor.probes.peer"], FakeCmd("@@CDPEER@@" + json.dumps(peer) + "\n"))
    ranks = ["0000" + by[i]["bus"] for i in order]
    fs.on([PY, "-m", "cudadoctor.child.nccl_launch"], FakeCmd(nccl or run_ok(ranks, 250.0)))
    base = {"/sys/class/net/eth0/operstate": "up\n", "/sys/class/net/lo/operstate": "unknown\n",
            "/proc/mounts": "tmpfs /dev/shm tmpfs rw,relatime 0 0\n", "/proc/meminfo": "MemTotal: 2097152000 kB\n",
            "/proc/cmdline": "ro quiet\n"}
    base.update(files or {})
    for p, c in base.items():
        fs.add_file(p, c)
    fs.symlinks.update(symlinks or {})
    return fs


H100_BUSES = [":18:00.0", ":2a:00.0", ":3a:00.0", ":5d:00.0", ":9a:00.0", ":ab:00.0", ":ba:00.0", ":db:00.0"]
NVSWITCHES = ["00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"]


def dgx_h100(down: dict = None, nccl: str = "", **kw):
    """8x H100 SXM on NVSwitch (DGX/HGX H100): 18 NVLink 4.0 links per GPU, into four NVSwitches
    (remote type 2, the switches' own bus ids, as on bare metal)."""
    gpus = []
    for i, bus in enumerate(H100_BUSES):
        ls = links(18, down=(down or {}).get(i, ()))
        for x in ls:
            x["remote_bus"] = NVSWITCHES[x["link"] % 4]
        gpus.append(gpu(i, "NVIDIA H100 80GB HBM3", bus, 81559, nvlinks=ls))

    def anc(a, b):
        return 40 if (a < 4) == (b < 4) else 50  # NODE within a socket, SYS across
    return machine(gpus, anc, nccl=nccl, **kw)


def mixed_node(**kw):
    """A workstation: one GeForce RTX 4090 (no P2P: NVML says the GPU does not support it) and two RTX A6000
    joined by an NVLink bridge (NV4, third-generation links straight to each other). CUDA's default
    FASTEST_FIRST order puts the A6000s first."""
    a6000 = [gpu(1, "NVIDIA RTX A6000", ":02:00.0", 49140, "8.6", (4, 16),
                 links(4, version=4, remote="00000000:03:00.0", remote_type=0)),
             gpu(2, "NVIDIA RTX A6000", ":03:00.0", 49140, "8.6", (4, 16),
                 links(4, version=4, remote="00000000:02:00.0", remote_type=0))]
    gpus = [gpu(0, "NVIDIA GeForce RTX 4090", ":01:00.0", 24564, "8.9", (4, 16))] + a6000
    return machine(gpus, ancestor=lambda a, b: 30, p2p=lambda a, b: 2 if 0 in (a, b) else 0,
                   cuda_order=kw.pop("cuda_order", [1, 2, 0]), access=lambda a, b: 0 not in (a, b),
                   nccl=kw.pop("nccl", "") or run_ok(["0000:02:00.0", "0000:03:00.0", "0000:01:00.0"], 12.0,
                                                      "SHM/direct/direct"), **kw)


def config_space(port_type: int, acs_control: int) -> bytes:
    """A 4 KiB PCIe configuration space of a bridge: the PCI Express capability (ID 0x10) at 0x40 with the
    given Device/Port Type, and the ACS extended capability (ID 0x000D) at 0x100 with the given control."""
    c = bytearray(4096)
    c[0x0E] = 0x01  # header type 1: PCI-to-PCI bridge
    c[0x34] = 0x40
    c[0x40], c[0x41] = 0x10, 0x00
    c[0x42:0x44] = (port_type << 4 | 2).to_bytes(2, "little")
    c[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")
    c[0x104:0x106] = (0x007F).to_bytes(2, "little")
    c[0x106:0x108] = acs_control.to_bytes(2, "little")
    return bytes(c)


L40S_BUSES = [":03:00.0", ":04:00.0", ":83:00.0", ":84:00.0"]


def pcie_node(iommu: bool = True, acs: bool = True, access: bool = False, nccl: str = "", **kw):
    """4x L40S on PCIe 4.0 x16, no NVLink: two behind a PCIe switch on each CPU socket (PXB within, SYS
    across). With `iommu` the kernel has an IOMMU translating DMA (dmar0, intel_iommu=on); with `acs` the
    switches' downstream ports redirect peer requests (ACS ReqRedir+ CmpltRedir+)."""
    gpus = [gpu(i, "NVIDIA L40S", b, 46068, "8.9", (4, 16)) for i, b in enumerate(L40S_BUSES)]
    files, links_ = {}, {}
    for i, b in enumerate(L40S_BUSES):
        root, up = ("0000:00:01.0", "0000:01:00.0") if i < 2 else ("0000:80:01.0", "0000:81:00.0")
        down = f"0000:{'02' if i < 2 else '82'}:{8 + i % 2:02x}.0"
        links_[f"/sys/bus/pci/devices/0000{b}"] = f"/sys/devices/pci{root[:7]}/{root}/{up}/{down}/0000{b}"
        files[f"/sys/bus/pci/devices/{root}/config"] = config_space(4, 0x1D if acs else 0)
        files[f"/sys/bus/pci/devices/{up}/config"] = config_space(5, 0)
        files[f"/sys/bus/pci/devices/{down}/config"] = config_space(6, 0x1D if acs else 0)
    if iommu:
        files["/sys/class/iommu/dmar0/uevent"] = ""
        files["/proc/cmdline"] = "ro quiet intel_iommu=on\n"
    files.update(kw.pop("files", {}))
    ranks = ["0000" + b for b in L40S_BUSES]
    return machine(gpus, ancestor=lambda a, b: 20 if (a < 2) == (b < 2) else 50, access=lambda a, b: access,
                   nccl=nccl or run_ok(ranks, 9.5, "SHM/direct/direct" if not access else "P2P/CUMEM"),
                   files=files, symlinks=links_, **kw)
