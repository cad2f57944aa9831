"""One verdict per Python environment (`cudadoctor envs`): the torch.cuda, device.capability and
torch.op steps of `check` judge each environment's probe, so an environment's finding is the one
`check --python THAT` would show first.

Verdicts, one word each: works · no-torch · cpu-only · no-gpu (a CUDA build that sees no GPU) ·
unsupported (torch has no kernels for this GPU) · broken (cannot start, import fails, the op fails) ·
hung (the probe timed out) · unknown (a kernel cudadoctor could not resolve to an interpreter).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

from cudadoctor.checks.common import driver_view, q
from cudadoctor.checks.registry import Context, load_all, run_one
from cudadoctor.compat import NATIVE, PTX_JIT, select_image
from cudadoctor.facts.python_envs import torch_fact
from cudadoctor.facts.python_types import PythonEnv
from cudadoctor.model import FactState, Finding, Fix, Status, worst

WORKS, NO_TORCH, CPU_ONLY, NO_GPU, UNSUPPORTED, BROKEN, HUNG, UNKNOWN = (
    "works", "no-torch", "cpu-only", "no-gpu", "unsupported", "broken", "hung", "unknown")
#: verdicts that make `envs --strict` exit 1 (an environment meant for the GPU that cannot use it)
BROKEN_VERDICTS = (NO_GPU, UNSUPPORTED, BROKEN, HUNG, UNKNOWN)
SHARED_FACTS = ("nvidia_smi", "nvml", "kernel_module", "platform")


@dataclass
class EnvVerdict:
    env: PythonEnv
    verdict: str
    finding: Finding
    archs: str = "-"  # "sm_90" (native SASS), "PTX" (JIT only), "none", "-" (nothing to compare)
    findings: tuple = ()  # every finding of the steps that judged it


def archs_cover(ctx: Context) -> str:
    t = ctx.fact("torch").value
    if t is None or not t.installed or not t.cuda or not t.arch_list:
        return "-"
    # the GPUs the capability step judges (as far as CUDA_VISIBLE_DEVICES leaves them to this environment's
    # torch), so the column and the verdict agree; imported here: capability -> torch_cuda -> env_pointer
    # imports this module
    from cudadoctor.checks.capability import torch_devices

    ccs = [cc for _, _, cc in torch_devices(ctx) if cc]
    if not ccs:
        return "-"
    sass = [a for a in t.arch_list if a.startswith("sm_")]
    ptx = [a for a in t.arch_list if a.startswith("compute_")]
    sels = [select_image(sass, ptx, cc) for cc in ccs]
    if any(s.verdict not in (NATIVE, PTX_JIT) for s in sels):
        return "none"
    if any(s.verdict == PTX_JIT for s in sels):
        return "PTX"
    return ",".join(sorted({s.image for s in sels}))


def _unresolved(e: PythonEnv) -> EnvVerdict:
    k = e.kernel
    if k is not None and k.error:
        f = Finding("envs.kernel-unreadable", Status.FAIL, f"kernel {k.name}: {k.error}",
                    "Jupyter cannot start a kernel whose kernel.json it cannot read.",
                    Fix("Look at it, or remove the kernel:", (f"cat {q(k.kernel_json)}",
                                                              f"jupyter kernelspec remove {q(k.name)}")),
                    {"kernel.json": k.kernel_json})
        return EnvVerdict(e, BROKEN, f, findings=(f,))
    how = e.note or "no interpreter found"
    f = Finding("envs.kernel-interpreter-unknown", Status.WARN,
                f"kernel {e.name}: {how}", "cudadoctor checks a kernel by running its Python; this kernel's argv "
                "does not say which one it runs.",
                Fix("Check the interpreter the wrapper starts yourself:",
                    (f"cat {q(k.kernel_json)}" if k else "jupyter kernelspec list",
                     "cudadoctor check --python /path/to/that/python")),
                {"argv": " ".join(k.argv) if k else ""})
    return EnvVerdict(e, UNKNOWN, f, findings=(f,))


def judge_env(e: PythonEnv, shared: dict) -> EnvVerdict:
    """The verdict of one probed environment; `shared` holds the machine's driver facts (SHARED_FACTS are taken
    from it, anything else is ignored)."""
    if not e.probed:
        return _unresolved(e)
    steps = load_all()
    facts = {n: shared[n] for n in SHARED_FACTS if n in shared}
    facts["torch"] = torch_fact(e)
    ctx = Context(facts=facts)
    results = [run_one(steps["torch.cuda"], ctx)]
    t = e.torch
    dv = driver_view(ctx)
    if t is not None and t.available and dv.present:
        results.append(run_one(steps["device.capability"], ctx))
    if t is not None and t.available and t.op is not None:
        results.append(run_one(steps["torch.op"], ctx))
    findings = tuple(f for r in results for f in r.findings)
    status = {r.id: r.status for r in results}
    state = FactState(e.torch_state)
    if state is FactState.TIMEOUT:
        verdict = HUNG
    elif Status.ERROR in status.values():
        verdict = BROKEN
    elif state is FactState.NOT_FOUND:
        verdict = NO_TORCH
    elif state is not FactState.FOUND or t is None or t.import_error:
        verdict = BROKEN
    elif t.cpu_only:
        verdict = CPU_ONLY
    elif not t.available:
        verdict = NO_GPU
    elif status.get("device.capability") is Status.FAIL:
        verdict = UNSUPPORTED
    elif Status.FAIL in status.values():
        verdict = BROKEN
    else:
        verdict = WORKS
    top = worst((f.status for f in findings), Status.OK)
    finding = next((f for f in findings if f.status is top), findings[0] if findings else None)
    if finding is None:
        finding = Finding("envs.no-finding", Status.ERROR, "no step judged this environment")
    finding = blame_overrides(finding, e)
    return EnvVerdict(e, verdict, finding, archs_cover(ctx), tuple(blame_overrides(f, e) for f in findings))


def judge_all(envs: list, shared: dict) -> list:
    return [judge_env(e, shared) for e in envs]


def exit_code(rows: list, strict: bool = False) -> int:
    """0: an environment can use the GPU (and, with --strict, none is broken); 1: otherwise; 2: a crash."""
    if any(r.finding.status is Status.ERROR for r in rows):
        return 2
    if not any(r.verdict == WORKS for r in rows):
        return 1
    if strict and any(r.verdict in BROKEN_VERDICTS for r in rows):
        return 1
    return 0


# ---- a finding caused by a variable the environment sets itself (kernel.json "env", conda env vars)


def mentions(f: Finding, var: str) -> bool:
    return var in f.summary or var in f.evidence or var.lower().replace("_", "-") in f.id


def override_fix(var: str, value: str, source: str, e: PythonEnv) -> Optional[Fix]:
    if e.kernel is not None and source == e.kernel.kernel_json:
        edit = (f"python3 -c \"import json; p={source!r}; d=json.load(open(p)); d['env'].pop({var!r}); "
                f"json.dump(d, open(p, 'w'), indent=1)\"")
        return Fix(f"{var}={value!r} comes from the \"env\" of the kernel's kernel.json, not from your shell: "
                   f"remove it there (or set it to what you want), then restart the kernel:",
                   (edit, f"cat {q(source)}"))
    if source.endswith("conda-meta/state (conda env config vars)"):
        name = e.name if e.name and "/" not in e.name else ""
        target = f"-n {q(name)}" if name else f"-p {q(e.prefix)}"
        return Fix(f"{var}={value!r} is one of the conda environment's own variables (set by `conda activate`):",
                   (f"conda env config vars unset {var} {target}", f"conda env config vars list {target}"))
    return None


def blame_overrides(f: Finding, e: PythonEnv) -> Finding:
    """Point a WARN/FAIL finding about a variable at the file that sets it for this environment, and a
    kernel whose interpreter is gone at the kernel."""
    if f.status not in (Status.WARN, Status.FAIL):
        return f
    k = e.kernel
    if k is not None and f.id == "torch.cuda.python-missing":
        return dataclasses.replace(f, fix=Fix(
            f"The kernel {k.name} runs {k.interpreter or e.python}, which does not exist (its environment was removed "
            f"or moved): remove the kernel, or register it again from an environment that exists:",
            (f"jupyter kernelspec remove {q(k.name)}",
             f"/path/to/env/bin/python -m ipykernel install --user --name {q(k.name)}",
             "cudadoctor envs  # the environments here, and which one has torch with CUDA")),
            evidence={**f.evidence, "kernel.json": k.kernel_json})
    if not e.env:
        return f
    for var, value in e.env.items():
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var) and mentions(f, var):
            fix = override_fix(var, value, e.env_source, e)
            if fix is not None:
                return dataclasses.replace(f, fix=fix, evidence={**f.evidence, f"{var} set by": e.env_source})
    return f
