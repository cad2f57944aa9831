"""`cudadoctor health --prometheus`: the Prometheus text exposition format (version 0.0.4), for
node_exporter's textfile collector (https://github.com/prometheus/node_exporter#textfile-collector).

Written by hand: prometheus_client is not a runtime dependency (it would be imported before every job for
a dozen lines of text); the tests parse this output with prometheus_client's own parser. Per-GPU metrics
are labelled gpu (the NVML index), uuid and model. Check status values: 0 ok, 1 warn, 2 fail, 3 error
(a cudadoctor bug), -1 skipped.
"""

from __future__ import annotations

import time

from cudadoctor.model import Status, worst

STATUS_VALUE = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3, Status.SKIP: -1}
CLOCK_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting")
P = "cudadoctor_health_"


def _escape(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in d.items()) + "}" if d else ""


def _num(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


class _Families:
    """Metric families in order; each written once with its HELP and TYPE, then its samples."""

    def __init__(self) -> None:
        self.fams: dict = {}

    def add(self, name: str, help_text: str, labels: dict, value) -> None:
        if value is None:
            return
        fam = self.fams.setdefault(P + name, (help_text, []))
        fam[1].append(f"{P}{name}{_labels(labels)} {_num(value)}")

    def text(self) -> str:
        out = []
        for name, (help_text, samples) in self.fams.items():
            out += [f"# HELP {name} {_escape(help_text)}", f"# TYPE {name} gauge"] + samples
        return "\n".join(out) + "\n"


def _gpu_status(step, index: int) -> Status:
    """A step's status for one GPU: the worst of its findings about that GPU, else the step's own
    status when it judged the node as a whole (skipped, or OK)."""
    mine = [f.status for f in step.findings if f.evidence.get("gpu") == index]
    if mine:
        return worst(mine)
    return Status.SKIP if step.status is Status.SKIP else Status.OK


def render_prometheus(run, now: float = None) -> str:
    report = run.report
    facts = report.facts
    m = _Families()
    m.add("status", "Node verdict: 0 healthy, 1 unhealthy, 2 cannot tell (the exit code of cudadoctor health).",
          {}, report.exit_code)
    nv = facts.get("health_nvml")
    nvml = nv.value if nv is not None else None
    m.add("info", "cudadoctor's version and the driver's, as labels.", {
        "version": report.tool_version, "driver": nvml.driver_version if nvml is not None else ""}, 1)
    m.add("duration_seconds", "Wall time of the health check.", {}, round(run.elapsed_s, 4))
    m.add("last_run_timestamp_seconds", "When the health check ran (Unix time).", {},
          round(time.time() if now is None else now, 3))
    if nvml is not None and (nv.ok or nvml.device_count):
        m.add("gpus", "GPUs NVML lists.", {}, nvml.device_count)
    exp = facts.get("health_expect")
    if exp is not None and exp.value is not None and exp.value.gpus is not None:
        m.add("expected_gpus", "GPUs the node should have (--expect-gpus).", {}, exp.value.gpus)
    for st in report.steps:
        m.add("check_status", "Status of each check for the node: 0 ok, 1 warn, 2 fail, 3 error, -1 skipped.",
              {"check": st.id}, STATUS_VALUE[st.status])
    gpus = list(nvml.gpus) if nvml is not None else []
    launch = facts.get("health_launch")
    launched = {d.uuid: d for d in launch.value.devices} if launch is not None and launch.ok else {}
    xid = facts.get("xid")
    events = xid.value.events if xid is not None and xid.ok else []
    from cudadoctor.checks.health_common import pci_key

    for g in gpus:
        lab = {"gpu": g.index, "uuid": g.uuid, "model": g.name}
        for st in report.steps:
            m.add("gpu_check_status", "Status of each check for one GPU: 0 ok, 1 warn, 2 fail, 3 error, -1 skipped.",
                  dict(lab, check=st.id), STATUS_VALUE[_gpu_status(st, g.index)])
        m.add("gpu_ecc_uncorrected_errors", "Uncorrectable ECC errors: volatile (since the driver loaded) and "
              "aggregate (the GPU's lifetime).", dict(lab, counter="volatile"), g.ecc_uncorrected_volatile)
        m.add("gpu_ecc_uncorrected_errors", "", dict(lab, counter="aggregate"), g.ecc_uncorrected_aggregate)
        rr = list(g.remapped_rows) + [None] * (4 - len(g.remapped_rows))
        m.add("gpu_remapped_rows", "Memory rows remapped, by cause.", dict(lab, cause="correctable"), rr[0])
        m.add("gpu_remapped_rows", "", dict(lab, cause="uncorrectable"), rr[1])
        m.add("gpu_remapped_rows_pending", "1 when a row remap waits for a GPU reset.", lab,
              None if rr[2] is None else bool(rr[2]))
        m.add("gpu_remapped_rows_failure", "1 when a row remap has failed (replace the GPU).", lab,
              None if rr[3] is None else bool(rr[3]))
        m.add("gpu_retired_pages_pending", "1 when a retired page waits for a reset (GPUs before Ampere).", lab,
              g.retired_pages_pending)
        mine = [e for e in events if pci_key(e.pci) is not None and pci_key(e.pci) == pci_key(g.pci_bus_id)]
        m.add("gpu_xid_events", "Xid events in the kernel log since boot (all codes).", lab, len(mine) if xid is not None
              and xid.ok else None)
        for code in sorted({e.code for e in mine}):
            m.add("gpu_xid_events_by_code", "Xid events in the kernel log since boot, by Xid code.",
                  dict(lab, xid=code), sum(1 for e in mine if e.code == code))
        m.add("gpu_temperature_celsius", "GPU temperature.", lab, g.temperature_c)
        m.add("gpu_slowdown_temperature_celsius", "Temperature at which the GPU slows itself down.", lab,
              g.temp_slowdown_c)
        if "clock_events" not in g.errors:
            for r in CLOCK_REASONS:
                m.add("gpu_clock_event_active", "1 when this clock event (throttle) reason is active.",
                      dict(lab, reason=r), r in g.clock_events)
        if g.nvlinks:
            m.add("gpu_nvlinks_active", "NVLink links up.", lab, sum(1 for s in g.nvlinks if s == 1))
            m.add("gpu_nvlinks_inactive", "NVLink links not up.", lab, sum(1 for s in g.nvlinks if s != 1))
        d = launched.get(g.uuid)
        if d is not None:
            m.add("gpu_launch_ok", "1 when the GPU ran cudadoctor's kernel and wrote the right values.", lab, d.ok)
            m.add("gpu_launch_seconds", "Launch latency: cuLaunchKernel to the end of cuCtxSynchronize.", lab, d.launch_s)
            m.add("gpu_launch_total_seconds", "The GPU's whole probe: context, JIT load, launch, copy back.", lab,
                  d.total_s)
    if launch is not None and launch.ok:
        m.add("cuinit_seconds", "cuInit (and loading libcuda) in the launch child.", {}, launch.value.init_s)
    return m.text()
