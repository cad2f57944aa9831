"""Step `topology` (order 95): between GPUs. The pair matrix (NVLink with its link count, or the PCIe
path, as `nvidia-smi topo -m` prints it) with peer access from CUDA; NVLinks down or counting errors;
mixed GPU models; CUDA's ordinals against nvidia-smi's indices; the GPU count against --expect-gpus."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from cudadoctor.checks.common import driver_view, env_vars
from cudadoctor.checks.gpu_pairs import gpu_tag, joined_pairs
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts.gpu_links import CANNOT_LIST, NVML_BLIND, P2P_STATUS
from cudadoctor.facts.host_links import norm_bus
from cudadoctor.model import FactState, Finding, Fix, Status

DOCS_TOPO = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/gpu_troubleshooting.html"
DOCS_ACS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"
DOCS_ORDER = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars"
# Not "nccl": the NVLink counters the collective samples are read when the nccl step ran (its fact is then
# gathered); asking for it here would run the collective under `check --skip nccl` too.
FACTS = ("gpu_links", "gpu_peers", "cuda_gpus", "host_links", "gpu_expect", "nvidia_smi", "nvml", "kernel_module",
         "device_nodes", "env")
UNSUPPORTED_P2P = (1, 2, 3)  # NVML: chipset / GPU / topology not supported: nothing to fix
#: NVLink counters judged when they rise while the collective runs (a snapshot alone is not a fault:
#: CRC counters of 3-48 were seen on every link of the healthy H200 machine)
RECOVERY, REPLAY = 1, 0
REPLAY_WARN = 100  # replays during one short all-reduce that mean a link retransmits persistently


def cuda_devices(pf) -> Optional[list]:
    """CUDA's devices from the peer probe, [] where CUDA said it has none (CUDA_ERROR_NO_DEVICE), None when unknown."""
    if pf.ok:
        return list(pf.value.devices)
    return [] if "CUDA_ERROR_NO_DEVICE" in (pf.error or "") else None


def gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def cuda_count_finding(ctx: Context, want: int) -> Finding:
    """--expect-gpus where nvidia-smi and NVML cannot list the GPUs: CUDA's own count stands in."""
    pf = ctx.fact("gpu_peers")
    devs = cuda_devices(pf)
    if devs is None:
        return Finding("topology.gpu-count", Status.SKIP,
                       f"the GPUs could not be counted: {CANNOT_LIST}, and CUDA: {pf.error}",
                       evidence={"--expect-gpus": want, "source": pf.source})
    n = len(devs)
    cvd = pf.value.visible_devices if pf.ok else env_vars(ctx).get("CUDA_VISIBLE_DEVICES")
    ev = {"--expect-gpus": want, "CUDA sees": n, "GPUs": ", ".join(f"{d.ordinal}: {d.name}" for d in devs),
          "CUDA_VISIBLE_DEVICES": cvd, "source": "CUDA driver API (nvidia-smi and NVML cannot list GPUs here)"}
    if n == want:
        return Finding("topology.gpu-count", Status.OK, f"{gpus(n)} (CUDA's count), as expected", evidence=ev)
    if any(" MIG " in f" {d.name} " or d.uuid.upper().startswith("MIG-") for d in devs):
        return Finding("topology.gpu-count", Status.SKIP,
                       "CUDA sees a MIG instance, not whole GPUs: the node's GPU count needs nvidia-smi or NVML",
                       evidence=ev)
    named = [t for t in (cvd or "").split(",") if t.strip()] if cvd is not None else None
    if named is not None and len(named) < want:
        return Finding(
            "topology.gpu-count", Status.WARN,
            f"expected {gpus(want)}, CUDA sees {n} under CUDA_VISIBLE_DEVICES={cvd}",
            detail=f"CUDA_VISIBLE_DEVICES names {len(named)} of the {want}, and without nvidia-smi or NVML the node's "
                   "own count cannot be read here.",
            fix=Fix("Count them without the mask:", ("env -u CUDA_VISIBLE_DEVICES cudadoctor check --only topology "
                                                     f"--expect-gpus {want}",)), evidence=ev)
    if n > want:
        return Finding(
            "topology.gpu-count", Status.FAIL, f"expected {gpus(want)}, CUDA sees {n}",
            detail="More GPUs than the node should have: the wrong node, or a container given more GPUs than planned "
                   "(NVIDIA_VISIBLE_DEVICES=all).",
            fix=Fix("See which GPUs this container was given:", ("echo $NVIDIA_VISIBLE_DEVICES; ls -l /dev/nvidia[0-9]*",
                                                                 "hostname")), evidence=ev)
    return Finding(
        "topology.gpu-count", Status.FAIL, f"expected {gpus(want)}, CUDA sees {n}",
        detail="nvidia-smi and NVML cannot list GPUs here, so this is CUDA's count: a container given fewer GPUs "
               "than the node has (NVIDIA_VISIBLE_DEVICES, --gpus, a pod's nvidia.com/gpu limit, a Slurm job's "
               "--gpus), or a GPU that fell off the bus or failed to initialise.",
        fix=Fix("See which GPUs this container or job was given, and on the host which is missing:",
                ("echo $NVIDIA_VISIBLE_DEVICES; ls -l /dev/nvidia[0-9]*", "nvidia-smi -L  # on the host",
                 "sudo dmesg | grep -iE 'xid|nvrm' | tail -20  # on the host"),
                "https://docs.nvidia.com/deploy/xid-errors/index.html"),
        evidence=ev, affects="jobs sized for the node")


def count_finding(ctx: Context) -> Finding:
    want = (ctx.fact("gpu_expect").value or {}).get("gpus")
    dv = driver_view(ctx)
    if dv.gpus_unknown:
        return cuda_count_finding(ctx, want)
    n = len(dv.gpus)
    names = ", ".join(f"{g.index}: {g.name}" for g in dv.gpus)
    if n == want:
        return Finding("topology.gpu-count", Status.OK, f"{gpus(n)}, as expected",
                       evidence={"--expect-gpus": want, "GPUs": names})
    return Finding(
        "topology.gpu-count", Status.FAIL, f"expected {gpus(want)}, the driver sees {n}",
        detail="A GPU missing from the driver's list has usually fallen off the bus (Xid 79), failed to "
               "initialise, or is held by another driver (vfio-pci); one too many means the wrong node.",
        fix=Fix("See which GPU is missing and why:",
                ("nvidia-smi -L", "lspci -d 10de: | grep -iE '3d|vga'", "sudo dmesg | grep -iE 'xid|nvrm' | tail -20"),
                "https://docs.nvidia.com/deploy/xid-errors/index.html"),
        evidence={"--expect-gpus": want, "driver sees": n, "GPUs": names}, affects="jobs sized for the node")


def links_finding(ctx: Context, plist: list) -> Finding:
    links, peers = ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    kinds = Counter(p.label for p in plist)
    what = ", ".join(f"{lab} ({n} pair{'s' if n != 1 else ''})" for lab, n in kinds.most_common())
    if len(plist) == 1:
        what = f"{plist[0].label} between them"
    elif len(kinds) == 1:
        what = f"{plist[0].label} between every pair"
    known = [p for p in plist if p.access is not None]
    ok = sum(1 for p in known if p.access)
    if not known:
        access = "peer access not asked"
    elif len(known) == 1:
        access = "peer access" if ok else "no peer access"
    else:
        access = f"peer access on {'all ' + str(ok) if ok == len(known) else f'{ok} of {len(known)}'} pairs"
    ev = {}
    for g in links.gpus:
        row = [f"GPU {p.b if p.a == g.index else p.a} {p.label}"
               + ({True: " peer", False: " no-peer"}.get(p.access, "")) for p in plist if g.index in (p.a, p.b)]
        ev[gpu_tag(links, g.index, peers) + f" {g.name}"] = "; ".join(row)
    return Finding("topology.links", Status.OK, f"{len(links.gpus)} GPUs · {what} · {access}", evidence=ev)


def peer_findings(ctx: Context, plist: list) -> list:
    """Pairs CUDA gives no peer access: one OK line for pairs whose hardware cannot (NVML says so), one
    WARN for the others, with what on this machine blocks them."""
    links, peers, host = ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value, ctx.fact("host_links").value
    out = []
    blocked = [p for p in plist if p.access is False]
    unsupported = [p for p in blocked if p.nvml_p2p in UNSUPPORTED_P2P and not p.nvlinks]
    blocked = [p for p in blocked if p not in unsupported]

    def names(ps: list) -> str:
        return ", ".join(f"GPU {p.a}-GPU {p.b} ({p.label})" for p in ps[:8]) + (" ..." if len(ps) > 8 else "")

    if unsupported:
        why = sorted({P2P_STATUS[p.nvml_p2p] for p in unsupported})
        out.append(Finding("topology.peer-unsupported", Status.OK,
                           f"no peer access between {names(unsupported)}: {', '.join(why)} (NVML); NCCL copies "
                           "through host memory there",
                           evidence={f"GPU {p.a}-GPU {p.b}": P2P_STATUS[p.nvml_p2p] for p in unsupported}))
    if not blocked:
        return out
    causes, cmds = [], ["nvidia-smi topo -p2p r", "nvidia-smi topo -m"]
    if any(p.nvml_p2p == 4 for p in blocked):
        causes.append("the driver's registry keys disable peer-to-peer (NVreg_RegistryDwords)")
        cmds.append("grep -i registry /proc/driver/nvidia/params; grep -rs NVreg /etc/modprobe.d")
    if host is not None and host.iommu_on:
        causes.append(f"the IOMMU translates DMA (units: {', '.join(host.iommu_units[:4])}; kernel command line: "
                      f"{' '.join(host.cmdline_iommu) or 'no iommu= option'})")
        cmds.append("# boot with iommu=pt (GRUB_CMDLINE_LINUX in /etc/default/grub), or disable VT-d/AMD-Vi in the "
                    "BIOS, then reboot")
    acs: dict = {}
    for p in blocked:
        if host is not None and p.path in ("PIX", "PXB"):
            acs.update({b.bdf: b for b in host.redirecting(p.bus_a) + host.redirecting(p.bus_b)})
    if acs:
        causes.append("PCIe ACS redirects peer traffic on " + ", ".join(acs))
        cmds.extend(f"sudo setpci -s {bdf} ECAP_ACS+0x6.w=0000" for bdf in acs)
    if any(p.nvlinks for p in blocked):
        causes.append("NVLink joins them but CUDA will not use it (fabric manager not running, or links in a bad "
                      "state)")
        cmds += ["nvidia-smi nvlink -s", "systemctl status nvidia-fabricmanager"]
    out.append(Finding(
        "topology.no-peer-access", Status.WARN,
        f"CUDA reports no peer access between {names(blocked)}",
        detail="Without peer access NCCL and torch copy between these GPUs through host memory (several times "
               "slower). " + ("Likely: " + "; ".join(causes) + "." if causes else
                              "NVML does not say why; in a VM the hypervisor must expose peer-to-peer."),
        fix=Fix("Confirm, then remove what blocks peer-to-peer:", tuple(cmds), DOCS_TOPO),
        evidence={f"GPU {p.a}-GPU {p.b} ({gpu_tag(links, p.a, peers)}, {gpu_tag(links, p.b, peers)})":
                  f"{p.label}; NVML P2P: {P2P_STATUS.get(p.nvml_p2p, p.nvml_p2p)}; cuDeviceCanAccessPeer: no"
                  for p in blocked},
        affects="multi-GPU training on these GPUs"))
    return out


def acs_finding(ctx: Context, plist: list):
    host, links, peers = ctx.fact("host_links").value, ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    if host is None:
        return None
    hit = {}
    for p in plist:
        if p.nvlinks or p.path not in ("PIX", "PXB") or p.access is False:
            continue
        for b in host.redirecting(p.bus_a) + host.redirecting(p.bus_b):
            hit[b.bdf] = (b, f"{gpu_tag(links, p.a, peers)}-{gpu_tag(links, p.b, peers)}")
    if not hit:
        return None
    return Finding(
        "topology.acs-redirect", Status.WARN,
        f"PCIe ACS redirects peer-to-peer traffic on {len(hit)} switch port(s) between GPUs",
        detail="With ACS request/completion redirect on, P2P between GPUs behind a PCIe switch goes up to the "
               "root complex: slow, and NCCL can hang in its first collective, although CUDA reports peer "
               "access (NCCL troubleshooting: PCI Access Control Services).",
        fix=Fix("Turn ACS off on those ports (until reboot), or disable VT-d/IOMMU in the BIOS:",
                tuple(f"sudo setpci -s {bdf} ECAP_ACS+0x6.w=0000" for bdf in hit) + ("sudo lspci -vvv | grep ACSCtl",),
                DOCS_ACS),
        evidence={bdf: f"{b.port or 'bridge'} ACSCtl {' '.join(b.enabled)} (pair {pair})" for bdf, (b, pair) in hit.items()},
        affects="NCCL between GPUs behind these ports")


def nvlink_down_findings(ctx: Context) -> list:
    links, peers = ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    out = []
    by_model: dict = {}
    for g in links.gpus:
        by_model.setdefault(g.name, []).append(g)
    for name, gpus in by_model.items():
        counts = Counter(len(g.active_links) for g in gpus)
        usual = max(counts, key=lambda c: (counts[c], c))
        if usual == 0:
            continue
        for g in gpus:
            up = len(g.active_links)
            if up < usual:
                down = [x.link for x in g.links if not x.active]
                out.append(Finding(
                    "topology.nvlink-down", Status.WARN,
                    f"{gpu_tag(links, g.index, peers)}: {up} of {usual} NVLinks up (links {', '.join(map(str, down[:18])) or '?'} down)",
                    detail=f"The other {name} GPUs have {usual} active links; traffic from this GPU runs on fewer "
                           "links (or over PCIe when none is left).",
                    fix=Fix("Look at the links; a GPU reset (when idle) or a reboot retrains them; on NVSwitch "
                            "systems the fabric manager must be running:",
                            (f"nvidia-smi nvlink -s -i {g.index}", f"nvidia-smi nvlink -e -i {g.index}",
                             "systemctl status nvidia-fabricmanager", f"sudo nvidia-smi -r -i {g.index}  # when idle"),
                            DOCS_TOPO),
                    evidence={"active links": up, "usual for the model": usual, "inactive": down},
                    affects="bandwidth between GPUs"))
    return out


def nvlink_error_findings(ctx: Context) -> list:
    """Replay/recovery counters that rose while the all-reduce ran (the nccl fact samples them)."""
    run, links, peers = ctx.fact("nccl").value, ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    if run is None or not run.nvlink_before or not run.nvlink_after:
        return []
    out = []
    for gi, after in run.nvlink_after.items():
        before = run.nvlink_before.get(gi, {})
        rises = {}
        for link, vals in after.items():
            old = before.get(link)
            if not old:
                continue
            d = [(b - a) if isinstance(a, int) and isinstance(b, int) else 0 for a, b in zip(old, vals)]
            if d[RECOVERY] > 0 or d[REPLAY] >= REPLAY_WARN:
                rises[link] = {"replay": d[REPLAY], "recovery": d[RECOVERY]}
        if rises:
            idx = int(gi)
            out.append(Finding(
                "topology.nvlink-errors", Status.WARN,
                f"{gpu_tag(links, idx, peers)}: NVLink error counters rose during the all-reduce on "
                f"link{'s' if len(rises) > 1 else ''} {', '.join(sorted(rises, key=int))}",
                detail="Recovery errors mean a link dropped and retrained under traffic; many replays mean it "
                       "retransmits. Either slows every collective over it and often precedes Xid 74.",
                fix=Fix("Watch the counters; a link that keeps counting needs a reset, reseat or RMA:",
                        (f"nvidia-smi nvlink -e -i {idx}", "sudo dmesg | grep -i 'xid 74'"),
                        "https://docs.nvidia.com/deploy/xid-errors/index.html"),
                evidence={f"link {k}": v for k, v in rises.items()}, affects="bandwidth between GPUs"))
    return out


def mixed_finding(ctx: Context):
    links = ctx.fact("gpu_links").value
    groups = Counter((g.name, g.memory_total_mib) for g in links.gpus)
    if len(groups) < 2:
        return None
    (name, mem), _ = max(groups.items(), key=lambda kv: (kv[1], kv[0][1] or 0))
    keep = [str(g.index) for g in links.gpus if (g.name, g.memory_total_mib) == (name, mem)]
    desc = ", ".join(f"{n}x {nm} ({m} MiB)" for (nm, m), n in groups.most_common())
    return Finding(
        "topology.mixed", Status.WARN, f"mixed GPUs: {desc}",
        detail="Data-parallel jobs run at the slowest GPU's pace and fit the smallest GPU's memory; CUDA's "
               "default order (FASTEST_FIRST) may also number them differently from nvidia-smi.",
        fix=Fix(f"Run multi-GPU jobs on one kind ({name}), numbered as nvidia-smi numbers them:",
                (f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={','.join(keep)}",)),
        evidence={gpu_tag(links, g.index): f"{g.name}, {g.memory_total_mib} MiB" for g in links.gpus},
        affects="multi-GPU jobs")


def ordinals_finding(ctx: Context):
    links, peers = ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    if peers is None or not peers.devices:
        return None
    smi = {norm_bus(g.bus): g.index for g in links.gpus}
    rows = [(d.ordinal, norm_bus(d.bus), smi.get(norm_bus(d.bus))) for d in peers.devices]
    ev = {f"CUDA {o}": f"{bus} = nvidia-smi GPU {i if i is not None else '?'}" for o, bus, i in rows}
    ev.update({"CUDA_VISIBLE_DEVICES": peers.visible_devices, "CUDA_DEVICE_ORDER": peers.device_order})
    text = "; ".join(f"CUDA {o} = GPU {i} ({bus})" for o, bus, i in rows)
    cvd, order = peers.visible_devices, (peers.device_order or "FASTEST_FIRST")
    if all(o == i for o, _, i in rows):
        return Finding("topology.ordinals", Status.OK, "CUDA ordinals match nvidia-smi's indices", evidence=ev)
    tokens = [t.strip() for t in (cvd or "").split(",") if t.strip()]
    numeric = bool(tokens) and all(t.isdigit() for t in tokens)
    # the numbers in CUDA_VISIBLE_DEVICES mean nvidia-smi's GPUs: the user chose this order
    if numeric and all(str(i) == t for (_, _, i), t in zip(rows, tokens)):
        return Finding("topology.ordinals", Status.OK, f"CUDA_VISIBLE_DEVICES={cvd} renumbers the GPUs: {text}",
                       evidence=ev)
    if tokens and not numeric:  # UUIDs name exact GPUs
        return Finding("topology.ordinals", Status.OK, f"CUDA_VISIBLE_DEVICES={cvd}: {text}", evidence=ev)
    said = f"CUDA_VISIBLE_DEVICES={cvd} names CUDA's numbers, not nvidia-smi's: " if tokens else ""
    return Finding(
        "topology.ordinals", Status.WARN, f"{said}CUDA numbers the GPUs differently from nvidia-smi: {text}",
        detail=f"CUDA_DEVICE_ORDER is {order}: CUDA puts the fastest GPU first, nvidia-smi orders by PCI bus, "
               "so `cuda:0` and nvidia-smi's GPU 0 are different GPUs.",
        fix=Fix("Number GPUs the way nvidia-smi does (and choose them by UUID if in doubt):",
                ("export CUDA_DEVICE_ORDER=PCI_BUS_ID", "nvidia-smi -L"), DOCS_ORDER),
        evidence=ev, affects="which GPU a job gets")


def blind_finding(ctx: Context) -> Finding:
    """Where nvidia-smi and NVML cannot list the GPUs (the driver step warns): CUDA's count and peer access."""
    pf = ctx.fact("gpu_peers")
    devs = cuda_devices(pf)
    if devs is None:
        return Finding("topology.unreadable", Status.SKIP, f"{NVML_BLIND}; CUDA's own list: {pf.error}",
                       evidence={"source": pf.source})
    n = len(devs)
    if n < 2:
        return Finding("topology.single", Status.SKIP,
                       f"CUDA shows {gpus(n)}: nothing between GPUs (nvidia-smi and NVML cannot list GPUs here)",
                       evidence={"source": pf.source})
    known = [p for p in pf.value.peers if p.access is not None]
    ok = sum(1 for p in known if p.access)
    access = f"peer access on {ok} of {len(known)} ordered pairs" if known else "peer access not known"
    return Finding("topology.unreadable", Status.SKIP,
                   f"CUDA shows {n} GPUs, {access}; {CANNOT_LIST}, so their link types "
                   "(NVLink or PCIe) are not read", evidence={"source": pf.source, "CUDA_VISIBLE_DEVICES":
                                                              pf.value.visible_devices})


@step("topology", "GPU to GPU links", 95, facts=FACTS, requires=("driver",))
def check_topology(ctx: Context) -> Outcome:
    """Links and peer access between GPUs, NVLinks down or erring, mixed GPUs, ordinals, --expect-gpus.

    The pair matrix as `nvidia-smi topo -m` prints it, with CUDA's peer access; CUDA's numbering against
    nvidia-smi's; the GPU count against --expect-gpus."""
    findings = []
    if ctx.fact("gpu_expect").ok:
        findings.append(count_finding(ctx))
    lf = ctx.fact("gpu_links")
    if lf.state is FactState.NOT_APPLICABLE and lf.error == NVML_BLIND:
        findings.append(blind_finding(ctx))
        return Outcome(next((f for f in findings if f.status in (Status.FAIL, Status.WARN)), findings[-1]).summary,
                       findings)
    if lf.state is FactState.NOT_APPLICABLE:
        if not findings:
            return Outcome(lf.error or "one GPU", [Finding("topology.single", Status.SKIP, lf.error or "one GPU")])
        return Outcome(findings[0].summary, findings)
    if not lf.ok:
        findings.append(Finding("topology.unreadable", Status.SKIP,
                                f"NVML could not tell the links between GPUs: {lf.error}",
                                evidence={"source": lf.source}))
        return Outcome(findings[-1].summary, findings)
    plist = joined_pairs(ctx)
    pf = ctx.fact("gpu_peers")
    if not pf.ok and pf.state is not FactState.NOT_APPLICABLE:
        findings.append(Finding("topology.peers-unknown", Status.SKIP,
                                f"peer access not known: {pf.error}", evidence={"source": pf.source}))
    findings.append(links_finding(ctx, plist))
    for extra in (ordinals_finding(ctx), mixed_finding(ctx), acs_finding(ctx, plist)):
        if extra is not None:
            findings.append(extra)
    findings += peer_findings(ctx, plist) + nvlink_down_findings(ctx) + nvlink_error_findings(ctx)
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    top = next((f for f in findings if f.id == "topology.links"), findings[0])
    return Outcome(bad[0].summary if bad else top.summary, findings)

