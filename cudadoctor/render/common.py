"""Pieces shared by the renderers."""

from __future__ import annotations

import os
import sys

from cudadoctor.model import Status

GLYPHS = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗", Status.SKIP: "-", Status.ERROR: "‼"}
ASCII = {Status.OK: "ok", Status.WARN: "!", Status.FAIL: "X", Status.SKIP: "-", Status.ERROR: "!!"}
STYLES = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "dim", Status.ERROR: "magenta"}


def glyph(status: Status, stream=None) -> str:
    enc = (getattr(stream or sys.stdout, "encoding", None) or "").lower()
    return GLYPHS[status] if "utf" in enc else ASCII[status]


def problems(report) -> list:
    """(step number, step, finding) for every WARN/FAIL/ERROR finding, in checklist order."""
    out = []
    for n, st in enumerate(report.steps, 1):
        for f in st.findings:
            if f.status in (Status.WARN, Status.FAIL, Status.ERROR):
                out.append((n, st, f))
    return out


def tally(report) -> str:
    probs = problems(report)
    w = sum(1 for _, _, f in probs if f.status is Status.WARN)
    p = sum(1 for _, _, f in probs if f.status in (Status.FAIL, Status.ERROR))
    return f"{w} warning{'s' if w != 1 else ''}, {p} problem{'s' if p != 1 else ''}"


def wide_console(**kw):
    """A rich Console that wraps at the terminal's width, and not at all when output goes to a file or a pipe:
    there rich assumes 80 columns and would break table rows in the middle of their labels. COLUMNS still wins."""
    from rich.console import Console

    c = Console(**kw)
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        c = Console(width=4096, **kw)
    return c
