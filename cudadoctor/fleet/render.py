"""The fleet summary for people: a console table and a Markdown block.

Node names are shown (they are what an admin acts on); secrets are scrubbed as in every output.
Long node lists are cut to MAX_NAMES with "+N more" (`--json` always has them all).
"""

from __future__ import annotations

import json
import sys

from cudadoctor import __version__
from cudadoctor.redact import Redactor

MAX_NAMES = 12


def names(nodes: list, limit: int = MAX_NAMES) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" +{len(nodes) - limit} more" if len(nodes) > limit else "")


def render_json(summary, env) -> str:
    from cudadoctor.render.json_report import scrub_tree

    return json.dumps(scrub_tree(summary.to_dict(), Redactor(env)), indent=2, ensure_ascii=False)


def _rows(summary) -> list:
    """(dimension title, value, count, nodes-or-"", is_majority) for the comparison table."""
    rows = []
    for d in summary.dimensions:
        m = d.majority
        for g in d.groups:
            is_m = g is m
            shown = "" if (is_m and len(d.groups) > 1) or d.uniform else names(g.nodes)
            if d.uniform:
                shown = "all"
            rows.append((d.title, g.value, len(g.nodes), shown, is_m, d.uniform))
    return rows


def render_console(summary, env, file=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from cudadoctor.render.common import wide_console

    out = file or sys.stdout
    console = wide_console(file=out, highlight=False, soft_wrap=False, emoji=False)  # whole rows in a pipe
    scrub = Redactor(env)

    def esc(text) -> str:
        return escape(scrub(str(text)))

    console.print(f"[bold]cudadoctor fleet[/bold] · {esc(summary.headline())}")
    if summary.nodes:
        table = Table(show_header=True, header_style="bold", show_lines=False, pad_edge=False)
        for col in ("", "value", "nodes", "which"):
            table.add_column(col, overflow="fold")
        last = None
        for title, value, count, shown, is_m, uniform in _rows(summary):
            style = "green" if uniform else ("" if is_m else "yellow")
            table.add_row(esc(title) if title != last else "", f"[{style}]{esc(value)}[/{style}]" if style else esc(value),
                          str(count), esc(shown))
            last = title
        console.print(table)
    for d in summary.dimensions:
        if not d.uniform and d.key != "outcome":
            console.print(f"[yellow]≠[/yellow] {esc(d.sentence())}")
    bad = [f for f in summary.findings if f.status in ("fail", "error")]
    warn = [f for f in summary.findings if f.status == "warn"]
    if bad or warn:
        table = Table(show_header=True, header_style="bold", title="findings on nodes", title_justify="left")
        for col in ("status", "finding", "nodes", "which", "e.g."):
            table.add_column(col, overflow="fold")
        for f in bad + warn:
            style = "red" if f.status != "warn" else "yellow"
            table.add_row(f"[{style}]{f.status}[/{style}]", esc(f.id), str(len(f.nodes)), esc(names(f.nodes)),
                          esc(f.summary))
        console.print(table)
    if summary.silent:
        console.print(f"[red]no answer from {len(summary.silent)} node(s):[/red]")
        for r in summary.silent:
            console.print(f"  {esc(r.node)}: {esc(r.reason)}")
    if summary.bad_files:
        console.print(f"[yellow]{len(summary.bad_files)} file(s) skipped:[/yellow]")
        for b in summary.bad_files[:50]:
            console.print(f"  {esc(b.path)}: {esc(b.reason)}")
        if len(summary.bad_files) > 50:
            console.print(f"  ... and {len(summary.bad_files) - 50} more (--json lists them all)")
    rejudged = [r for r in summary.nodes if getattr(r, "rejudged_from", "")]
    if rejudged:
        versions = ", ".join(sorted({r.rejudged_from for r in rejudged}))
        console.print(f"[dim]{len(rejudged)} report(s) made by cudadoctor {esc(versions)} judged again with "
                      f"{esc(__version__)}'s checks[/dim]")
    code = summary.exit_code
    console.print(("[green]every node answered and passed[/green]" if code == 0 else
                   "[red]attention needed[/red]") + f" (exit {code})")


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(summary, env) -> str:
    scrub = Redactor(env)
    lines = [f"**cudadoctor fleet** · {summary.headline()}", ""]
    if summary.nodes:
        lines += ["| | value | nodes | which |", "|---|---|---:|---|"]
        last = None
        for title, value, count, shown, _is_m, _u in _rows(summary):
            lines.append(f"| {_md(title) if title != last else ''} | {_md(value)} | {count} | {_md(shown)} |")
            last = title
        lines.append("")
    for d in summary.dimensions:
        if not d.uniform and d.key != "outcome":
            lines.append(f"- {_md(d.sentence())}")
    if summary.findings:
        lines += ["", "| status | finding | nodes | which | e.g. |", "|---|---|---:|---|---|"]
        for f in summary.findings:
            lines.append(f"| {f.status} | `{f.id}` | {len(f.nodes)} | {_md(names(f.nodes))} | {_md(f.summary)} |")
    if summary.silent:
        lines += ["", f"No answer from {len(summary.silent)} node(s):"]
        lines += [f"- {_md(r.node)}: {_md(r.reason)}" for r in summary.silent]
    if summary.bad_files:
        lines += ["", f"{len(summary.bad_files)} file(s) skipped:"]
        lines += [f"- `{_md(b.path)}`: {_md(b.reason)}" for b in summary.bad_files[:50]]
    lines += ["", f"exit code {summary.exit_code}"]
    return scrub("\n".join(lines))


def render_nccl(result, file=None) -> None:
    """`fleet nccl` on the console: the whole run, the pairs, the nodes named."""
    out = file or sys.stdout
    w = result.whole
    r = w.run
    head = f"cudadoctor fleet nccl · {len(w.nodes)} node{'s' if len(w.nodes) != 1 else ''} · {r.world} ranks · {r.backend}"
    out.write(head + "\n")
    if r.outcome == "ok":
        out.write(f"  all-reduce over every rank: correct; busbw {r.busbw:g} GB/s at {(r.size_bytes or 0) >> 20} MiB"
                  + (f" via {', '.join(r.transports)}" if r.transports else "") + "\n")
    else:
        late = ", ".join(f"rank {x.rank} on {w.node_of.get(x.rank, '?')}" for x in r.laggards)
        out.write(f"  the whole run: {r.outcome} in {r.stage}" + (f" ({late} behind)" if late else "")
                  + (f": {r.error[:300]}" if r.error else "") + "\n")
    for n, why in w.silent:
        out.write(f"  {n}: {why}\n")
    for p in result.pairs:
        pr = p.run.run
        what = f"ok, busbw {pr.busbw:g} GB/s" if p.run.ok else f"{pr.outcome} in {pr.stage}"
        out.write(f"  pair {' + '.join(p.nodes)}: {what}\n")
    for n, why in result.culprits:
        out.write(f"✗ {n}: {why}\n")
    for n, state in result.unavailable:
        out.write(f"  {n}: not checked (Slurm state {state})\n")
    if result.exit_code == 0:
        out.write("every node took part; no node named\n")
