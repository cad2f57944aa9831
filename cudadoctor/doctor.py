"""`check` end to end, without I/O of its own: steps chosen, facts gathered, steps run, report built."""

from __future__ import annotations

import datetime
import os
import platform as _platform
import sys
from typing import Iterable, Optional

from cudadoctor import __version__
from cudadoctor.checks import registry as checks
from cudadoctor.facts import registry as facts
from cudadoctor.model import Report, Status
from cudadoctor.system.base import System

EXIT_OK, EXIT_FAIL, EXIT_CRASH = 0, 1, 2


def exit_code(steps: list, strict: bool = False) -> int:
    statuses = {s.status for s in steps}
    for s in steps:
        statuses.update(f.status for f in s.findings)
    if Status.ERROR in statuses:
        return EXIT_CRASH
    if Status.FAIL in statuses or (strict and Status.WARN in statuses):
        return EXIT_FAIL
    return EXIT_OK


# Where the node's name comes from, first set wins: an explicit name (the Kubernetes manifests set it
# from the downward API's spec.nodeName), then Slurm's name for the node the task runs on.
NODE_NAME_VARS = ("CUDADOCTOR_NODE_NAME", "SLURMD_NODENAME")


def node_name(env, hostname: str) -> str:
    for var in NODE_NAME_VARS:
        v = (env.get(var) or "").strip()
        if v:
            return v
    return hostname


def platform_line_of(plat) -> str:
    """'Linux x86_64 · Ubuntu 24.04.3 LTS · docker container' from the platform fact."""
    if plat is None or plat.value is None:
        return f"{_platform.system()} {_platform.machine()}"
    pv = plat.value
    return f"{pv.system} {pv.machine}" + (f" · {pv.distro}" if pv.distro else "") + (
        " · WSL2" if pv.is_wsl and pv.wsl_version == 2 else (" · WSL1" if pv.is_wsl else "")) + (
        f" · {pv.container} container" if pv.container else "")


def run_check(system: System, opts: Optional[facts.Options] = None, only: Iterable[str] = (),
              skip: Iterable[str] = (), strict: bool = False, given_facts: Optional[dict] = None,
              source: str = "live") -> Report:
    opts = opts or facts.Options()
    steps = checks.ordered(only, skip)
    names = checks.needed_facts(steps) + ["platform"]
    if given_facts is not None:
        from cudadoctor.facts.saved import with_not_saved

        gathered = with_not_saved(given_facts, names)
    else:
        gathered = facts.gather(system, names, opts)
    results = checks.run_steps(steps, gathered)
    t = gathered.get("torch")
    target = (t.value.python if t is not None and t.value is not None and t.value.python else "") or (
        opts.python or system.own_python())
    platform_line = platform_line_of(gathered.get("platform"))
    host = system.hostname()
    return Report(
        host=host,
        node=node_name(system.env, host),
        tool_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        target_python=target,
        platform=platform_line,
        facts=gathered,
        steps=results,
        exit_code=exit_code(results, strict),
        strict=strict,
        source=source,
    )


def python_version_of(report: Report) -> str:
    t = report.facts.get("torch")
    if t is not None and t.value is not None and t.value.python_version:
        return t.value.python_version
    if report.target_python and os.path.realpath(report.target_python) != os.path.realpath(sys.executable):
        return ""  # another interpreter that did not say: never show cudadoctor's own version for it
    return sys.version.split()[0]


# ---------------------------------------------------------------- saved reports, judged with today's rules

def steps_missing_facts(only, skip, given: dict) -> dict:
    """step id -> [its primary fact] for steps whose primary fact (the first it declares) a saved
    report lacks (made with --only, or by an older cudadoctor). Such steps are not judged: without
    it a step would misjudge (no torch fact reads as "torch not installed"). Steps missing only a
    secondary fact are judged with what there is: that fact reads "not in saved report"."""
    return {st.id: [st.facts[0]] for st in checks.ordered(only, skip) if st.facts and st.facts[0] not in given}


def unjudged_step(st, names: list):
    from cudadoctor.model import Finding, StepResult

    summary = f"not judged: the saved report has no {', '.join(names)} fact"
    return StepResult(st.id, st.title, Status.SKIP, summary, (
        Finding(f"{st.id}.not-in-saved-report", Status.SKIP, summary,
                detail="The report was made with --only/--skip or by an older cudadoctor that did not gather it.",
                evidence={"missing facts": ", ".join(names)}),))


def with_unjudged(judged: list, only, skip, unjudged: dict) -> list:
    """The judged steps, and the steps that were not judged (see steps_missing_facts) in their place, as SKIP."""
    done = {st.id: st for st in judged}
    steps = []
    for st in checks.ordered(only, skip):
        if st.id in done:
            steps.append(done[st.id])
        elif st.id in unjudged:
            steps.append(unjudged_step(st, unjudged[st.id]))
    return steps


def add_unjudged(report, only, skip, unjudged: dict, strict: bool) -> None:
    """Put the steps that were not judged (see steps_missing_facts) back in the report, as SKIP."""
    report.steps = with_unjudged(report.steps, only, skip, unjudged)
    report.exit_code = exit_code(report.steps, strict)


def judge_saved(saved_facts: dict, only: Iterable[str] = ()) -> tuple:
    """(steps, exit code): today's verdicts on a saved report's (upgraded) facts, for the steps `only` (all when
    empty) that still exist; a step whose primary fact the report lacks is not judged."""
    from cudadoctor.facts.saved import with_not_saved

    known = checks.load_all()
    only = [i for i in only if i in known]
    unjudged = steps_missing_facts(only, (), saved_facts)
    todo = [s for s in checks.ordered(only) if s.id not in unjudged]
    judged = checks.run_steps(todo, with_not_saved(saved_facts, checks.needed_facts(todo)))
    steps = with_unjudged(judged, only, (), unjudged)
    return steps, exit_code(steps)
