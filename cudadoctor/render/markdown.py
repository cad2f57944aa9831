"""A Markdown block to paste into a bug report: redacted, user/home/host names hidden."""

from __future__ import annotations

from cudadoctor.model import Status
from cudadoctor.redact import Redactor
from cudadoctor.render.common import problems, tally

MD_GLYPH = {Status.OK: "✅", Status.WARN: "⚠️", Status.FAIL: "❌", Status.SKIP: "➖", Status.ERROR: "💥"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report, env, user: str = "", host: str = "") -> str:
    scrub = Redactor(env, hide_identity=True, user=user, host=host)
    lines = [
        "<details><summary>cudadoctor check</summary>",
        "",
        f"cudadoctor {report.tool_version} · {report.platform} · Python `{report.target_python}`",
        "",
        "| # | step | status | summary |",
        "|---|------|--------|---------|",
    ]
    for n, st in enumerate(report.steps, 1):
        lines.append(f"| {n} | {st.title} (`{st.id}`) | {MD_GLYPH[st.status]} {st.status.value} | {_cell(st.summary)} |")
    probs = problems(report)
    if probs:
        lines += ["", "**Findings**", ""]
        for n, st, f in probs:
            lines.append(f"- {MD_GLYPH[f.status]} **{n} {st.title}** `{f.id}`: {f.summary}")
            if f.detail:
                lines.append(f"  - why: {f.detail}")
            if f.fix:
                lines.append(f"  - fix: {f.fix.text}")
                for c in f.fix.commands:
                    lines.append(f"    - `{c}`")
    facts = report.facts
    key = []
    for name in ("nvidia_smi", "torch", "toolkit"):
        f = facts.get(name)
        if f is not None:
            key.append(f"- `{name}`: {f.state.value}" + (f" ({f.error[:160]})" if f.error else ""))
    if key:
        lines += ["", "**Facts**", ""] + key
    lines += ["", f"{tally(report)} · exit code {report.exit_code}", "", "</details>"]
    return scrub("\n".join(lines))
