"""`cudadoctor health` for a person (a line per step, then each problem with its fix) and as JSON.

Plain text, not rich: health runs before every job, and rich's import would cost more than the rest of
the parent process (the console renderer of `check` uses it). Colour only on a terminal, not with NO_COLOR.
"""

from __future__ import annotations

import json
import sys

from cudadoctor.model import Status
from cudadoctor.redact import Redactor
from cudadoctor.render.common import glyph, problems
from cudadoctor.render.json_report import scrub_tree

ANSI = {Status.OK: "32", Status.WARN: "33", Status.FAIL: "31", Status.SKIP: "2", Status.ERROR: "35"}


def _colour(env, out) -> bool:
    return not env.get("NO_COLOR") and hasattr(out, "isatty") and out.isatty()


def render_health_text(run, env, verbose: bool = False, file=None) -> None:
    out = file or sys.stdout
    report = run.report
    scrub = Redactor(env)
    colour = _colour(env, out)

    def paint(text: str, status: Status) -> str:
        return f"\033[{ANSI[status]}m{text}\033[0m" if colour else text

    lines = [f"cudadoctor {report.tool_version} health · {report.node} · {report.platform}", ""]
    width = max((len(s.title) for s in report.steps), default=10) + 2
    for n, st in enumerate(report.steps, 1):
        timing = f"  [{st.elapsed_s * 1000:.0f} ms]" if verbose else ""
        lines.append(f"{n:>2} {paint(glyph(st.status, out), st.status)} {st.title.ljust(width)} {st.summary}{timing}")
    for n, st, f in problems(report):
        lines += ["", f"{paint(glyph(f.status, out), f.status)} {n} {st.title}: {f.summary}  ({f.id})"]
        if f.detail:
            lines.append(f"    {f.detail}")
        if f.fix:
            lines.append(f"  fix: {f.fix.text}")
            lines += [f"       {c}" for c in f.fix.commands]
            if f.fix.docs:
                lines.append(f"       docs: {f.fix.docs}")
        if verbose:
            lines += [f"    evidence · {k}: {v}" for k, v in f.evidence.items() if k != "traceback"]
    if verbose:
        lines += ["", "facts:"]
        for name, fact in sorted(report.facts.items()):
            el = f"{fact.elapsed_s:.3f} s" if fact.elapsed_s is not None else "-"
            lines.append(f"  {name}: {fact.state.value} in {el} · {fact.source[:90]}"
                         + (f" · {fact.error[:140]}" if fact.error else ""))
    lines += ["", f"{run.reason}  [{run.elapsed_s:.2f} s, exit {report.exit_code}]"]
    out.write(scrub("\n".join(lines)) + "\n")


def health_dict(run) -> dict:
    """The report schema (report-1.json) plus what health adds: command, reason, elapsed_s."""
    d = run.report.to_dict()
    d["command"] = "health"
    d["reason"] = run.reason
    d["elapsed_s"] = round(run.elapsed_s, 4)
    return d


def render_health_json(run, env) -> str:
    return json.dumps(scrub_tree(health_dict(run), Redactor(env)), indent=2, ensure_ascii=False)
