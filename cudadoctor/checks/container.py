"""Step 110: container and device health (MIG, MPS, persistence, compute mode, memory errors, Xid,
fabric manager, profiling permission)."""

from __future__ import annotations

from cudadoctor.checks.holders import holders_fix, is_full, memory_line, others_on
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import Finding, Fix, Status

DOCS_XID = "https://docs.nvidia.com/deploy/xid-errors/index.html"
DOCS_FM = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
DOCS_PROF = "https://developer.nvidia.com/nvidia-development-tools-solutions-err_nvgpuctrperm-permission-issue-performance-counters"
FABRIC = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def _needs_attention(events) -> list:
    """(catalogue row, event) for the events the Xid catalogue does not call informational."""
    if not events:
        return []
    from cudadoctor.matrix.xid import catalogue

    cat = catalogue()
    return [(x, e) for x, e in ((cat.get(e.code), e) for e in events) if x.severity != "info"]


@step("container", "container and device health", order=110,
      facts=("platform", "container", "nvml", "kernel_module", "env", "gpu_processes"))
def check_container(ctx: Context) -> Outcome:
    """Container runtime, MIG, MPS, persistence, compute mode, memory errors, Xid, fabric manager, profiling."""
    cf, nv, km = ctx.fact("container"), ctx.fact("nvml"), ctx.fact("kernel_module")
    c = cf.value
    findings: list = []
    if c is not None and c.kind:
        nodes = [n for n in c.device_nodes if n[len("/dev/nvidia"):].isdigit()]
        findings.append(Finding("container.detected", Status.OK,
                                f"inside a {c.kind} container ({c.evidence}); GPUs exposed: "
                                f"{c.nvidia_visible_devices or 'not set'}; device nodes: {len(nodes)}",
                                evidence={"NVIDIA_VISIBLE_DEVICES": c.nvidia_visible_devices,
                                          "NVIDIA_DRIVER_CAPABILITIES": c.driver_capabilities,
                                          "/dev": c.device_nodes}))
        asked = c.nvidia_visible_devices.strip().lower() not in ("", "void", "none")
        if not nodes and "/dev/dxg" not in c.device_nodes and asked:
            findings.append(Finding(
                "container.no-gpu-nodes", Status.FAIL, "no /dev/nvidiaN device node in this container",
                detail=f"The image asks for GPUs (NVIDIA_VISIBLE_DEVICES={c.nvidia_visible_devices}) but the "
                       "container was started without GPU access (no --gpus / no NVIDIA runtime / no device "
                       "plugin request).",
                fix=Fix("Start it with the NVIDIA container runtime and GPUs.",
                        ("docker run --rm --gpus all <image> nvidia-smi",
                         "kubectl: resources.limits: nvidia.com/gpu: 1"),
                        "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html"),
                evidence={"/dev": c.device_nodes}, affects="every CUDA program"))
    gpus = nv.value.gpus if nv.ok else []
    for g in gpus:
        tag = f"GPU {g.index} ({g.name})"
        if g.mig_mode:
            if not g.mig_devices:
                findings.append(Finding(
                    "health.mig-no-instances", Status.FAIL, f"{tag}: MIG mode is on but no MIG instance exists",
                    detail="With MIG on, CUDA sees only MIG instances; with none, it sees no device on this GPU.",
                    fix=Fix("Create instances, or turn MIG off.",
                            (f"sudo nvidia-smi mig -i {g.index} -cgi 0 -C  # or a profile from: nvidia-smi mig -lgip",
                             f"sudo nvidia-smi -i {g.index} -mig 0"),
                            "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"),
                    evidence={"mig_mode": True, "instances": 0}))
            else:
                findings.append(Finding(
                    "health.mig", Status.OK, f"{tag}: MIG on, {len(g.mig_devices)} instance(s); address them with "
                    "CUDA_VISIBLE_DEVICES=MIG-<uuid>",
                    evidence={d.get("uuid", str(i)): d.get("name", "") for i, d in enumerate(g.mig_devices)}))
        procs = others_on(ctx, g.index)
        findings.extend(memory_findings(ctx, g, tag, procs))
        if g.compute_mode == "Prohibited":
            findings.append(Finding(
                "health.compute-mode-prohibited", Status.FAIL, f"{tag}: compute mode is Prohibited",
                detail="No CUDA context can be created on this GPU ('all CUDA-capable devices are busy or "
                       "unavailable').", fix=Fix("Set the default compute mode.",
                                                 (f"sudo nvidia-smi -i {g.index} -c DEFAULT",)),
                evidence={"compute_mode": g.compute_mode}))
        elif g.compute_mode in ("Exclusive_Process", "Exclusive_Thread") and procs and \
                not (c is not None and c.mps_daemon):
            findings.append(Finding(
                "health.compute-mode-exclusive", Status.WARN,
                f"{tag}: compute mode {g.compute_mode} and {', '.join(p.label() for p in procs)} already uses it",
                detail="Only one process at a time may use this GPU: any other program gets 'CUDA-capable device(s) "
                       "is/are busy or unavailable' at its first CUDA call.",
                fix=holders_fix(ctx, g.index, procs, "your_program"),
                evidence={"compute_mode": g.compute_mode, **{f"PID {p.pid}": p.label() for p in procs}}))
        elif g.compute_mode in ("Exclusive_Process", "Exclusive_Thread"):
            mps = c is not None and c.mps_daemon
            findings.append(Finding(
                "health.compute-mode-exclusive", Status.OK if mps else Status.WARN,
                f"{tag}: compute mode {g.compute_mode}: one process at a time"
                + (" (MPS shares it)" if mps else ""),
                detail="A second process gets 'all CUDA-capable devices are busy or unavailable'.",
                fix=None if mps else Fix("Set the default mode if several processes must share the GPU.",
                                         (f"sudo nvidia-smi -i {g.index} -c DEFAULT",)),
                evidence={"compute_mode": g.compute_mode}))
        if g.persistence_mode is False and not (c is not None and c.kind):
            findings.append(Finding(
                "health.persistence-off", Status.OK,
                f"{tag}: persistence mode is off (the first CUDA call may wait seconds for the driver to load)",
                evidence={"persistence_mode": False}))
        if g.remapped_rows_failure:
            findings.append(Finding(
                "health.remapped-rows-failure", Status.FAIL, f"{tag}: row remapping failed (memory fault)",
                detail="The GPU could not remap a failing memory row: it needs service.",
                fix=Fix("Drain the GPU and contact the vendor (RMA).",
                        (f"nvidia-smi -i {g.index} -q -d ROW_REMAPPER",), DOCS_XID),
                evidence={"remapped_rows_failure": True}))
        pend = [n for n, v in (("retired pages", g.retired_pages_pending), ("remapped rows", g.remapped_rows_pending))
                if v]
        if pend:
            findings.append(Finding(
                "health.reset-pending", Status.WARN, f"{tag}: {' and '.join(pend)} pending: a GPU reset is needed",
                detail="Memory rows/pages were marked bad; they take effect only after a GPU reset or reboot.",
                fix=Fix("Reset the GPU when idle (or reboot).",
                        (f"sudo nvidia-smi -i {g.index} -r", f"nvidia-smi -i {g.index} -q -d PAGE_RETIREMENT,ROW_REMAPPER")),
                evidence={"retired_pages_pending": g.retired_pages_pending,
                          "remapped_rows_pending": g.remapped_rows_pending}))
        if g.ecc_uncorrected_volatile:
            findings.append(Finding(
                "health.ecc-uncorrected", Status.WARN,
                f"{tag}: {g.ecc_uncorrected_volatile} uncorrected ECC error(s) since the driver loaded",
                fix=Fix("Check the details; repeated errors mean the GPU needs service.",
                        (f"nvidia-smi -i {g.index} -q -d ECC",), DOCS_XID),
                evidence={"ecc_uncorrected_volatile": g.ecc_uncorrected_volatile}))
        if g.fabric_state in (1, 2):
            fm = c is not None and c.fabricmanager
            findings.append(Finding(
                "health.fabric-manager", Status.FAIL,
                f"{tag}: NVSwitch fabric {FABRIC[g.fabric_state]}"
                + ("" if fm else "; nv-fabricmanager is not running"),
                detail="On NVSwitch systems CUDA fails with error 802 ('system not yet initialized') until the "
                       "fabric manager has set up the fabric.",
                fix=Fix("Start the fabric manager (its version must match the driver).",
                        ("sudo systemctl enable --now nvidia-fabricmanager", "systemctl status nvidia-fabricmanager"),
                        DOCS_FM),
                evidence={"fabric_state": FABRIC[g.fabric_state], "nv-fabricmanager running": fm}))
    if c is not None and c.nvswitch_nodes and not gpus:
        findings.append(Finding("health.nvswitch", Status.OK, f"{c.nvswitch_nodes} NVSwitch device node(s)"))
    if c is not None and (c.mps_daemon or c.mps_pipe_exists):
        findings.append(Finding(
            "health.mps", Status.OK,
            f"CUDA MPS is {'running' if c.mps_daemon else 'set up'} (pipe {c.mps_pipe_dir}): CUDA programs share "
            "the GPU through it", evidence={"pipe": c.mps_pipe_dir, "daemon": c.mps_daemon}))
    # Xid, judged with the Xid catalogue (matrix/xid.toml) as `cudadoctor health` does
    if c is not None:
        severe = _needs_attention(c.xid_events)
        if severe:
            fail = [(x, e) for x, e in severe if x.severity == "fail"]
            x, e = (fail or severe)[-1]
            findings.append(Finding(
                "health.xid", Status.FAIL if fail else Status.WARN,
                f"Xid {x.code} on {e.pci}: {x.meaning} ({len(severe)} Xid event(s) in the kernel log need attention)",
                detail=f"{x.title}, origin: {x.origin}; NVIDIA's action: {x.action.name}. `cudadoctor health` "
                       "judges every event per GPU.",
                fix=Fix(x.action.text, x.action.commands_for() + ("sudo dmesg -T | grep -i xid | tail -20",),
                        x.sources[0] if x.sources else DOCS_XID),
                evidence={f"Xid {ev.code} {ev.pci}": ev.text for _, ev in severe[-5:]}))
        elif c.xid_events:
            findings.append(Finding(
                "health.xid-app", Status.OK,
                f"{len(c.xid_events)} Xid event(s) in the kernel log, none needing action on the node (Xid catalogue)",
                evidence={f"Xid {e.code} {e.pci}": e.text for e in c.xid_events[-5:]}))
        elif c.xid_error:
            findings.append(Finding("health.xid-unreadable", Status.SKIP,
                                    f"kernel log not readable ({c.xid_error}); Xid errors not checked",
                                    evidence={c.xid_source or "dmesg": c.xid_error}))
    # profiling permission
    if km.ok:
        v = km.value.params.get("RmProfilingAdminOnly")
        root = c is not None and c.is_root
        if v == "1" and not root:
            findings.append(Finding(
                "health.profiling-admin-only", Status.WARN,
                "GPU performance counters are restricted to admins (RmProfilingAdminOnly: 1)",
                detail="Nsight Compute (ncu) and CUPTI profilers fail with ERR_NVGPUCTRPERM for non-root users.",
                fix=Fix("Allow all users (needs a reboot), or profile with sudo.",
                        ("echo 'options nvidia NVreg_RestrictProfilingOnlyToAdminUsers=0' | "
                         "sudo tee /etc/modprobe.d/nvidia-profiling.conf",
                         "sudo update-initramfs -u && sudo reboot",
                         "sudo $(which ncu) ...  # or profile as root"), DOCS_PROF),
                evidence={"/proc/driver/nvidia/params": "RmProfilingAdminOnly: 1"}, affects="ncu, nsys GPU metrics"))
        elif v is not None:
            findings.append(Finding("health.profiling", Status.OK,
                                    "GPU performance counters: "
                                    + ("open to all users" if v == "0" else "admin only, and this is root"),
                                    evidence={"RmProfilingAdminOnly": v}))
    if not findings:
        findings.append(Finding("health.ok", Status.OK if gpus else Status.SKIP,
                                "no device health data" if not gpus else "GPUs healthy"))
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    if bad:
        summary = bad[0].summary
    else:
        where = f"{c.kind} container" if c is not None and c.kind else "no container"
        summary = f"{where}; {len(gpus)} GPU(s) healthy" if gpus else where
    return Outcome(summary, findings)


def memory_findings(ctx: Context, g, tag: str, procs: list) -> list:
    """GPU memory used of total and who uses it (NVML; `procs`: the other processes on it); WARN when other
    processes fill it beyond 90%."""
    line = memory_line(g)
    gp = ctx.fact("gpu_processes")
    who = "; ".join(p.label() for p in procs)
    ev = {f"PID {p.pid}": p.label() for p in procs}
    if not line:
        return []
    if gp.value is None:
        ev["processes"] = f"not known: {gp.error or gp.state.value}"
    if is_full(g) and (procs or gp.value is None or "processes" in g.errors):
        return [Finding(
            "health.gpu-memory-full", Status.WARN,
            f"{tag}: {line} by other processes" + (f": {who}" if who else ""),
            detail="A program started on this GPU now gets 'CUDA error: out of memory' at its first allocations.",
            fix=holders_fix(ctx, g.index, procs, "your_program"), evidence=dict(ev, memory=line))]
    known = gp.value is not None and "processes" not in g.errors
    return [Finding("health.gpu-memory", Status.OK,
                    f"{tag}: {line}" + (f" · {who}" if who else (" · no other process" if known else "")),
                    evidence=dict(ev, memory=line))]
