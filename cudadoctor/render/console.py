"""The console report, in the spirit of `flutter doctor`: a line per step, then each problem with its fix."""

from __future__ import annotations

import sys

from cudadoctor.model import Status
from cudadoctor.redact import Redactor
from cudadoctor.render.common import STYLES, glyph, problems, tally


def _secs(secs: float) -> str:
    return f"{secs:.2f} s" if secs >= 0.01 else f"{secs * 1000:.0f} ms"


def fact_time(report, step_id: str) -> str:
    """How long the step's facts took to gather (judging takes milliseconds; gathering is the time that counts):
    its main fact, and the slowest other one it reads when that took longer ('libs 0.05 s; torch 3.68 s')."""
    from cudadoctor.checks.registry import load_all

    step = load_all().get(step_id)
    timed = [(name, f.elapsed_s) for name in (step.facts if step is not None else ())
             for f in (report.facts.get(name),) if f is not None and f.elapsed_s is not None]
    if not timed:
        return "no fact gathered"
    main = timed[0]
    slow = max(timed, key=lambda x: x[1])
    out = f"{main[0]} {_secs(main[1])}"
    return out + (f"; {slow[0]} {_secs(slow[1])}" if slow[1] > main[1] and slow[0] != main[0] else "")


def render_console(report, env, verbose: bool = False, python_version: str = "", file=None) -> None:
    from rich.console import Console
    from rich.markup import escape

    out = file or sys.stdout
    console = Console(file=out, highlight=False, soft_wrap=True, emoji=False)
    scrub = Redactor(env)

    def say(text: str = "", style: str = "") -> None:
        console.print(escape(scrub(text)) if not style else f"[{style}]{escape(scrub(text))}[/{style}]")

    head = f"cudadoctor {report.tool_version} · {report.platform}"
    head += f" · Python {python_version} ({report.target_python})" if python_version else (
        f" · target interpreter {report.target_python}")
    if report.source != "live":
        head += f" · re-judged from {report.source}"
    say(head, "bold")
    say()
    width = max((len(s.title) for s in report.steps), default=10) + 2
    for n, st in enumerate(report.steps, 1):
        g = glyph(st.status, out)
        line = f"{n:>2} {g} {st.title.ljust(width)} {st.summary}"
        if verbose:
            line += f"  [{fact_time(report, st.id)}]"
        console.print(f"[{STYLES[st.status]}]{escape(scrub(f'{n:>2} {g}'))}[/{STYLES[st.status]}]"
                      + escape(scrub(line[len(f'{n:>2} {g}'):])))
    probs = problems(report)
    for n, st, f in probs:
        say()
        console.print(f"[{STYLES[f.status]}]{escape(glyph(f.status, out))} {n} {escape(st.title)}:[/] "
                      f"{escape(scrub(f.summary))}  [dim]({escape(f.id)})[/dim]")
        if f.detail:
            say(f"    {f.detail}")
        if f.fix:
            say(f"  fix: {f.fix.text}", "bold")
            for c in f.fix.commands:
                say(f"       {c}", "cyan")
            if f.fix.docs:
                say(f"       docs: {f.fix.docs}", "dim")
        if verbose and f.evidence:
            for k, v in f.evidence.items():
                if k == "traceback":
                    continue
                say(f"    evidence · {k}: {v}", "dim")
    if verbose:
        say()
        say("evidence and timings:", "bold")
        for n, st in enumerate(report.steps, 1):
            for f in st.findings:
                if f.status in (Status.OK, Status.SKIP):
                    for k, v in f.evidence.items():
                        say(f"  {n} {st.id} · {k}: {v}", "dim")
        for name, fact in sorted(report.facts.items()):
            el = f"{fact.elapsed_s:.2f} s" if fact.elapsed_s is not None else "-"
            err = f" · {fact.error[:140]}" if fact.error else ""
            say(f"  fact {name}: {fact.state.value} in {el} · {fact.source[:100]}{err}", "dim")
    say()
    tail = f"{tally(report)}"
    if report.exit_code and report.strict and not any(f.status is Status.FAIL for _, _, f in probs):
        tail += " (--strict: warnings count)"
    say(f"{tail} · details: cudadoctor check -v · share: cudadoctor check --markdown")
