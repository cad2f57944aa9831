"""The Triton probe: what torch.compile's GPU compiler meets in the target interpreter, from a child process."""

from __future__ import annotations

import os

from cudadoctor.child.records import parse_marked, said_last, stop_reason
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.torch import MARK  # the Triton child writes its records with torch_probe's emit
from cudadoctor.facts.triton_types import CacheFolder, TritonInfo, TritonRun
from cudadoctor.model import Fact
from cudadoctor.settings import env_seconds
from cudadoctor.system.base import System

PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "child", "triton_probe.py")
CACHE_SUBDIR = "triton"  # under cudadoctor's cache: the probe's kernels never land in the user's caches


def _folder(rec) -> CacheFolder | None:
    if not isinstance(rec, dict):
        return None
    return CacheFolder(path=str(rec.get("path") or ""), exists=bool(rec.get("exists")),
                       checked=str(rec.get("checked") or ""), writable=rec.get("writable"),
                       noexec=rec.get("noexec"), relative=bool(rec.get("relative")), env=str(rec.get("env") or ""),
                       user_error=str(rec.get("user_error") or ""))


def wanted(requires: list, env: dict) -> str:
    """The requirement torch's metadata names for this interpreter ('triton==3.6.0'), its PEP 508 markers evaluated
    with the child's values (packaging: a marker it cannot read makes no claim); '' when none applies."""
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    for raw in requires:
        try:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate(dict(env or {}, extra="")):
                continue
        except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            continue
        pins = [sp.version for sp in req.specifier if sp.operator in ("==", "===")]
        return f"{req.name}=={pins[0]}" if pins else req.name
    return ""


def build_info(stages: list) -> TritonInfo:
    t = TritonInfo()
    pending = None
    for rec in stages:
        s = rec.get("stage")
        if s == "begin":
            pending = rec
            continue
        if pending is not None and pending.get("part") == s:
            pending = None
        if s == "python":
            t.python = str(rec.get("executable") or "")
            t.python_version = str(rec.get("version") or "")
        elif s == "import":
            t.installed = bool(rec.get("installed"))
            t.import_error = str(rec.get("import_error") or "")
            t.version = str(rec.get("version") or "")
            t.file = str(rec.get("file") or "")
            t.torch_version = str(rec.get("torch_version") or "")
            reqs = rec.get("torch_requires")
            t.torch_requires = [str(r) for r in reqs] if isinstance(reqs, list) else []
            t.wants = wanted(t.torch_requires, rec.get("marker_env") or {})
            dists = rec.get("dists") if isinstance(rec.get("dists"), dict) else {}
            t.dists = {str(k): str(v) for k, v in dists.items() if v}
            t.wants_have = t.dists.get(t.wants.split("==")[0], "")
        elif s == "static":
            cc = rec.get("compiler") or {}
            t.cc, t.cc_from, t.cc_found = str(cc.get("cc") or ""), str(cc.get("from") or ""), bool(cc.get("found"))
            h = rec.get("headers") or {}
            t.python_include, t.python_h = str(h.get("include") or ""), h.get("python_h")
            lc = rec.get("libcuda") or {}
            t.libcuda_env = str(lc.get("env") or "")
            t.libcuda_ldconfig = [str(x) for x in lc.get("ldconfig") or []]
            t.libcuda_ld_library_path = [str(x) for x in lc.get("ld_library_path") or []]
            t.ldconfig_error = str(lc.get("ldconfig_error") or "")
            caches = rec.get("caches") or {}
            t.triton_cache, t.inductor_cache = _folder(caches.get("triton")), _folder(caches.get("inductor"))
            t.usable = [str(x) for x in rec.get("usable") or []]
        elif s == "run":
            t.run = TritonRun(ok=bool(rec.get("ok")), checked=bool(rec.get("checked")), seconds=rec.get("seconds"),
                              device=str(rec.get("device") or ""), capability=str(rec.get("capability") or ""),
                              error_type=str(rec.get("error_type") or ""), error=str(rec.get("error") or ""),
                              where=str(rec.get("where") or ""), skipped=str(rec.get("skipped") or ""),
                              work=str(rec.get("work") or ""))
        if s in ("python", "import", "static", "run"):
            t.stage = s
    if pending is not None:
        t.stopped_doing = str(pending.get("doing") or "")
    return t


def probe_cache(system: System) -> str:
    base = system.env.get("CUDADOCTOR_CACHE_DIR")
    if not base:
        from cudadoctor.paths import cache_dir

        base = str(cache_dir())
    return os.path.join(base, CACHE_SUBDIR)


def probe_argv(system: System, python: str, gpu_ops: bool = True) -> list:
    """The child's command line: it compiles into a fresh folder of its own under `--cache`, and removes it."""
    return [python, PROBE_SCRIPT] + (["--cache", probe_cache(system)] if gpu_ops else ["--no-run"])


def exclusive_gpus(deps: dict) -> list:
    """GPUs in an exclusive compute mode (NVML): one process at a time may hold them, and cudadoctor's torch probe runs
    beside this one, so its kernel would find the GPU busy (or make the torch probe's op find it busy)."""
    nv = deps.get("nvml")
    if nv is None or not nv.ok:
        return []
    return [g.index for g in nv.value.gpus if "exclusive" in (g.compute_mode or "").lower()]


@gatherer("triton", value_type=TritonInfo, needs=("nvml",))
def gather_triton(system: System, opts: Options, deps: dict) -> Fact:
    """Run the Triton probe in the target interpreter (a kernel compiled into cudadoctor's cache and launched)."""
    py = opts.python or system.own_python()
    exclusive = exclusive_gpus(deps)
    argv = probe_argv(system, py, opts.gpu_ops and not exclusive)
    timeout = env_seconds("CUDADOCTOR_TIMEOUT_TRITON", 120.0)
    res = system.wait(system.start(argv), timeout, until=lambda out: said_last(out, MARK))
    src = f"{py} {os.path.basename(PROBE_SCRIPT)}"
    if res.not_found:
        return Fact.failed(src, f"the target interpreter {py} does not exist")
    if res.error:
        return Fact.failed(src, f"the target interpreter {py} could not start: {res.error}")
    stages = parse_marked(res.stdout, MARK, key="stage")
    info = build_info(stages)
    info.stderr = (res.stderr or "")[-3000:]
    info.run_requested = opts.gpu_ops
    if opts.gpu_ops and exclusive:
        info.run = TritonRun(skipped=f"not run: GPU {', '.join(map(str, exclusive))} is in an exclusive compute mode, "
                                     "held by cudadoctor's torch probe meanwhile")
    done = any(r.get("stage") == "done" for r in stages)
    why = stop_reason(res, "the Triton probe", info.stopped_doing or "starting", "", done, tail=600)
    if why:
        if not info.stopped_doing:
            info.stopped_doing = "starting the interpreter" if not stages else "exiting"
        if res.timed_out:
            return Fact.timeout(src, why, value=info)
        return Fact.failed(src, why, value=info if stages else None)
    if not info.installed:
        return Fact.not_found(src, info.import_error, value=info)
    return Fact(Fact.found(info).state, info, src, "", res.elapsed_s)
