"""`health` steps about errors the GPUs already had: memory (ECC, row remapping, page retirement) and Xid."""

from __future__ import annotations

from cudadoctor.checks.health_common import DOCS_MEMORY, answering, gpu_by_pci, gpu_evidence, nvml_gpus
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.model import Finding, Fix, Status

SEVERITY = {"fail": Status.FAIL, "warn": Status.WARN, "info": Status.OK}


def check_memory(ctx: Context) -> Outcome:
    """Uncorrectable ECC errors, remapped rows pending or failed, retired pages pending."""
    gs = answering(ctx)
    findings = []
    for g in gs:
        rr = list(g.remapped_rows) + [None] * (4 - len(g.remapped_rows))
        q = f"nvidia-smi -q -i {g.index} -d ROW_REMAPPER,PAGE_RETIREMENT,ECC"
        if rr[3]:
            findings.append(Finding(
                "health.remapped-rows-failure", Status.FAIL, f"GPU {g.index}: row remapping failed (memory fault)",
                "The GPU could not remap a failing memory row: NVIDIA's guidance is to replace it.",
                Fix("Drain the GPU, collect a bug report and contact the vendor (RMA):", (q, "sudo nvidia-bug-report.sh"),
                    DOCS_MEMORY), gpu_evidence(g, remapped_rows=g.remapped_rows), "every job on this GPU"))
        pend = [n for n, v in (("rows to remap", rr[2]), ("pages to retire", g.retired_pages_pending)) if v]
        if pend:
            findings.append(Finding(
                "health.reset-pending", Status.WARN, f"GPU {g.index}: {' and '.join(pend)} pending a GPU reset",
                "Memory rows (or pages) were marked bad after an uncorrectable error. Error containment keeps "
                "work correct meanwhile; the remap takes effect at the next GPU reset or reboot.",
                Fix("Reset the GPU when no process uses it (or reboot):",
                    (f"nvidia-smi --query-compute-apps=pid --format=csv -i {g.index}", f"sudo nvidia-smi -r -i {g.index}",
                     q), DOCS_MEMORY),
                gpu_evidence(g, remapped_rows=g.remapped_rows, retired_pages_pending=g.retired_pages_pending)))
        if g.ecc_uncorrected_volatile:
            findings.append(Finding(
                "health.ecc-uncorrected", Status.WARN,
                f"GPU {g.index}: {g.ecc_uncorrected_volatile} uncorrectable ECC error(s) since the driver loaded",
                "The applications that used the bad memory were stopped (Xid 94/95 in the kernel log); repeated "
                "errors mean the GPU needs service.",
                Fix("Read the error counters and the row remapper:", (q,), DOCS_MEMORY),
                gpu_evidence(g, ecc_uncorrected_volatile=g.ecc_uncorrected_volatile,
                             ecc_uncorrected_aggregate=g.ecc_uncorrected_aggregate)))
        if len(g.ecc_mode) == 2 and g.ecc_mode[0] != g.ecc_mode[1]:
            findings.append(Finding(
                "health.ecc-mode-pending", Status.WARN,
                f"GPU {g.index}: ECC {'on' if g.ecc_mode[0] else 'off'} now, {'on' if g.ecc_mode[1] else 'off'} "
                "after the next reset", "An ECC mode change waits for a GPU reset or reboot.",
                Fix("Reset the GPU (or reboot) to apply it:", (f"sudo nvidia-smi -r -i {g.index}",)),
                gpu_evidence(g, ecc_mode=g.ecc_mode)))
    if not gs:
        return Outcome("no GPU to ask", [Finding("health.memory-unknown", Status.SKIP, "no GPU answered NVML")])
    if findings:
        return Outcome(findings[0].summary, findings)
    lifetime = sum(g.ecc_uncorrected_aggregate or 0 for g in gs)
    remapped = sum((g.remapped_rows[0] or 0) + (g.remapped_rows[1] or 0) for g in gs if len(g.remapped_rows) >= 2)
    s = f"no uncorrectable ECC error since the driver loaded; {remapped} row(s) remapped"
    if lifetime:
        s += f"; {lifetime} uncorrectable error(s) in the GPUs' lifetime, handled"
    ev = {g.label: {"ecc": g.ecc_mode, "uncorrected lifetime": g.ecc_uncorrected_aggregate,
                    "remapped rows": g.remapped_rows} for g in gs}
    return Outcome(s, [Finding("health.memory", Status.OK, s, evidence=ev)])


def check_xid(ctx: Context) -> Outcome:
    """Xid events in the kernel log since boot, judged with the Xid catalogue (matrix/xid.toml)."""
    f = ctx.fact("xid")
    if not f.ok:
        why = f.error or f.state.value
        return Outcome(f"kernel log not readable ({why[:80]}); Xid not checked", [Finding(
            "health.xid-unreadable", Status.SKIP, f"kernel log not readable ({why}); Xid errors not checked",
            "dmesg is often root-only (kernel.dmesg_restrict=1): that is a fact about permissions, not about "
            "the GPUs.", Fix("Run health as root (Slurm's HealthCheckProgram and Prolog run as root) to include "
                            "Xid events:", ("sudo cudadoctor health",)), {f.source or "dmesg": why})])
    log = f.value
    if not log.events:
        s = f"no Xid event since boot ({log.lines} kernel log lines)"
        return Outcome(s, [Finding("health.xid-none", Status.OK, s, evidence={"source": log.source})])
    from cudadoctor.matrix.xid import catalogue

    cat = catalogue()
    gs = nvml_gpus(ctx)
    groups: dict = {}  # (gpu index or pci, code) -> [events]
    for e in log.events:
        g = gpu_by_pci(gs, e.pci)
        groups.setdefault((g.index if g is not None else e.pci, e.code), []).append(e)
    findings, quiet = [], []
    for (where, code), evs in groups.items():
        x = cat.get(code)
        st = SEVERITY.get(x.severity, Status.WARN)
        last = evs[-1]
        on = f"GPU {where}" if isinstance(where, int) else f"PCI {where}"
        if st is Status.OK:
            quiet.append(f"{len(evs)}× Xid {code} on {on}")
            continue
        g = next((g for g in gs if g.index == where), None)
        detail = f"{x.meaning}. Origin: {x.origin or 'unknown'}. NVIDIA's action: {x.action.name}." + (
            " The kernel log keeps the event until the next boot, so health reports it until then."
            if st is Status.FAIL else "")
        ev = gpu_evidence(g) if g is not None else {"pci": where}
        ev.update({"xid": code, "events": len(evs), "last": last.text,
                   "last at (s since boot)": last.ts, "catalogue": x.sources[0] if x.sources else ""})
        findings.append(Finding(
            "health.xid", st, f"{x.title} on {on} ({len(evs)}×): {x.meaning}", detail,
            Fix(x.action.text, x.action.commands_for(where if isinstance(where, int) else "<gpu>", last.pci),
                x.sources[0] if x.sources else ""), ev, "every job on this GPU" if st is Status.FAIL else ""))
    findings.sort(key=lambda fd: -fd.status.rank)
    if quiet:
        findings.append(Finding("health.xid-app", Status.OK,
                                f"application-level Xid events (the node needs nothing): {', '.join(quiet)}",
                                evidence={"source": log.source}))
    bad = [fd for fd in findings if fd.status is not Status.OK]
    s = bad[0].summary if bad else f"{len(log.events)} Xid event(s) since boot, none a node fault"
    if len(bad) > 1:
        s += f" (+{len(bad) - 1} more)"
    return Outcome(s, findings)

