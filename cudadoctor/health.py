"""`health` end to end, without I/O of its own: facts gathered (the launch child first), steps run,
verdict and report built. The command (commands/health.py) renders and writes."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from cudadoctor import __version__
from cudadoctor.checks import health as checks
from cudadoctor.doctor import node_name, platform_line_of
from cudadoctor.facts.health import DEFAULT_TIMEOUT, gather_health
from cudadoctor.facts.health_types import HealthExpect
from cudadoctor.facts.registry import Options
from cudadoctor.model import Report
from cudadoctor.system.base import System

# dmesg and /proc reads: a short limit of their own (the children get --timeout)
TOOL_TIMEOUT = 10.0


@dataclass
class HealthRun:
    report: Report
    reason: str
    elapsed_s: float


def run_health(system: System, expect: HealthExpect, timeout: float = DEFAULT_TIMEOUT, launch: bool = True,
               strict: bool = False, launch_handle: object = None, t0: float = None) -> HealthRun:
    """`launch_handle`: the launch child, when the caller started it already (system.start)."""
    t0 = time.monotonic() if t0 is None else t0
    opts = Options(timeout_nvml=timeout, timeout_tool=min(timeout, TOOL_TIMEOUT),
                   extra={"launch": launch, "launch_timeout": timeout, "launch_handle": launch_handle})
    facts = gather_health(system, opts, expect)
    steps = checks.run(facts)
    code = checks.verdict(steps, strict)
    host = system.hostname()
    report = Report(
        tool_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        target_python="",  # health inspects no interpreter
        platform=platform_line_of(facts.get("platform")),
        facts=facts, steps=steps, exit_code=code, strict=strict, host=host, node=node_name(system.env, host))
    why = checks.reason(steps, code, strict, facts)
    return HealthRun(report, why, time.monotonic() - t0)
