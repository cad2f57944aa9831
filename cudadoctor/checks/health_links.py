"""`health` steps about the GPUs' running state: clocks and temperature, NVLink, the NVSwitch fabric, MIG."""

from __future__ import annotations

from cudadoctor.checks.health_common import DOCS_CLOCKS, DOCS_FM, DOCS_MIG, answering, gpu_evidence, gpu_list
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.model import Finding, Fix, Status

# clock event reasons that cut clocks for a reason outside the workload (NVML "clocks event reasons")
SLOWDOWNS = {"hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
             "hw_power_brake_slowdown": "HW power brake", "sw_thermal_slowdown": "SW thermal slowdown"}
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
FABRIC_DEGRADED_BW = 1  # NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, in bits 0-1 of the health mask


def check_clocks(ctx: Context) -> Outcome:
    """Clock slowdowns (HW slowdown, thermal, power brake) and the temperature against the slowdown threshold."""
    gs = answering(ctx)
    findings = []
    for g in gs:
        active = [SLOWDOWNS[r] for r in g.clock_events if r in SLOWDOWNS]
        if active:
            power = "hw_power_brake_slowdown" in g.clock_events
            findings.append(Finding(
                "health.clocks-slowdown", Status.WARN, f"GPU {g.index}: clocks cut by {', '.join(active)}",
                "HW slowdown halves the clocks or worse: a hot GPU, an external power brake (the power supply or "
                "the BMC asked for it), or power draw above what the board may take. A job here runs slower "
                "than on its peers and holds back every rank it talks to.",
                Fix("Look at temperature, power and the reasons' counters; then at airflow, fans and power "
                    "supplies" + (" (power brake: the BMC event log)" if power else "") + ":",
                    (f"nvidia-smi -q -i {g.index} -d PERFORMANCE,TEMPERATURE,POWER",)
                    + (("sudo ipmitool sel list | tail -20",) if power else ()), DOCS_CLOCKS),
                gpu_evidence(g, clock_events=g.clock_events, temperature_c=g.temperature_c),
                "the speed of every job on this GPU"))
        t, slow, top = g.temperature_c, g.temp_slowdown_c, g.temp_max_c
        if t is not None and slow and t >= slow:
            findings.append(Finding(
                "health.temperature", Status.FAIL, f"GPU {g.index} at {t} °C: at or above its slowdown temperature {slow} °C",
                f"The GPU slows itself down from {slow} °C and shuts down at {g.temp_shutdown_c or '?'} °C; a GPU this "
                "hot before a job even starts has a cooling fault.",
                Fix("Check the node's fans and airflow, then the GPU's temperatures:",
                    (f"nvidia-smi -q -i {g.index} -d TEMPERATURE,PERFORMANCE",)),
                gpu_evidence(g, temperature_c=t, slowdown_c=slow, shutdown_c=g.temp_shutdown_c), "every job on this GPU"))
        elif t is not None and top and t >= top:
            findings.append(Finding(
                "health.temperature", Status.WARN, f"GPU {g.index} at {t} °C: above its maximum operating temperature {top} °C",
                f"The driver lowers the clocks above {top} °C; the hardware slows down from {slow or '?'} °C.",
                Fix("Check the node's fans and airflow:", (f"nvidia-smi -q -i {g.index} -d TEMPERATURE",)),
                gpu_evidence(g, temperature_c=t, max_operating_c=top, slowdown_c=slow)))
    if not gs:
        return Outcome("no GPU to ask", [Finding("health.clocks-unknown", Status.SKIP, "no GPU answered NVML")])
    if findings:
        findings.sort(key=lambda f: -f.status.rank)
        return Outcome(findings[0].summary, findings)
    temps = [g.temperature_c for g in gs if g.temperature_c is not None]
    slows = sorted({g.temp_slowdown_c for g in gs if g.temp_slowdown_c})
    s = (f"{min(temps)}–{max(temps)} °C" if temps and min(temps) != max(temps) else f"{temps[0]} °C" if temps else
         "temperature not reported") + (f" (slowdown at {slows[0]} °C)" if slows else "") + "; no clock slowdown"
    return Outcome(s, [Finding("health.clocks", Status.OK, s,
                               evidence={g.label: {"temperature_c": g.temperature_c, "clock_events": g.clock_events}
                                         for g in gs})])


def _on_nvswitch(g) -> bool:
    return bool(g.fabric) and g.fabric.get("state") not in (None, 0)


def check_nvlink(ctx: Context) -> Outcome:
    """NVLink links down: fewer active links than the node's other GPUs of the same model (or any, behind
    NVSwitches, where every link must be up). Error counters are not judged: healthy links count some."""
    gs = [g for g in answering(ctx) if g.nvlinks]
    if not gs:
        return Outcome("no NVLink", [Finding("health.nvlink-none", Status.SKIP, "no GPU reports NVLink links")])
    best: dict = {}
    for g in gs:
        best[g.name] = max(best.get(g.name, 0), sum(1 for s in g.nvlinks if s == 1))
    findings = []
    for g in gs:
        up = [i for i, s in enumerate(g.nvlinks) if s == 1]
        down = [i for i, s in enumerate(g.nvlinks) if s != 1]
        expected = len(g.nvlinks) if _on_nvswitch(g) else best[g.name]
        if down and len(up) < expected:
            findings.append(Finding(
                "health.nvlink-down", Status.FAIL,
                f"GPU {g.index}: NVLink {', '.join(map(str, down))} down ({len(up)} of {len(g.nvlinks)} up"
                + ("" if _on_nvswitch(g) else f"; its peers have {expected}") + ")",
                "Collectives over this GPU fall back to slower paths or hang; NCCL jobs across it run slowly or "
                "fail.",
                Fix("Read the link states and error counters, then reset the GPU (or reboot); a link that stays "
                    "down needs service:", (f"nvidia-smi nvlink -s -i {g.index}", f"nvidia-smi nvlink -e -i {g.index}",
                                            f"sudo nvidia-smi -r -i {g.index}")),
                gpu_evidence(g, links_down=down, links_up=len(up)), "multi-GPU jobs"))
    if findings:
        return Outcome(findings[0].summary, findings)
    ups = sorted({sum(1 for s in g.nvlinks if s == 1) for g in gs})
    if ups == [0]:
        s = "no NVLink link active (no bridge or NVSwitch in use)"
        return Outcome(s, [Finding("health.nvlink", Status.OK, s)])
    s = f"{'/'.join(map(str, ups))} links up on each of {len(gs)} GPU{'s' if len(gs) != 1 else ''}"
    return Outcome(s, [Finding("health.nvlink", Status.OK, s, evidence={g.label: g.nvlinks for g in gs})])


def check_fabric(ctx: Context) -> Outcome:
    """The NVSwitch fabric each GPU registered with (the fabric manager's work), on NVSwitch systems."""
    gs = [g for g in answering(ctx) if _on_nvswitch(g)]
    if not gs:
        return Outcome("not an NVSwitch system", [Finding("health.fabric-none", Status.SKIP,
                                                          "no GPU is part of an NVSwitch fabric")])
    procs = ctx.fact("node_processes")
    fm = procs.ok and procs.value.fabricmanager
    findings = []
    for g in gs:
        state, status = g.fabric.get("state"), g.fabric.get("status", 0)
        if state in (1, 2) or (state == 3 and status):
            what = FABRIC_STATES.get(state, str(state)) if state != 3 else f"failed (NVML status {status})"
            findings.append(Finding(
                "health.fabric-manager", Status.FAIL, f"GPU {g.index}: NVSwitch fabric {what}"
                + ("" if fm else "; nv-fabricmanager is not running here"),
                "On NVSwitch systems CUDA fails with error 802 ('system not yet initialized') until the fabric "
                "manager has registered the GPU with the fabric.",
                Fix("Start the fabric manager (its version must match the driver), then check the GPU's fabric state:",
                    ("sudo systemctl enable --now nvidia-fabricmanager", "systemctl status nvidia-fabricmanager",
                     f"nvidia-smi -q -i {g.index} -d FABRIC"), DOCS_FM),
                gpu_evidence(g, fabric=g.fabric, fabricmanager_running=fm), "every CUDA program"))
        elif state == 3 and (g.fabric.get("health_mask", 0) & 0x3) == FABRIC_DEGRADED_BW:
            findings.append(Finding(
                "health.fabric-degraded", Status.WARN, f"GPU {g.index}: NVSwitch fabric bandwidth degraded",
                "The fabric is up but with reduced bandwidth (a link or switch is out).",
                Fix("Read the fabric state and the NVLink links:", (f"nvidia-smi -q -i {g.index} -d FABRIC",
                                                                   f"nvidia-smi nvlink -s -i {g.index}"), DOCS_FM),
                gpu_evidence(g, fabric=g.fabric)))
    if findings:
        return Outcome(findings[0].summary, findings)
    s = f"fabric completed on {gpu_list(gs)}"
    return Outcome(s, [Finding("health.fabric", Status.OK, s, evidence={g.label: g.fabric for g in gs})])


def check_mig(ctx: Context) -> Outcome:
    """MIG mode: no change pending a reset, and instances to run on where it is on."""
    gs = [g for g in answering(ctx) if len(g.mig_mode) == 2]
    if not gs:
        return Outcome("MIG not supported", [Finding("health.mig-none", Status.SKIP, "no GPU reports a MIG mode")])
    findings = []
    for g in gs:
        cur, pend = g.mig_mode
        if cur != pend:
            findings.append(Finding(
                "health.mig-pending", Status.WARN,
                f"GPU {g.index}: MIG {'on' if cur else 'off'} now, {'on' if pend else 'off'} after the next reset",
                "A MIG mode change waits for a GPU reset: until then jobs see the old layout.",
                Fix("Reset the GPU when no process uses it (or reboot):", (f"sudo nvidia-smi -r -i {g.index}",), DOCS_MIG),
                gpu_evidence(g, mig_mode=g.mig_mode)))
        if cur == 1 and not g.mig_devices:
            findings.append(Finding(
                "health.mig-no-instances", Status.FAIL, f"GPU {g.index}: MIG mode is on but no MIG instance exists",
                "With MIG on, CUDA sees only MIG instances; with none, no job can use this GPU.",
                Fix("Create instances, or turn MIG off:",
                    (f"sudo nvidia-smi mig -i {g.index} -cgi 0 -C  # or a profile from: nvidia-smi mig -lgip",
                     f"sudo nvidia-smi -i {g.index} -mig 0"), DOCS_MIG),
                gpu_evidence(g, mig_mode=g.mig_mode, instances=0), "every job on this GPU"))
    if findings:
        findings.sort(key=lambda f: -f.status.rank)
        return Outcome(findings[0].summary, findings)
    on = [g for g in gs if g.mig_mode[0] == 1]
    s = (f"MIG on for {gpu_list(on)} ({sum(g.mig_devices or 0 for g in on)} instances)" if on else "MIG off") + (
        f", off for {gpu_list([g for g in gs if g not in on])}" if on and len(on) < len(gs) else "")
    return Outcome(s, [Finding("health.mig", Status.OK, s)])
