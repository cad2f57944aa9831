"""The torch probe: what the target interpreter's torch sees, from a child process."""

from __future__ import annotations

import os

from cudadoctor.child.records import parse_marked, stop_reason
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.types import OpResult, TorchDevice, TorchInfo
from cudadoctor.model import Fact
from cudadoctor.system.base import System

MARK = "@@CUDADOCTOR@@"
PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "child", "torch_probe.py")

#: what the child was doing after it reported each stage (for hangs and crashes)
NEXT_ACTIVITY = {
    "": "starting the interpreter",
    "python": "import torch",
    "import": "torch.cuda.is_available() (CUDA initialisation)",
    "cuda": "reading device properties",
    "devices": "the minimal GPU op (torch.ones(1).cuda() and a 64x64 matmul)",
    "op": "reading the loaded libraries",
    "libs": "exiting",
}


def parse_stages(stdout: str) -> list:
    return parse_marked(stdout, MARK, key="stage")


def build_info(stages: list) -> TorchInfo:
    t = TorchInfo()
    for rec in stages:
        s = rec.get("stage")
        if s == "python":
            t.python = rec.get("executable") or ""
            t.python_version = rec.get("version") or ""
            t.prefix = rec.get("prefix") or ""
            t.visible_devices = rec.get("visible_devices")
        elif s == "import":
            t.installed = bool(rec.get("installed"))
            t.import_error = rec.get("import_error") or ""
            t.import_s = rec.get("import_s")
            if rec.get("not_found"):
                t.installed = False
            elif t.import_error:
                t.installed = True  # present but broken
            t.version = rec.get("version") or ""
            t.cuda = rec.get("cuda")
            t.hip = rec.get("hip")
            t.git = rec.get("git") or ""
            t.file = rec.get("file") or ""
            t.debug = rec.get("debug")
            t.arch_list = list(rec.get("arch_list") or [])
            t.warnings.extend(rec.get("warnings") or [])
        elif s == "cuda":
            t.available = rec.get("available")
            t.device_count = rec.get("device_count")
            t.init_error = rec.get("init_error") or ""
            t.warnings.extend(w for w in rec.get("warnings") or [] if w not in t.warnings)
        elif s == "devices":
            for d in rec.get("devices") or []:
                t.devices.append(TorchDevice(
                    index=d.get("index", 0), name=d.get("name", ""), capability=d.get("capability", ""),
                    total_memory_mib=d.get("total_memory_mib"),
                    multi_processor_count=d.get("multi_processor_count"), uuid=d.get("uuid", "")))
            t.warnings.extend(w for w in rec.get("warnings") or [] if w not in t.warnings)
        elif s == "op":
            t.op = OpResult(ok=bool(rec.get("ok")), seconds=rec.get("seconds"),
                            error_type=rec.get("error_type") or "", error=rec.get("error") or "",
                            checked=bool(rec.get("checked")))
            t.warnings.extend(w for w in rec.get("warnings") or [] if w not in t.warnings)
        elif s == "libs":
            t.libraries = list(rec.get("libraries") or [])
            if "cudnn_version" in rec:
                t.cudnn_version = rec.get("cudnn_version")
            t.nccl_version = rec.get("nccl_version") or ""
        t.stage = s if s not in ("done", "crash") else t.stage
    return t


def target_python(system: System, opts: Options) -> str:
    return opts.python or system.own_python()


@gatherer("torch", value_type=TorchInfo)
def gather_torch(system: System, opts: Options, deps: dict) -> Fact:
    """Run the torch probe in the target interpreter."""
    py = target_python(system, opts)
    argv = [py, PROBE_SCRIPT] + ([] if opts.gpu_ops else ["--no-op"])
    res = system.run(argv, timeout=opts.timeout_torch)
    src = f"{py} {os.path.basename(PROBE_SCRIPT)}"
    if res.not_found:
        return Fact.failed(src, f"the target interpreter {py} does not exist")
    if res.error:
        return Fact.failed(src, f"the target interpreter {py} could not start: {res.error}")
    stages = parse_stages(res.stdout)
    info = build_info(stages)
    names = [r.get("stage") for r in stages]
    doing = NEXT_ACTIVITY.get(info.stage, info.stage)
    crash = next((r.get("error", "") for r in stages if r.get("stage") == "crash"), "")
    why = stop_reason(res, "the torch probe", doing, crash, "done" in names, tail=600)
    if why:
        if res.timed_out:
            return Fact.timeout(src, why, value=info)
        return Fact.failed(src, why, value=info if stages else None)
    if not info.installed:
        return Fact.not_found(src, info.import_error, value=info)
    return Fact.found(info, src, res.elapsed_s)
