"""Scenarios for `cudadoctor health`: FakeSystems of the real 2x H200 machine (tests/data/h200x2) and
faults made from it.

The NVML child's answer is what cudadoctor/system/nvml_health.py's collect() prints against a fake pynvml
built from the real NVML dump (tests/fakes/nvml_health.py); the kernel log is the real dmesg capture; /dev
and /proc/driver/nvidia/version are the real listings. The launch child's records are assembled here in
cudadoctor's own format, with the recon's timings (cuInit ~0.41 s, a primary context 0.10-0.14 s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fakes import nvml_health
from fakes.system import FakeCmd, FakeSystem

from cudadoctor.facts.health_launch import LAUNCH_MARK, launch_argv
from cudadoctor.system.nvml_health import collect

DATA = Path(__file__).parent / "data" / "h200x2"
PY = "/opt/torch/.venv/bin/python3"
NVML_ARGV = (PY, "-m", "cudadoctor.system.nvml_health")


def recorded(name: str) -> str:
    """A capture without its `$ command` first line and `rc=... wall_ms=...` last line."""
    lines = (DATA / name).read_text().splitlines()
    return "\n".join(ln for ln in lines[1:] if not re.match(r"rc=\d+ wall_ms=", ln)) + "\n"


def proc_version() -> str:
    line = next(ln for ln in recorded("sys.txt").splitlines() if ln.startswith("NVRM version:"))
    return line + "\nGCC version:  gcc version 15.3.0 (GCC) \n"


def dev_nodes() -> list:
    """/dev/nvidia* of sys.txt's `ls -la /dev/nvidia*` (nvidia-caps is a folder)."""
    return sorted({m.group(1) for m in re.finditer(r"(/dev/nvidia[\w-]*)", recorded("sys.txt"))} - {"/dev/nvidia-caps"})


def dmesg_text() -> str:
    """The real kernel log lines (NVRM, no Xid) of xid.txt."""
    return "\n".join(ln for ln in recorded("xid.txt").splitlines() if ln.startswith("[")) + "\n"


def xid_line(code: int, bus: str = "0000:00:06", text: str = "", ts: float = 5123.25) -> str:
    """An Xid line as the driver prints it (NVIDIA Xid docs; e.g. 'NVRM: Xid (PCI:0000:3b:00): 79, pid=...')."""
    return f"[{ts:12.6f}] NVRM: Xid (PCI:{bus}): {code}, pid=4242, name=python3, {text or 'test event'}\n"


def launch_records(count: int = 2, devices=None, init_error=None, done: bool = True, init_s: float = 0.41) -> str:
    """The launch child's stdout: init, one record per device, done."""
    recs = [{"stage": "init", "init_s": init_s, "libcuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
             "visible_devices": None}]
    if init_error is not None:
        recs[0]["error"] = init_error
    else:
        recs[0].update(driver_version=13000, count=count)
        for i in range(count):
            d = {"stage": "device", "ordinal": i, "ok": True, "step": "done", "uuid": nvml_health.UUIDS[i % 2]
                 if i < 2 else f"GPU-00000000-0000-0000-0000-00000000000{i}", "pci_bus_id": f"0000:00:0{6 + i}.0",
                 "name": "NVIDIA H200", "cc": "9.0", "context_s": 0.12, "load_s": 0.004, "launch_s": 0.00004,
                 "wrong": 0, "total_s": 0.13}
            d.update((devices or {}).get(i, {}))
            if d is not None and not d.get("missing"):
                recs.append(d)
        if done:
            recs.append({"stage": "done", "total_s": init_s + 0.14})
    return "noise from a library\n" + "".join(LAUNCH_MARK + json.dumps(r) + "\n" for r in recs)


def h200x2(gpus=None, dmesg: str = None, nodes=None, launch: FakeCmd = None, nvml: FakeCmd = None,
           processes=(), km: str = None, env=None, container: bool = False,
           init_error: str = "") -> FakeSystem:
    """The healthy 2x H200 node; pass changed parts to make a fault."""
    gpus = nvml_health.dump_gpus() if gpus is None else gpus
    files = {"/proc/driver/nvidia/version": proc_version() if km is None else km,
             "/etc/os-release": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\n'}
    if km == "":
        del files["/proc/driver/nvidia/version"]
    for n in (dev_nodes() if nodes is None else nodes):
        files[n] = b""
    for i, comm in enumerate(processes, start=100):
        files[f"/proc/{i}/comm"] = comm + "\n"
    files["/proc/1/comm"] = "init\n"
    if container:
        files["/.dockerenv"] = b""
    fs = FakeSystem(env=env or {"PATH": "/usr/bin:/bin"}, files=files, python=PY, hang_sleep=0.01, host="gpu7")
    fs.add_exe("/usr/bin/dmesg", FakeCmd(stdout=dmesg_text() if dmesg is None else dmesg))
    fs.on(NVML_ARGV, nvml or FakeCmd(stdout=json.dumps(collect(nvml_health.make(gpus, init_error=init_error)))))
    fs.on(launch_argv(PY), launch or FakeCmd(stdout=launch_records(len(gpus))))
    return fs
