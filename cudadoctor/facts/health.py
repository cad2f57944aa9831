"""`cudadoctor health`'s facts: the driver-API launch child, NVML, device files, the kernel log, processes.

`gather_health` starts the launch child FIRST (cuInit and a context per GPU are most of health's time),
then asks everything else while it runs, each in its own thread with its own timeout.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from cudadoctor.child.records import parse_marked, said_last, stop_reason
from cudadoctor.facts.driver import NVML_SOURCE, nvml_child  # also registers kernel_module
from cudadoctor.facts import environment as _environment  # noqa: F401 - registers platform
from cudadoctor.facts.health_launch import LAUNCH_MARK, launch_argv
from cudadoctor.facts.health_types import (
    CudaCallError,
    DeviceNodes,
    HealthExpect,
    HealthGpu,
    LaunchDevice,
    LaunchInfo,
    NodeProcesses,
    NvmlHealth,
    XidEvent,
    XidLog,
)
from cudadoctor.facts.registry import REGISTRY, Options, _call, gatherer
from cudadoctor.model import Fact, from_jsonable
from cudadoctor.system.base import System

# "[  123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (dmesg); the
# time stamp is absent with `dmesg -t` or in journal text
RE_XID = re.compile(r"(?:\[\s*(\d+\.\d+)\])?.*?NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\):\s*(\d+),?\s*(.*)")
MAX_XID = 200  # events kept (the newest)
MAX_PROCS = 4000
DEFAULT_TIMEOUT = 20.0


def launch_done(out: bytes) -> bool:
    """The launch child's stdout holds its final, whole "done" record."""
    return said_last(out, LAUNCH_MARK)


def launch_timeout(opts: Options) -> float:
    return float(opts.extra.get("launch_timeout", DEFAULT_TIMEOUT))


@gatherer("health_launch", value_type=LaunchInfo)
def gather_launch(system: System, opts: Options, deps: dict) -> Fact:
    """A kernel on every GPU through the driver API, in one child with a time limit."""
    if not opts.extra.get("launch", True):
        return Fact.not_applicable("--no-launch", "the kernel launch was not asked for (--no-launch)")
    src = "driver API (libcuda.so.1): probes/health_launch.py"
    # started already by the command when it could (opts.extra["launch_handle"]), else now
    handle = opts.extra.get("launch_handle") or system.start(launch_argv(system.own_python()))
    # the answer is complete at the child's "done" record: its exit (the contexts' release) is not waited for
    res = system.wait(handle, launch_timeout(opts), until=launch_done)
    if not res.started:
        return Fact.failed(src, res.describe())
    recs = parse_marked(res.stdout, LAUNCH_MARK, key="stage")
    info = LaunchInfo()
    for rec in recs:
        if rec["stage"] == "init":
            info.init_s, info.libcuda = rec.get("init_s"), rec.get("libcuda", "")
            info.visible_devices = rec.get("visible_devices")
            info.count = rec.get("count") if isinstance(rec.get("count"), int) else None
            v = rec.get("driver_version")
            info.cuda_version = f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) else ""
            info.error = _call_error(rec.get("error"))
        elif rec["stage"] == "device":
            dev = from_jsonable(LaunchDevice, rec)
            if isinstance(dev, LaunchDevice) and isinstance(dev.ordinal, int):
                dev.error = _call_error(rec.get("error"))
                info.devices.append(dev)
        elif rec["stage"] == "done":
            info.total_s = rec.get("total_s")
    info.devices.sort(key=lambda d: d.ordinal)
    finished = any(r["stage"] == "done" for r in recs) or info.error is not None
    doing = "initialising CUDA (cuInit)" if not any(r["stage"] == "init" for r in recs) else (
        "launching on GPU(s) " + ", ".join(str(i) for i in missing_ordinals(info)))
    info.stopped = stop_reason(res, "the kernel launch", doing, finished=finished)
    info.timed_out = res.timed_out
    return Fact.found(info, src, res.elapsed_s)


def _call_error(raw):
    """A CUDA error record as the child prints it (CudaError.to_dict()), or None."""
    if raw is None:
        return None
    err = from_jsonable(CudaCallError, raw)
    return err if isinstance(err, CudaCallError) else CudaCallError(code=-1, name="UNREADABLE", message=str(raw)[:200])


def missing_ordinals(info: LaunchInfo) -> list:
    seen = {d.ordinal for d in info.devices}
    return [i for i in range(info.count or 0) if i not in seen]


@gatherer("health_nvml", value_type=NvmlHealth)
def gather_nvml_health(system: System, opts: Options, deps: dict) -> Fact:
    """NVML (nvidia-ml-py) in a child with a timeout: only what health judges."""
    src = NVML_SOURCE
    raw, failed, elapsed = nvml_child(system, opts, "cudadoctor.system.nvml_health")
    if failed is not None:
        return failed
    info = NvmlHealth(error=str(raw.get("error") or ""), message=str(raw.get("message") or ""),
                      driver_version=str(raw.get("driver_version") or ""),
                      device_count=int(raw.get("device_count") or 0),
                      gpus=[g for g in (from_jsonable(HealthGpu, x) for x in raw.get("gpus") or [])
                            if isinstance(g, HealthGpu)])
    if info.error:
        return Fact.failed(src, f"{info.error}: {info.message}", value=info)
    return Fact.found(info, src, elapsed)


@gatherer("device_nodes", value_type=DeviceNodes)
def gather_device_nodes(system: System, opts: Options, deps: dict) -> Fact:
    """The NVIDIA device files in /dev (nvidiactl, nvidia-uvm, nvidiaN, nvidia-nvswitchN)."""
    found = DeviceNodes(nodes=["/dev/" + n for n in system.listdir("/dev") if n.startswith("nvidia")])
    # permissions only (os.access): opening a device file could block on a wedged GPU
    found.denied = [n for n in found.nodes if (n in ("/dev/nvidiactl", "/dev/nvidia-uvm") or n in found.gpu_files())
                    and system.access_error(n) == "EACCES"]
    return Fact.found(found, "/dev")


def parse_xid_log(text: str) -> list:
    out = []
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        m = RE_XID.search(line)
        if m:
            out.append(XidEvent(code=int(m.group(3)), pci=m.group(2), text=m.group(4).strip()[:200],
                                ts=float(m.group(1)) if m.group(1) else None))
    return out


@gatherer("xid", value_type=XidLog)
def gather_xid(system: System, opts: Options, deps: dict) -> Fact:
    """Xid events in the kernel log since boot (dmesg; often root-only: kernel.dmesg_restrict)."""
    dmesg = system.which("dmesg") or next((p for p in ("/bin/dmesg", "/usr/bin/dmesg") if system.is_executable(p)), "")
    if not dmesg:
        return Fact.not_found("dmesg", "dmesg not found")
    res = system.run([dmesg], opts.timeout_tool)
    if res.timed_out:
        return Fact.timeout(dmesg, f"dmesg gave no answer within {res.timeout_s:g} s (killed)")
    if not res.ok:
        why = (res.output.strip().splitlines() or [res.describe()])[-1][:300]
        return Fact.failed(dmesg, why)
    events = parse_xid_log(res.stdout)
    return Fact.found(XidLog(source=dmesg, events=events[-MAX_XID:], lines=res.stdout.count("\n")), dmesg,
                      res.elapsed_s)


def process_names(system: System) -> list:
    """The names (/proc/PID/comm, which the kernel cuts at 15 characters) of at most MAX_PROCS processes, one
    per process listed ('' for one that could not be read). Also check's container fact's."""
    pids = [p for p in system.listdir("/proc") if p.isdigit()][:MAX_PROCS]
    return [(system.read_text(f"/proc/{pid}/comm", limit=64) or "").strip() for pid in pids]


@gatherer("node_processes", value_type=NodeProcesses)
def gather_node_processes(system: System, opts: Options, deps: dict) -> Fact:
    """nvidia-persistenced and nv-fabricmanager among the running processes (/proc/*/comm)."""
    names = process_names(system)
    info = NodeProcesses(scanned=len(names))
    for comm in names:
        if comm.startswith("nvidia-persist"):  # comm is cut at 15 characters: nvidia-persiste
            info.persistenced = True
        elif comm.startswith("nv-fabricmanage"):
            info.fabricmanager = True
    if not info.scanned:
        return Fact.failed("/proc", "no process could be listed", value=info)
    return Fact.found(info, "/proc/*/comm")


def nvml_disagrees(nv, km_ver: str) -> bool:
    """NVML says its library and the kernel module are of different drivers (its own error, or its version)."""
    return nv is not None and (nv.error == "NVML_ERROR_LIB_RM_VERSION_MISMATCH" or bool(
        km_ver and nv.driver_version and nv.driver_version != km_ver))


#: health's facts, the launch first: it is the longest, everything else runs while it does
HEALTH_FACTS = ("health_launch", "health_nvml", "kernel_module", "device_nodes", "xid", "node_processes", "platform")


def gather_health(system: System, opts: Options, expect: HealthExpect) -> dict:
    """Every fact health judges, concurrently. Never raises (a crashing gatherer is a FAILED fact)."""
    with ThreadPoolExecutor(max_workers=len(HEALTH_FACTS)) as pool:
        futures = {n: pool.submit(_call, REGISTRY[n], system, opts, {}) for n in HEALTH_FACTS}
        facts = {n: f.result() for n, f in futures.items()}
    facts["health_expect"] = Fact.found(expect, "command line")
    km = facts["kernel_module"]
    if nvml_disagrees(facts["health_nvml"].value, km.value.version if km.ok else ""):
        # only on a version mismatch, off the healthy path: which libnvidia-ml the loader picks, since a copy first on
        # LD_LIBRARY_PATH is not fixed by the reboot that a mismatch of the driver's own files needs
        for n in ("ldconfig", "userspace_driver", "env"):
            facts[n] = _call(REGISTRY[n], system, opts, facts)
    return facts
