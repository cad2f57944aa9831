"""Point to the environment that works: when `check`'s target has no torch or a CPU-only one, and
another environment of this machine has a torch that uses the GPU (the `other_envs` fact), the
torch.cuda finding names it and says how to use it: run that interpreter, or register it as the
Jupyter kernel the user runs.
"""

from __future__ import annotations

import dataclasses
import re

from cudadoctor.checks.common import q
from cudadoctor.checks.envs_verdict import WORKS, judge_env
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.model import Fix, Status

POINTED = ("torch.cuda.not-installed", "torch.cuda.cpu-only")
IPYKERNEL_DOCS = "https://ipython.readthedocs.io/en/stable/install/kernel_install.html"


def working_envs(ctx: Context) -> list:
    """The other environments whose torch uses the GPU, in the order they were found."""
    f = ctx.fact("other_envs")
    if not f.ok:
        return []
    return [v.env for v in (judge_env(e, ctx.facts) for e in f.value.envs) if v.verdict == WORKS]


def kernel_name(env, target_kernel: str) -> str:
    if target_kernel:
        return target_kernel
    base = env.name if env.name and "/" not in env.name else (env.prefix.rstrip("/").split("/")[-1] or "torch")
    name = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-.") or "torch"
    return "torch-cuda" if name in (".venv", "venv", "env") else name


def pointer_fix(env, target_kernel: str, old: Fix) -> Fix:
    py = env.python
    t = env.torch
    name = kernel_name(env, target_kernel)
    cmds = [f"{q(py)} your_script.py"]
    if env.has_ipykernel is not True:
        cmds.append(f"{q(py)} -m pip install ipykernel")
    cmds.append(f"{q(py)} -m ipykernel install --user --name {q(name)} --display-name {q(f'Python ({name})')}")
    if target_kernel:
        text = (f"Make the kernel {target_kernel} run {py} (torch {t.version}): re-register it from that "
                f"environment, then restart the kernel:")
    else:
        text = (f"Run your program with {py} (torch {t.version}), or register that environment as a Jupyter "
                f"kernel and pick it in the notebook:")
    return Fix(text, tuple(cmds) + tuple(c for c in (old.commands if old else ()) if c not in cmds), IPYKERNEL_DOCS)


def with_working_env(ctx: Context, outcome: Outcome) -> Outcome:
    """The torch.cuda outcome, its not-installed / cpu-only finding pointed at a working environment."""
    alts = working_envs(ctx)
    if not alts:
        return outcome
    best = alts[0]
    target_kernel = ctx.fact("other_envs").value.target_kernel
    where = f"torch with CUDA is in {best.where} ({best.label})"
    out = []
    for f in outcome.findings:
        if f.id in POINTED:
            ev = dict(f.evidence)
            ev["working environments"] = "; ".join(
                f"{e.python} ({e.label}, torch {e.torch.version})" for e in alts[:3])
            f = dataclasses.replace(f, summary=f"{f.summary}; {where}", fix=pointer_fix(best, target_kernel, f.fix),
                                    evidence=ev, status=Status.WARN if f.status is Status.SKIP else f.status)
        out.append(f)
    return Outcome(f"{outcome.summary}; {where}", out, outcome.status)

