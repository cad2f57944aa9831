"""Small helpers for check tests: run the checklist on a FakeSystem and index the results."""

from __future__ import annotations

from cudadoctor.doctor import run_check
from cudadoctor.facts.registry import Options


def check(system, only=(), skip=(), **opt):
    opts = Options(timeout_smi=opt.pop("timeout_smi", 10.0), timeout_torch=opt.pop("timeout_torch", 120.0),
                   python=opt.pop("python", None))
    report = run_check(system, opts, only, skip)
    return report


def steps(report) -> dict:
    return {s.id: s for s in report.steps}


def ids(report) -> dict:
    """finding id -> status value, over every step."""
    return {f.id: f.status.value for s in report.steps for f in s.findings}


def status(report) -> dict:
    return {s.id: s.status.value for s in report.steps}
