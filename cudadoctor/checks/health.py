"""`cudadoctor health`: its steps in order (lowest layer first), the node's verdict and its one-line reason.

The steps are not registered with `check` (they are Step objects listed here, not @step functions):
`health` judges the node alone, without the user's Python. Findings share ids with `check` where they
mean the same (driver.version-mismatch, health.xid, health.remapped-rows-failure, ...).
"""

from __future__ import annotations

from typing import Optional

from cudadoctor.checks.health_common import answering, models
from cudadoctor.checks.health_launch import check_launch
from cudadoctor.checks.health_links import check_clocks, check_fabric, check_mig, check_nvlink
from cudadoctor.checks.health_memory import check_memory, check_xid
from cudadoctor.checks.health_node import check_device_files, check_devices, check_driver, check_persistence
from cudadoctor.checks.registry import Context, Step, run_steps
from cudadoctor.model import Status

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_CANNOT_TELL = 0, 1, 2
VERDICTS = {EXIT_HEALTHY: "healthy", EXIT_UNHEALTHY: "unhealthy", EXIT_CANNOT_TELL: "cannot tell"}
# findings that mean "cudadoctor could not ask", not "the node is fine"
CANNOT_TELL = {"health.nvml-unavailable", "probe.launch.unavailable"}
MAX_REASON = 200  # Slurm keeps a drain reason whole up to here; NPD's message is cut by max_output_length

_GPU = ("health_nvml", "health_expect")
STEPS = (
    Step("driver", "NVIDIA driver", 10, check_driver, ("kernel_module", "health_nvml", "health_launch", "health_expect",
                                                       "userspace_driver", "env")),
    Step("devices", "GPUs", 20, check_devices, _GPU, ("driver",)),
    Step("device-files", "device files", 30, check_device_files, ("device_nodes", "health_nvml", "platform"), ("driver",)),
    Step("persistence", "persistence mode", 40, check_persistence, ("health_nvml", "node_processes", "platform"),
         ("driver",)),
    Step("memory", "memory errors (ECC)", 50, check_memory, _GPU, ("driver",)),
    Step("xid", "Xid events", 60, check_xid, ("xid", "health_nvml")),
    Step("clocks", "clocks and temperature", 70, check_clocks, _GPU, ("driver",)),
    Step("nvlink", "NVLink", 80, check_nvlink, _GPU, ("driver",)),
    Step("fabric", "NVSwitch fabric", 90, check_fabric, ("health_nvml", "node_processes"), ("driver",)),
    Step("mig", "MIG", 100, check_mig, _GPU, ("driver",)),
    Step("launch", "kernel launch", 110, check_launch, ("health_launch", "health_nvml"), ("driver",)),
)


def run(facts: dict) -> list:
    """The health steps on gathered facts (pure: a crashing step is an ERROR result, never an exception)."""
    return run_steps(list(STEPS), facts)


def _findings(steps: list) -> list:
    return [f for st in steps for f in st.findings]


def verdict(steps: list, strict: bool = False) -> int:
    """0 healthy, 1 unhealthy, 2 cannot tell (node-problem-detector's custom-plugin convention: OK,
    NonOK, Unknown). A failure anywhere is unhealthy even if another step could not tell."""
    fs = _findings(steps)
    statuses = {st.status for st in steps} | {f.status for f in fs}
    if Status.FAIL in statuses or (strict and Status.WARN in statuses):
        return EXIT_UNHEALTHY
    if Status.ERROR in statuses or any(f.id in CANNOT_TELL for f in fs):
        return EXIT_CANNOT_TELL
    return EXIT_HEALTHY


def _gpus_of(fs: list) -> str:
    idx = sorted({f.evidence["gpu"] for f in fs if isinstance(f.evidence.get("gpu"), int)})
    return ("GPU " if len(idx) == 1 else "GPUs ") + ",".join(map(str, idx)) if idx else ""


def _part(fid: str, fs: list) -> str:
    codes = sorted({f.evidence["xid"] for f in fs if isinstance(f.evidence.get("xid"), int)})
    where = _gpus_of(fs)
    if codes:
        return f"{fid} " + ",".join(map(str, codes)) + (f" on {where}" if where else "")
    if where and len(fs) > 1:
        return f"{fid} on {where}"
    s = fs[0].summary
    return f"{fid}: {s[:70] + '…' if len(s) > 71 else s}"


def healthy_line(facts: dict) -> str:
    """'2× NVIDIA H200 · driver 580.159.04 · kernels ran on 2 GPU(s)': what a healthy verdict rests on."""
    ctx = Context(facts=facts)
    gs, nv, la = answering(ctx), ctx.fact("health_nvml"), ctx.fact("health_launch")
    parts = [models(gs)] if gs else []
    if nv.value is not None and nv.value.driver_version:
        parts.append(f"driver {nv.value.driver_version}")
    if la.ok:
        parts.append(f"kernels ran on {sum(1 for d in la.value.devices if d.ok)} GPU(s)")
    return " · ".join(parts)


def reason(steps: list, code: int, strict: bool = False, facts: Optional[dict] = None) -> str:
    """One line for a Slurm drain reason or an NPD condition message: the verdict, then what decided it
    (finding ids, grouped, with the GPUs or Xid codes), at most MAX_REASON characters."""
    fs = _findings(steps)
    if code == EXIT_UNHEALTHY:
        bad = [f for f in fs if f.status is Status.FAIL or (strict and f.status is Status.WARN)]
    elif code == EXIT_CANNOT_TELL:
        bad = [f for f in fs if f.status is Status.ERROR or f.id in CANNOT_TELL]
    else:
        bad = [f for f in fs if f.status is Status.WARN]
    groups: dict = {}
    for f in bad:
        groups.setdefault(f.id, []).append(f)
    parts = [_part(fid, g) for fid, g in groups.items()]
    head = VERDICTS[code]
    if code == EXIT_HEALTHY:
        ok = healthy_line(facts or {})
        line = head + (f": {ok}" if ok else "") + (
            f" · warnings: {'; '.join(parts)}" if parts else "")
    else:
        line = f"{head}: {'; '.join(parts)}"
    line = " ".join(line.split())
    return line if len(line) <= MAX_REASON else line[:MAX_REASON - 1] + "…"
