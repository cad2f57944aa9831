"""The torch probe: what the target interpreter's torch sees, from a child process.

Stages are separate answers: what a stage finished stays true when a later one dies. A probe that
answered `is_available()` and then died or hung is a FOUND fact whose `value.stopped*` fields (and
`error`) say why and in what; the checks attribute the death to the step that owns that stage.
"""

from __future__ import annotations

import os
import re

from cudadoctor.child.records import parse_marked, said_last, stop_reason
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.types import CudnnInfo, OpResult, TorchDevice, TorchInfo
from cudadoctor.model import Fact, FactState
from cudadoctor.system.base import System

MARK = "@@CUDADOCTOR@@"
PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "child", "torch_probe.py")

#: what the child was doing after it reported each stage, when it did not say (0.1.0's probe never did)
NEXT_ACTIVITY = {
    "": "starting the interpreter",
    "python": "import torch",
    "import": "torch.cuda.is_available() (CUDA initialisation)",
    "cuda": "reading device properties",
    "init": "reading device properties",
    "devices": "the minimal GPU op (torch.ones(1).cuda() and a 64x64 matmul)",
    "cudnn": "the minimal GPU op (torch.ones(1).cuda() and a 64x64 matmul)",
    "op": "reading the loaded libraries",
    "conv": "reading the loaded libraries",
    "libs": "exiting",
}
#: the part that follows each stage, for the same case
NEXT_PART = {"": "python", "python": "import", "import": "cuda", "cuda": "devices", "devices": "op",
             "init": "devices", "cudnn": "op", "maps": "op", "op": "libs", "conv": "libs", "libs": "exit"}
#: the stage record that completes each `begin` part
COMPLETES = {"limit_retry": "limit_retry", "import": "import", "cuda": "cuda", "init": "init", "devices": "devices", "cudnn": "cudnn",
             "op.ones": "op", "op.matmul": "op", "conv": "conv", "libs": "libs"}
#: stages that count as the child's progress (records such as "begin" and "maps" do not move it)
PROGRESS = ("python", "import", "cuda", "init", "devices", "cudnn", "op", "conv", "libs")


def probe_done(out: bytes) -> bool:
    """The probe's stdout ends with its whole "done" record (nothing it says after that matters)."""
    return said_last(out, MARK)


def parse_stages(stdout: str) -> list:
    return parse_marked(stdout, MARK, key="stage")


def _op(rec: dict) -> OpResult:
    return OpResult(ok=bool(rec.get("ok")), seconds=rec.get("seconds"), error_type=rec.get("error_type") or "",
                    error=rec.get("error") or "", checked=bool(rec.get("checked")), part=rec.get("part") or "",
                    skipped=rec.get("skipped") or "")


def _more_warnings(t: TorchInfo, rec: dict) -> None:
    t.warnings.extend(w for w in rec.get("warnings") or [] if w not in t.warnings)


def build_info(stages: list) -> TorchInfo:
    t = TorchInfo()
    pending = None  # the last `begin` record whose stage has not been reported yet
    maps: list = []
    for rec in stages:
        s = rec.get("stage")
        if s == "begin":
            pending = rec
            continue
        if pending is not None and COMPLETES.get(pending.get("part")) == s:
            pending = None
        if s == "python":
            t.python = rec.get("executable") or ""
            t.python_version = rec.get("version") or ""
            t.prefix = rec.get("prefix") or ""
            t.visible_devices = rec.get("visible_devices")
            t.pid = rec.get("pid") if isinstance(rec.get("pid"), int) else None
            lim = rec.get("rlimits") if isinstance(rec.get("rlimits"), dict) else {}
            t.address_space_limit = lim.get("as") if isinstance(lim.get("as"), int) else None
            t.data_limit = lim.get("data") if isinstance(lim.get("data"), int) else None
        elif s == "import":
            t.installed = bool(rec.get("installed"))
            t.import_error = rec.get("import_error") or ""
            pk = rec.get("nvidia_packages")
            t.nvidia_packages = {str(k): str(v) for k, v in pk.items()} if isinstance(pk, dict) else {}
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
            _more_warnings(t, rec)
        elif s == "init":
            if not rec.get("ok"):
                t.first_use_error_type = rec.get("error_type") or ""
                t.first_use_error = f"{t.first_use_error_type}: {rec.get('error') or ''}".strip(": ")
            _more_warnings(t, rec)
        elif s == "limit_retry":
            t.limit_retry_ok = rec.get("ok") if rec.get("made") and isinstance(rec.get("ok"), bool) else None
            t.limit_retry = (f"raised {', '.join(rec.get('raised') or [])}" + (f": {rec.get('error')}" if
                             rec.get("error") and not rec.get("ok") else "")) if rec.get("made") else str(
                rec.get("why") or "")
        elif s == "devices":
            for d in rec.get("devices") or []:
                if d.get("error") and not d.get("capability"):
                    continue  # reading this device raised: nothing known about it from torch
                t.devices.append(TorchDevice(
                    index=d.get("index", 0), name=d.get("name", ""), capability=d.get("capability", ""),
                    total_memory_mib=d.get("total_memory_mib"),
                    multi_processor_count=d.get("multi_processor_count"), uuid=d.get("uuid", "")))
            _more_warnings(t, rec)
        elif s == "cudnn":
            t.cudnn = CudnnInfo(available=rec.get("available"), compiled=rec.get("compiled") or "",
                                runtime=rec.get("runtime") or "",
                                version=rec.get("version") if isinstance(rec.get("version"), int) else None,
                                version_error=rec.get("version_error") or "", error=rec.get("error") or "")
        elif s == "maps":
            maps = list(rec.get("libraries") or [])
        elif s == "op":
            t.op = _op(rec)
            _more_warnings(t, rec)
        elif s == "conv":
            t.conv = _op(rec)
            _more_warnings(t, rec)
        elif s == "libs":
            t.libraries = list(rec.get("libraries") or [])
            if "cudnn_version" in rec:
                t.cudnn_version = rec.get("cudnn_version")
            t.nccl_version = rec.get("nccl_version") or ""
        if s in PROGRESS:
            t.stage = s
    if not t.libraries and maps:
        t.libraries = maps  # it died after the op began: what was loaded then
    if pending is not None:
        t.stopped_part = str(pending.get("part") or "").split(".")[0]
        t.stopped_doing = str(pending.get("doing") or "")
    return t


def stop_kind(res, crash: str) -> str:
    if res.timed_out:
        return "timeout"
    if crash:
        return "crash"
    if res.signal_name:
        return "signal"
    return "no-report"


def answered_cuda(t) -> bool:
    """The probe got past torch.cuda.is_available(): torch's own answers up to there stand."""
    return isinstance(t, TorchInfo) and t.installed and not t.import_error and t.available is not None


def settle(fact: Fact, kind: str) -> Fact:
    """A probe that stopped early (`fact.error` says why) after torch answered is_available(): FOUND, with the
    stop kept in the value (stopped, stopped_kind, stopped_part, stopped_doing) for the step that owns it.
    Other facts are returned as they are."""
    t = fact.value
    if fact.state not in (FactState.FAILED, FactState.TIMEOUT) or not answered_cuda(t) or not fact.error:
        return fact
    t.stopped = fact.error
    t.stopped_kind = t.stopped_kind or kind
    if not t.stopped_part:
        t.stopped_part = NEXT_PART.get(t.stage, t.stage)
    if not t.stopped_doing:
        t.stopped_doing = NEXT_ACTIVITY.get(t.stage, t.stage)
    return Fact(FactState.FOUND, t, fact.source, fact.error, fact.elapsed_s)


RE_SIGNAL = re.compile(r"killed by (SIG[A-Z0-9]+)")


def kind_from_text(state: FactState, error: str) -> str:
    """The stop kind of a saved report (0.1.0 kept only the stop reason's text)."""
    if state is FactState.TIMEOUT:
        return "timeout"
    if RE_SIGNAL.search(error or ""):
        return "signal"
    if " failed while " in (error or ""):
        return "crash"
    return "no-report"


def target_python(system: System, opts: Options) -> str:
    return opts.python or system.own_python()


@gatherer("torch", value_type=TorchInfo)
def gather_torch(system: System, opts: Options, deps: dict) -> Fact:
    """Run the torch probe in the target interpreter."""
    py = target_python(system, opts)
    argv = [py, PROBE_SCRIPT] + ([] if opts.gpu_ops else ["--no-op"])
    # the answer is whole at the "done" record: the child's exit (torch and CUDA torn down) is not waited for
    res = system.wait(system.start(argv), opts.timeout_torch, until=probe_done)
    src = f"{py} {os.path.basename(PROBE_SCRIPT)}"
    if res.not_found:
        return Fact.failed(src, f"the target interpreter {py} does not exist")
    if res.error:
        return Fact.failed(src, f"the target interpreter {py} could not start: {res.error}")
    stages = parse_stages(res.stdout)
    info = build_info(stages)
    names = [r.get("stage") for r in stages]
    doing = info.stopped_doing or NEXT_ACTIVITY.get(info.stage, info.stage)
    crash = next((r.get("error", "") for r in stages if r.get("stage") == "crash"), "")
    why = stop_reason(res, "the torch probe", doing, crash, "done" in names, tail=600)
    if why:
        if res.timed_out:
            fact = Fact.timeout(src, why, value=info)
        else:
            fact = Fact.failed(src, why, value=info if stages else None)
        return settle(Fact(fact.state, fact.value, fact.source, fact.error, res.elapsed_s), stop_kind(res, crash))
    if not info.installed:
        return Fact.not_found(src, info.import_error, value=info)
    return Fact.found(info, src, res.elapsed_s)
