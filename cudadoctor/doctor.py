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
        gathered = dict(given_facts)
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
