"""Fixtures of the fault-injection suite (the kit itself is faultkit.py)."""

from __future__ import annotations

import pytest
from faultkit import MARGIN, TIMINGS, Faults


@pytest.fixture
def faults(tmp_path, request):
    f = Faults(tmp_path, request)
    yield f
    f.cleanup()


def pytest_terminal_summary(terminalreporter):
    if not TIMINGS:
        return
    tr = terminalreporter
    tr.write_sep("-", f"fault injection: {len(TIMINGS)} CLI runs")
    el, lim, case = max((e, li, c) for c, e, li in TIMINGS)
    tr.write_line(f"slowest: {case}: {el:.1f} s (limit {lim:g} s + {MARGIN:g} s margin)")
    for case, el, lim in sorted(TIMINGS, key=lambda t: t[1] / t[2], reverse=True)[:3]:
        tr.write_line(f"closest to its limit: {case}: {el:.1f} s of {lim:g} s ({el / lim:.0%})")
