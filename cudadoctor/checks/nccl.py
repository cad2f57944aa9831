"""Step `nccl` (order 96): a real all-reduce across every visible GPU through the target's
torch.distributed (NCCL, one process per GPU). FAIL on an error, a hang (naming the stage and the rank
the others waited for) or a wrong sum; WARN when the bus bandwidth is far below what the slowest GPU
pair should give (matrix/links.toml). Causes come from the facts: NCCL variables, /dev/shm in a
container, IOMMU and ACS, the socket interface, InfiniBand, a shadowing libnccl, other GPU processes.

Never advised: turning NVLink SHARP / multicast on (NCCL_NVLS_ENABLE=1) or unsetting the variables
that keep it off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cudadoctor.checks.common import env_vars, ld_without, q
from cudadoctor.checks.gpu_pairs import gpu_tag, joined_pairs, slowest
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts.host_links import norm_bus
from cudadoctor.matrix.links import source_titles, warn_below
from cudadoctor.model import FactState, Finding, Fix, Status

DOCS_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
DOCS_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
FACTS = ("nccl", "gpu_links", "gpu_peers", "host_links", "env", "nvml", "platform", "libs")
TRANSPORT_WORDS = {"p2p": "P2P (GPU to GPU directly)", "shm": "SHM (through host shared memory)",
                   "net-socket": "NET/Socket (TCP through the kernel)", "net-ib": "NET/IB (InfiniBand/RoCE)",
                   "net": "a network plugin"}
#: NCCL_P2P_LEVEL values, lowest first (NCCL env docs; the numbers are the older spelling)
P2P_LEVELS = ["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]
P2P_LEVEL_NUMBERS = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "SYS", "5": "SYS"}
TUNING = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_NTHREADS", "NCCL_BUFFSIZE",
          "NCCL_MAX_CTAS")
SHM_SMALL = 512 << 20  # below this, a container's /dev/shm is named as a cause (Docker's default is 64 MiB)
STAGE_WORDS = {"start": "starting the ranks", "import": "import torch", "device": "choosing the GPU",
               "rendezvous": "the rendezvous (the ranks meeting on the TCP store)",
               "init": "NCCL's communicator set-up (init)", "collective": "the collective (the first all-reduce)",
               "measure": "the timed all-reduces", "done": "the end"}


@dataclass
class Cause:
    text: str
    commands: tuple = ()


def _on(env: dict, name: str) -> bool:
    return env.get(name, "0").strip() not in ("", "0")


def env_causes(env: dict, pair_label: str) -> list:
    """NCCL variables that take a transport away or force a slower choice."""
    out = []
    if _on(env, "NCCL_P2P_DISABLE"):
        out.append(Cause(f"NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']} turns peer-to-peer (NVLink and PCIe P2P) off",
                         ("unset NCCL_P2P_DISABLE",)))
    if _on(env, "NCCL_SHM_DISABLE"):
        out.append(Cause(f"NCCL_SHM_DISABLE={env['NCCL_SHM_DISABLE']} turns the shared-memory transport off, "
                         "leaving the network", ("unset NCCL_SHM_DISABLE",)))
    lvl = env.get("NCCL_P2P_LEVEL", "").strip().upper()
    lvl = P2P_LEVEL_NUMBERS.get(lvl, lvl)
    need = "NVL" if pair_label.startswith("NV") else pair_label
    if lvl in P2P_LEVELS and need in P2P_LEVELS and P2P_LEVELS.index(lvl) < P2P_LEVELS.index(need):
        out.append(Cause(f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} allows P2P only up to {lvl}, and these GPUs are "
                         f"{pair_label} apart", ("unset NCCL_P2P_LEVEL",)))
    return out


def tuning_causes(env: dict) -> list:
    set_ = [k for k in TUNING if env.get(k)]
    if not set_:
        return []
    return [Cause("tuning variables force NCCL's choices: " + ", ".join(f"{k}={env[k]}" for k in set_),
                  tuple(f"unset {k}" for k in set_))]


def shm_cause(ctx: Context, run) -> list:
    host, plat = ctx.fact("host_links").value, ctx.fact("platform").value
    if host is None or host.shm_bytes is None or host.shm_bytes >= SHM_SMALL:
        return []
    said = any("/dev/shm" in w or "shm" in w.lower() for w in run.warnings + [run.error])
    if not said and "shm" not in run.transport_kinds:
        return []
    where = plat.container if plat is not None and plat.container else ""
    cmds = (("docker run --shm-size=16g ...  # or: docker run --ipc=host ...",
             "kubernetes: mount an emptyDir {medium: Memory} at /dev/shm") if where else
            ("sudo mount -o remount,size=16G /dev/shm",))
    return [Cause(f"/dev/shm is only {host.shm_bytes >> 20} MiB" + (f" in this {where} container (Docker's default "
                                                                     "is 64 MiB)" if where else ""), cmds)]


def socket_cause(ctx: Context, env: dict) -> list:
    want = env.get("NCCL_SOCKET_IFNAME", "").strip()
    host = ctx.fact("host_links").value
    if not want or host is None or not host.net_interfaces:
        return []
    if matching_interfaces(want, host.net_interfaces):
        return []
    good = [i for i in host.net_interfaces if i != "lo" and not i.startswith(("docker", "veth", "virbr"))]
    cmd = f"export NCCL_SOCKET_IFNAME={good[0]}  # or: unset NCCL_SOCKET_IFNAME" if good else \
        "unset NCCL_SOCKET_IFNAME"
    return [Cause(f"NCCL_SOCKET_IFNAME={want} matches none of this machine's interfaces "
                  f"({', '.join(host.net_interfaces)}): NCCL finds no socket to bootstrap on", (cmd,))]


def matching_interfaces(spec: str, names: list) -> list:
    """NCCL_SOCKET_IFNAME's rule: comma-separated prefixes; '^' excludes them; '=' asks for exact names."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    pats = [p.strip() for p in spec.split(",") if p.strip()]

    def hit(n: str) -> bool:
        return any(n == p if exact else n.startswith(p) for p in pats)

    return [n for n in names if hit(n) != exclude]


def pcie_causes(ctx: Context, pair) -> list:
    host = ctx.fact("host_links").value
    if host is None or pair is None or pair.nvlinks:
        return []
    out = []
    if host.iommu_on:
        out.append(Cause(f"the IOMMU translates DMA ({', '.join(host.iommu_units[:3])}): peer-to-peer over PCIe is "
                         "redirected or refused", ("# boot with iommu=pt, or disable VT-d/AMD-Vi in the BIOS",)))
    acs = host.redirecting(pair.bus_a) + host.redirecting(pair.bus_b)
    if acs:
        out.append(Cause("PCIe ACS redirects peer traffic on " + ", ".join(b.bdf for b in acs),
                         tuple(f"sudo setpci -s {b.bdf} ECAP_ACS+0x6.w=0000" for b in acs)))
    return out


def libnccl_cause(ctx: Context, run, env: dict) -> list:
    libs = ctx.fact("libs").value
    loaded = run.libnccl[0] if run.libnccl else ""
    ldp = [e for e in env.get("LD_LIBRARY_PATH", "").split(":") if e]
    if not loaded or libs is None or "/site-packages/nvidia/nccl/" in loaded:
        return []
    wheel = next((c.realpath or c.path for c in libs.copies_of("libnccl") if c.origin == "pip-wheel"), "")
    entry = next((e for e in ldp if os.path.normpath(e) == os.path.dirname(loaded)), "")
    if not wheel or not entry:
        return []
    return [Cause(f"libnccl comes from LD_LIBRARY_PATH entry {entry} ({loaded}), not from torch's NCCL wheel "
                  f"({wheel})", (ld_without(ldp, {entry}),))]


def busy_cause(ctx: Context, run) -> list:
    nv = ctx.fact("nvml").value
    if nv is None:
        return []
    buses = {norm_bus(r.bus) for r in run.ranks if r.bus}
    busy = [(g, p) for g in nv.gpus if norm_bus(g.pci_bus_id) in buses for p in (g.processes or [])]
    if not busy:
        return []
    return [Cause("other processes use these GPUs: " + ", ".join(
        f"pid {p.get('pid')} on GPU {g.index} ({p.get('used_mib')} MiB)" for g, p in busy[:4]),
        ("nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_bus_id --format=csv",))]


def fix_of(causes: list, fallback: tuple) -> Fix:
    cmds: list = []
    for c in causes:
        for cmd in c.commands:
            if cmd not in cmds:
                cmds.append(cmd)
    unset = [c.split()[1] for c in cmds if c.startswith("unset NCCL_")]
    if len(unset) > 1:  # one line for several variables, as a user would type it
        cmds = [f"unset {' '.join(unset)}"] + [c for c in cmds if not c.startswith("unset NCCL_")]
    text = ("Likely, strongest first: " + "; ".join(c.text for c in causes) + ".") if causes else \
        "Nothing in this machine's facts explains it; run with NCCL's log to see each step:"
    return Fix(text, tuple(cmds) or fallback, DOCS_TROUBLE)


def rank_words(ctx: Context, run, r) -> str:
    links, peers = ctx.fact("gpu_links").value, ctx.fact("gpu_peers").value
    where = f"cuda:{r.device}" if r.device is not None else ""
    if links is not None and r.bus:
        g = next((g for g in links.gpus if norm_bus(g.bus) == norm_bus(r.bus)), None)
        if g is not None:
            where = gpu_tag(links, g.index, peers)
    return f"rank {r.rank}" + (f" on {where}" if where else "")


def _gbps(x: float) -> str:
    """260.1, 2.69, 0.0312: a tenth of a GB/s where that is noise-level, three figures below 10."""
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def run_evidence(run, exp_text: str = "") -> dict:
    ev = {"ranks": run.world, "NCCL": run.nccl_version, "torch": run.torch, "transports": ", ".join(run.transports),
          "network": run.network, "NCCL read": run.env_read, "log settings cudadoctor used": run.log_env}
    if run.busbw is not None:
        ev["all_reduce"] = (f"{(run.size_bytes or 0) >> 20} MiB: {run.time_us} µs, algbw {run.algbw} GB/s, "
                            f"busbw {run.busbw} GB/s")
    if exp_text:
        ev["expected"] = exp_text
    if run.warnings:
        ev["NCCL WARN"] = run.warnings[:5]
    for r in run.ranks:
        ev[f"rank {r.rank}"] = (f"cuda:{r.device} {r.bus} {r.host} · stopped at {r.current or r.next_stage}"
                                + (f" · exit {r.rc}" if r.rc not in (0, None) else "") + (" · killed" if r.killed else ""))
    return {k: v for k, v in ev.items() if v not in ("", None, {}, [])}


def speed_finding(ctx: Context, run, env: dict):
    plist = joined_pairs(ctx)
    links = ctx.fact("gpu_links").value
    buses = {norm_bus(r.bus) for r in run.ranks if r.bus}
    pair, exp = slowest(plist, links, buses) if links is not None else (None, None)
    kinds = run.transport_kinds
    via = ", ".join(TRANSPORT_WORDS.get(k, k) for k in kinds) or "an unknown transport"
    got = f"busbw {_gbps(run.busbw)} GB/s at {(run.size_bytes or 0) >> 20} MiB"
    if exp is None:
        return Finding("nccl.ok", Status.OK, f"all-reduce over {run.world} GPUs: correct sum; {got} via {via}",
                       evidence=run_evidence(run))
    exp_text = (f"~{exp.busbw_gbps:.0f} GB/s: {pair.label}, {exp.text}, x {exp.efficiency:g} "
                f"({exp.confidence}; {'; '.join(source_titles(exp.sources))})")
    ev = run_evidence(run, exp_text)
    ratio = run.busbw / exp.busbw_gbps if exp.busbw_gbps else 1.0
    if ratio >= warn_below():
        return Finding("nccl.ok", Status.OK, f"all-reduce over {run.world} GPUs: correct sum; {got} via {via}; "
                                             f"{pair.label} should give ~{exp.busbw_gbps:.0f}", evidence=ev)
    causes = env_causes(env, pair.label) + shm_cause(ctx, run) + pcie_causes(ctx, pair) + busy_cause(ctx, run) + \
        libnccl_cause(ctx, run, env) + tuning_causes(env)
    below = exp.busbw_gbps / run.busbw if run.busbw else float("inf")
    return Finding(
        "nccl.slow", Status.WARN,
        f"all-reduce {got} is {below:.0f}× below the ~{exp.busbw_gbps:.0f} GB/s that {pair.label} gives here "
        f"({exp.text}); NCCL used {via}",
        detail="The sum was right, but every data-parallel step pays this: gradients cross the slow path.",
        fix=fix_of(causes, ("NCCL_DEBUG=INFO python your_script.py 2>&1 | grep -E ' via |NCCL WARN'",)),
        evidence=ev, affects="multi-GPU training speed")


def failure_finding(ctx: Context, run, env: dict) -> Finding:
    plist = joined_pairs(ctx)
    links = ctx.fact("gpu_links").value
    pair, _ = slowest(plist, links) if links is not None else (None, None)
    # errors and hangs: what breaks a run (variables that only slow it down are the slow finding's causes)
    causes = socket_cause(ctx, env) + shm_cause(ctx, run) + libnccl_cause(ctx, run, env)
    stage = STAGE_WORDS.get(run.stage, run.stage)
    if run.outcome == "hang":
        lag = run.laggards
        if run.stage in ("collective", "init"):
            causes += pcie_causes(ctx, pair)
        if lag:
            others = [r for r in run.ranks if r not in lag]
            who = ("; " + ", ".join(rank_words(ctx, run, r) for r in lag) + " never got there"
                   + (f" while {', '.join(rank_words(ctx, run, r) for r in others)} waited in it" if others else ""))
            causes.append(Cause(f"{', '.join(f'rank {r.rank}' for r in lag)} never reached it: a rank stuck or late "
                                "in its own code holds every other rank; in a job, look at that rank's stack",
                                ("py-spy dump --pid <PID of the late rank>",)))
        else:
            who = "; every rank waited in it"
        summary = f"the all-reduce hung in {stage}, stopped after {run.deadline_s:g} s{who}"
        return Finding("nccl.hang", Status.FAIL, summary,
                       detail="A collective waits for every rank: one rank that never arrives, or a path that never "
                              "delivers, holds all of them until the job's timeout. cudadoctor stopped every rank.",
                       fix=fix_of(causes, ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET python your_script.py",
                                           "nvidia-smi topo -p2p r")),
                       evidence=run_evidence(run), affects="every multi-GPU job")
    if run.outcome == "wrong-result":
        return Finding("nccl.wrong-result", Status.FAIL, f"the all-reduce gave a wrong sum: {run.error}",
                       detail="Data corrupted between GPUs: a faulty link, GPU memory, or a broken NCCL build.",
                       fix=fix_of(causes, ("nvidia-smi -q -d ECC", "nvidia-smi nvlink -e", "cudadoctor bench --collectives")),
                       evidence=run_evidence(run), affects="every multi-GPU job")
    last = run.warnings[-1] if run.warnings else ""
    return Finding("nccl.error", Status.FAIL,
                   f"the all-reduce failed in {stage}: {_first_line(run.error)}",
                   detail=f"NCCL said: {last}" if last else "",
                   fix=fix_of(causes, ("NCCL_DEBUG=INFO python your_script.py 2>&1 | grep -E 'NCCL WARN|via '",)),
                   evidence=run_evidence(run), affects="every multi-GPU job")


def _first_line(text: str) -> str:
    """The exception's first line, and NCCL's "Last error:" text when torch added it on a later line."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0][:240]
    i = next((k for k, ln in enumerate(lines) if ln.startswith("Last error")), None)
    if i is not None:
        last = lines[i].split(":", 1)[1].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
        if last:
            first += f" (last error: {last[:160]})"
    return first


def ib_finding(ctx: Context, env: dict):
    host = ctx.fact("host_links").value
    if host is None or not host.ib_devices or not _on(env, "NCCL_IB_DISABLE"):
        return None
    return Finding("nccl.ib-disabled", Status.WARN,
                   f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} while this machine has InfiniBand/RoCE devices "
                   f"({', '.join(host.ib_devices[:4])}): jobs across nodes use TCP sockets",
                   fix=Fix("Let NCCL use InfiniBand:", ("unset NCCL_IB_DISABLE", "ibv_devinfo | grep -E 'hca_id|state'"),
                           DOCS_ENV),
                   evidence={"NCCL_IB_DISABLE": env["NCCL_IB_DISABLE"], "/sys/class/infiniband": host.ib_devices},
                   affects="multi-node jobs")


@step("nccl", "NCCL all-reduce", 96, facts=FACTS, requires=("torch.cuda",))
def check_nccl(ctx: Context) -> Outcome:
    """An all-reduce over every visible GPU (one process each, NCCL): result, hang, speed against the links."""
    fact = ctx.fact("nccl")
    env = env_vars(ctx)
    extra = [f for f in (ib_finding(ctx, env),) if f is not None]
    if fact.state is FactState.NOT_APPLICABLE or (fact.value is None and not fact.error):
        why = fact.error or "not run"
        return Outcome(why, [Finding("nccl.not-run", Status.SKIP, f"no collective run: {why}")] + extra)
    run = fact.value
    if run is None or run.outcome == "not-started":
        return Outcome("could not start the ranks", [Finding(
            "nccl.not-started", Status.WARN, f"the collective could not start: {fact.error}",
            fix=Fix("Check that the target interpreter runs:", (f"{q(run.python) if run and run.python else 'python'} "
                                                                "-c 'import torch.distributed'",)),
            evidence={"source": fact.source})] + extra)
    main = speed_finding(ctx, run, env) if run.outcome == "ok" else failure_finding(ctx, run, env)
    findings = [main] + extra
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    return Outcome(bad[0].summary if bad else main.summary, findings)
