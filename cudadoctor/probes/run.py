"""Run the probes from the parent: build, launch in a child, compare with the compatibility rule.

Parent side only: the driver API and the runtime-API programs run in child processes with
timeouts (system.run). Each row of the result is one build: the images actually in the artifact
(read back with the fatbin reader), what compat.select_image predicts on this GPU, what the GPU
did through the driver API and through the runtime API, and whether prediction and reality agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.child.records import parse_marked
from cudadoctor.compat import (
    NATIVE,
    NO_IMAGE,
    PTX_JIT,
    PTX_TOO_NEW,
    cc_str,
    parse_arch,
    sass_runs_on,
    select_for_binary,
)
from cudadoctor.settings import env_seconds
from cudadoctor.probes import build as B
from cudadoctor.probes import fatbin
from cudadoctor.probes.launch import MARK

LAUNCH_TIMEOUT = env_seconds("CUDADOCTOR_TIMEOUT_PROBE", 120.0)
RUNTIME_TIMEOUT = 60.0
DEVICE_TIMEOUT = min(30.0, LAUNCH_TIMEOUT)

ERROR_VERDICTS = {209: NO_IMAGE, 222: PTX_TOO_NEW}


@dataclass
class Row:
    name: str
    purpose: str
    flags: str
    sass: list = field(default_factory=list)
    ptx: list = field(default_factory=list)
    predicted: str = ""
    predicted_image: str = ""
    driver_api: str = ""  # observed through cuModuleLoadData/cuLaunchKernel
    driver_error: str = ""
    cuda_arch: Optional[int] = None
    runtime_api: str = ""  # observed through the runtime-API program
    runtime_error: str = ""
    build_error: str = ""
    cached: bool = False

    @property
    def match(self) -> Optional[bool]:
        seen = [o for o in (self.driver_api, self.runtime_api) if o in (NATIVE, PTX_JIT, NO_IMAGE, PTX_TOO_NEW)]
        if not self.predicted or not seen:
            return None
        return all(o == self.predicted for o in seen)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["match"] = self.match
        return d


@dataclass
class ProbeResult:
    cc: Optional[tuple] = None
    cc_source: str = ""  # "device" or "--cc"
    device: dict = field(default_factory=dict)
    compiler: str = ""
    compiler_path: str = ""
    compiler_error: str = ""
    launch_error: str = ""  # why nothing was launched (no driver, no GPU, timeout)
    launch_kind: str = ""  # launch_child's failure kind ("" when the child reported)
    rows: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    # nvcc answered --version but could not build (a toolkit problem, not a launch one): "PATH: its error";
    # the builds were then made with NVRTC where one was found
    nvcc_failure: str = ""
    nvcc_failure_path: str = ""

    @property
    def mismatches(self) -> list:
        return [r for r in self.rows if r.match is False]

    def to_dict(self) -> dict:
        return {"cc": cc_str(self.cc) if self.cc else None, "cc_source": self.cc_source, "device": self.device,
                "compiler": self.compiler, "compiler_path": self.compiler_path,
                "compiler_error": self.compiler_error, "launch_error": self.launch_error,
                "launch_kind": self.launch_kind, "nvcc_failure": self.nvcc_failure,
                "nvcc_failure_path": self.nvcc_failure_path,
                "builds": [r.to_dict() for r in self.rows], "kernels": self.kernels,
                "mismatches": [r.name for r in self.mismatches]}


def parse_records(stdout: str) -> list:
    return parse_marked(stdout or "", MARK)


def launch_child(system, plan: dict, timeout: float) -> tuple:
    """(records, error text, failure kind). Kinds: "" (it reported), "no-libcuda", "cuda-error" (cuInit or
    device query failed), "timeout", "crashed" (killed by a signal), "no-report" (no records of ours)."""
    r = system.run([system.own_python(), "-m", "cudadoctor.probes.launch"], timeout=timeout,
                   input_bytes=json.dumps(plan).encode())
    recs = parse_records(r.stdout)
    if r.timed_out:
        return recs, f"the driver-API probe gave no answer within {timeout:g} s", "timeout"
    fatal = next((x for x in recs if x.get("type") == "fatal"), None)
    if fatal:
        e = fatal.get("error") or {}
        text = f"{fatal.get('stage', '')}: {e.get('name', '')}: {e.get('message', '')}".strip(": ")
        kind = "no-libcuda" if e.get("name") == "no-libcuda" else ("cuda-error" if "code" in e else "no-report")
        return recs, text, kind
    if not any(x.get("type") == "done" for x in recs):
        why = f"the driver-API probe ended without a report: {r.describe()} {(r.stderr or '')[-400:]}".strip()
        return recs, why, "crashed" if r.signal_name else "no-report"
    return recs, "", ""


def device_info(system, timeout: float = DEVICE_TIMEOUT) -> tuple:
    """({name, cc, driver_cuda, ...}, error, failure kind) from the driver API, without building anything."""
    recs, err, kind = launch_child(system, {"builds": []}, timeout)
    dev = next((x for x in recs if x.get("type") == "device"), None)
    return (dev or {}), ("" if dev else (err or "no device record")), ("" if dev else (kind or "no-report"))


def observed_from(rec: dict, sass: list, cc: tuple) -> tuple:
    """(verdict, error text) from a launch record."""
    if rec.get("ok"):
        return ran_verdict(sass, cc, rec.get("cuda_arch")), ""
    e = rec.get("error") or {}
    code = e.get("code")
    text = f"{e.get('call', '')} -> {code} {e.get('name', '')}".strip()
    if code in ERROR_VERDICTS:
        return ERROR_VERDICTS[code], text
    if rec.get("result_ok") is False:
        return "wrong-result", "the kernel ran but wrote wrong values"
    return f"error:{e.get('name') or code}", text


def ran_verdict(sass: list, cc: tuple, cuda_arch: Optional[int] = None) -> str:
    """A build that ran: native when a SASS image fits (and matches __CUDA_ARCH__ if known), else PTX JIT."""
    for s in sass:
        a = parse_arch(s)
        if a and sass_runs_on(a, cc) and (cuda_arch is None or cuda_arch == a.major * 100 + a.minor * 10):
            return NATIVE
    return PTX_JIT


def runtime_observed(system, exe: str, sass: list, cc: tuple, timeout: float = RUNTIME_TIMEOUT) -> tuple:
    r = system.run([exe], timeout=timeout)
    if r.timed_out:
        return "timeout", f"the runtime-API program gave no answer within {timeout:g} s"
    try:
        d = json.loads((r.stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "error", f"no result: {r.describe()}"
    code = d.get("code")
    text = f"{d.get('stage')}: {code} {d.get('name', '')}"
    if code == 0 and d.get("sync_code") == 0 and d.get("result_ok"):
        return ran_verdict(sass, cc), ""
    if code in ERROR_VERDICTS:
        return ERROR_VERDICTS[code], text
    return f"error:{d.get('name') or code}", text


def build_rows(system, comp, cc: tuple, judge_cc: tuple, driver_cuda, quick: bool, kernels_dir: str,
               use_cache: bool, cache_dir: Optional[str]) -> list:
    """[(Row, Built)] for the planned builds of `cc`, each read back and predicted for `judge_cc`."""
    builds = []
    for spec in B.plan(cc, comp, quick=quick):
        built = B.build(system, comp, spec, kernels_dir, use_cache=use_cache, cache_dir=cache_dir)
        if built.unsupported:
            continue  # e.g. no sm_XYa for this cc in this compiler
        row = Row(spec.name, spec.purpose, " ".join(spec.nvcc_flags()), cached=built.cached)
        if built.ok:
            try:
                arch = fatbin.read_file(system, built.path)
                row.sass, row.ptx = arch.sass, arch.ptx
                sel = select_for_binary(arch.sass, arch.ptx, judge_cc, driver_cuda, arch.ptx_isa())
                row.predicted, row.predicted_image = sel.verdict, sel.image
            except fatbin.BinaryFormatError as e:
                row.build_error = f"cudadoctor could not read its own build: {e}"
        else:
            row.build_error = built.error
        builds.append((row, built))
    return builds


def run_probes(system, cc: Optional[tuple] = None, use_cache: bool = True, quick: bool = False,
               kernels: bool = True, runtime: bool = True, compiler_pref: str = "auto",
               site_packages: Optional[list] = None, kernels_dir: Optional[str] = None,
               cache_dir: Optional[str] = None, launch: bool = True) -> ProbeResult:
    res = ProbeResult()
    dev, dev_err, res.launch_kind = device_info(system) if launch else ({}, "not asked to launch", "not-asked")
    res.device = dev
    dev_cc = tuple(int(x) for x in dev["cc"].split(".")) if dev.get("cc") else None
    if dev_err:
        res.launch_error = dev_err
    res.cc, res.cc_source = (tuple(cc), "--cc") if cc else (dev_cc, "device" if dev_cc else "")
    if res.cc is None:
        return res
    comp, why = B.pick_compiler(system, compiler_pref, site_packages)
    if comp is None:
        res.compiler_error = why
        return res
    res.compiler, res.compiler_path = comp.label, comp.path
    if kernels_dir is None:
        from cudadoctor.paths import data_dir

        kernels_dir = str(data_dir("probe_kernels"))
    judge_cc = dev_cc or res.cc  # what the GPU did is judged against the GPU that did it
    driver_cuda = dev.get("driver_cuda")
    builds = build_rows(system, comp, res.cc, judge_cc, driver_cuda, quick, kernels_dir, use_cache, cache_dir)
    if comp.kind == "nvcc" and builds and all(b.compiler_failed and not b.ok for _, b in builds):
        # nvcc answers --version but cannot build: that is the toolkit's failure, not the GPU's. Say so, and
        # test the launch with NVRTC where there is one (only when no compiler was asked for by name).
        native = next((b for row, b in builds if row.name == "native"), builds[0][1])
        res.nvcc_failure, res.nvcc_failure_path = native.error, comp.path
        other = B.pick_compiler(system, "nvrtc", site_packages)[0] if compiler_pref == "auto" else None
        if other is not None:
            comp = other
            res.compiler, res.compiler_path = comp.label, comp.path
            builds = build_rows(system, comp, res.cc, judge_cc, driver_cuda, quick, kernels_dir, use_cache, cache_dir)
    res.rows = [row for row, _ in builds]
    kpaths = {}
    if kernels and dev_cc and not res.launch_error:
        for spec in B.kernel_specs(dev_cc):
            kb = B.build(system, comp, spec, kernels_dir, use_cache=use_cache, cache_dir=cache_dir)
            if kb.ok:
                kpaths[spec.name] = kb.path
            else:
                res.kernels.append({"name": spec.name, "ok": False, "error": {"name": "build", "message": kb.error}})
    if dev_cc and not res.launch_error:
        plan = {"builds": [{"name": row.name, "path": b.path} for row, b in builds if b.ok], "kernels": kpaths}
        recs, err, res.launch_kind = launch_child(system, plan, LAUNCH_TIMEOUT)
        res.launch_error = err
        by_name = {x.get("name"): x for x in recs if x.get("type") == "build"}
        for row, _ in builds:
            rec = by_name.get(row.name)
            if rec:
                row.driver_api, row.driver_error = observed_from(rec, row.sass, dev_cc)
                row.cuda_arch = rec.get("cuda_arch")
        res.kernels += [x for x in recs if x.get("type") == "kernel"]
        if runtime:
            for row, b in builds:
                if not b.ok:
                    continue
                hb = B.build_host_program(system, comp, b.spec, kernels_dir, use_cache=use_cache, cache_dir=cache_dir)
                if not hb.ok:
                    row.runtime_error = hb.error
                    continue
                try:
                    exe_arch = fatbin.read_file(system, hb.path)
                    sass = exe_arch.sass
                except fatbin.BinaryFormatError:
                    sass = row.sass
                row.runtime_api, row.runtime_error = runtime_observed(system, hb.path, sass, dev_cc)
    return res



@dataclass
class LaunchInfo:
    """The quick probe as a fact (`probe_launch`): plain data so saved reports load back."""

    cc: str = ""
    device: str = ""
    driver_cuda: str = ""
    compiler: str = ""
    compiler_error: str = ""
    launch_error: str = ""
    launch_kind: str = ""
    rows: list = field(default_factory=list)  # Row.to_dict() per build
    nvcc_failure: str = ""  # nvcc answered --version but could not build: its error, verbatim
    nvcc_failure_path: str = ""
    compiler_path: str = ""

    @classmethod
    def from_result(cls, res: ProbeResult) -> "LaunchInfo":
        return cls(cc_str(res.cc) if res.cc else "", res.device.get("name", ""), res.device.get("driver_cuda", ""),
                   res.compiler, res.compiler_error, res.launch_error, res.launch_kind,
                   [r.to_dict() for r in res.rows], res.nvcc_failure, res.nvcc_failure_path, res.compiler_path)
