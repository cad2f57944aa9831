"""`cudadoctor envs`: the table of Python environments (console, Markdown) and its JSON form."""

from __future__ import annotations

import json
import sys

from cudadoctor import __version__
from cudadoctor.model import Status, to_jsonable
from cudadoctor.redact import Redactor, allowed_vars
from cudadoctor.render.common import STYLES, glyph
from cudadoctor.render.json_report import scrub_tree

SCHEMA = "cudadoctor-envs/1"
COLUMNS = ("verdict", "kind", "where", "python", "torch", "CUDA", "avail", "GPUs", "archs", "finding")
QUIET = ("no-torch",)  # verdicts whose finding is shown under the table only with -v (a Python without torch is normal)


def cells(r) -> tuple:
    e, t = r.env, r.env.torch
    have = t is not None and t.installed and not t.import_error
    avail = "-" if not have or t.available is None else ("yes" if t.available else "no")
    gpus = "-" if not have or t.device_count is None else str(t.device_count)
    return (r.verdict, e.label, e.where if e.kind != "kernel" else e.python or e.where,
            (t.python_version if t is not None and t.python_version else "?" if e.probed else "-"),
            (t.version if have else "-"), ((t.cuda or "cpu") if have else "-"), avail, gpus, r.archs, r.finding.id)


def env_text(env: dict) -> str:
    """'A=x, B=y and 2 variables not on the allow-list' for what an environment sets on top."""
    shown, hidden = allowed_vars(env)
    text = ", ".join(f"{k}={v!r}" for k, v in shown.items())
    if hidden:
        text += (" and " if text else "") + f"{hidden} variable{'s' if hidden != 1 else ''} not on the allow-list"
    return text


def public_kernel(k):
    """A kernelspec for JSON: its variables reduced to the allow-listed ones (with a count of the rest)."""
    if k is None:
        return None
    d = to_jsonable(k)
    for name in ("env", "env_applied"):
        d[name], d[f"{name}_not_shown"] = allowed_vars(getattr(k, name))
    return d


def gpu_line(dv) -> str:
    if not dv.present:
        return "no NVIDIA driver answers"
    names = sorted({g.name for g in dv.gpus})
    cc = sorted({".".join(map(str, g.cc)) for g in dv.gpus if g.cc})
    what = f"{len(dv.gpus)}× {', '.join(names)}" if dv.gpus else "no GPU"
    return f"{what}" + (f" (cc {', '.join(cc)})" if cc else "") + f" · driver {dv.version}"


def headline(rows, dv, res) -> str:
    n = len(rows)
    return (f"cudadoctor envs · {n} environment{'s' if n != 1 else ''} · {gpu_line(dv)} · "
            f"probed {res.workers} at a time in {res.seconds:.1f} s")


def to_dict(rows, kernels, dv, res, exit_code: int, timeout: float) -> dict:
    envs = []
    for r in rows:
        e, t = r.env, r.env.torch
        shown, hidden = allowed_vars(e.env)
        envs.append({
            "verdict": r.verdict, "kind": e.kind, "name": e.name, "python": e.python, "prefix": e.prefix,
            "found_as": list(e.found_as), "aliases": list(e.aliases), "env": shown, "env_not_shown": hidden,
            "env_source": e.env_source, "system_site_packages": e.system_site_packages,
            "has_ipykernel": e.has_ipykernel, "note": e.note,
            "kernel": public_kernel(e.kernel),
            "python_version": t.python_version if t is not None else "",
            "torch": None if t is None or not t.installed else {
                "version": t.version, "cuda": t.cuda, "available": t.available, "device_count": t.device_count,
                "arch_list": list(t.arch_list), "cudnn_version": t.cudnn_version, "file": t.file,
                "import_error": t.import_error, "init_error": t.init_error, "visible_devices": t.visible_devices,
                "devices": [to_jsonable(d) for d in t.devices]},
            "archs": r.archs, "probe": {"state": e.torch_state, "error": e.torch_error,
                                        "seconds": round(e.probe_s, 3) if e.probe_s is not None else None},
            "finding": r.finding.to_dict(),
            "findings": [{"id": f.id, "status": f.status.value} for f in r.findings],
        })
    counts: dict = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return {
        "schema": SCHEMA, "tool": "cudadoctor", "tool_version": __version__, "exit_code": exit_code,
        "driver": {"version": dv.version, "cuda": dv.cuda,
                   "gpus": [{"index": g.index, "name": g.name, "cc": ".".join(map(str, g.cc)) if g.cc else ""}
                            for g in dv.gpus]},
        "probe": {"workers": res.workers, "seconds": round(res.seconds, 3), "timeout_s": timeout},
        "verdicts": counts,
        "environments": envs,
        "kernels": None if kernels is None else {
            "method": kernels.method, "jupyter_python": kernels.jupyter_python, "error": kernels.error,
            "dirs": list(kernels.dirs),
            "kernels": [public_kernel(k) for k in kernels.kernels]},
    }


def render_json(data: dict, env) -> str:
    return json.dumps(scrub_tree(data, Redactor(env)), indent=2, ensure_ascii=False)


def _problem_lines(r, verbose: bool) -> list:
    """(style, text) lines under the table for one environment."""
    f, e = r.finding, r.env
    out = []
    if not verbose and (f.status in (Status.OK, Status.SKIP) or r.verdict in QUIET):
        return out
    who = f"{e.label} {e.where}" if e.kind != "kernel" else f"kernel {e.name} ({e.python or '?'})"
    out.append((STYLES[f.status], f"{who}: {f.summary}  ({f.id})"))
    if e.env:
        out.append(("", f"    runs with {env_text(e.env)} (from {e.env_source})"))
    if verbose:
        out.append(("dim", f"    found as: {'; '.join(e.found_as)}" + (
            f" · same as {', '.join(e.aliases)}" if e.aliases else "")))
    if f.status in (Status.WARN, Status.FAIL, Status.ERROR):
        if f.detail and verbose:
            out.append(("", f"    {f.detail}"))
        if f.fix:
            out.append(("bold", f"  fix: {f.fix.text}"))
            out += [("cyan", f"       {c}") for c in f.fix.commands]
    return out


def render_console(rows, kernels, dv, res, exit_code: int, env, verbose: bool = False, strict: bool = False,
                   file=None) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from cudadoctor.render.common import wide_console

    out = file or sys.stdout
    # in a file or pipe, no wrapping: a fix command cut in two cannot be pasted
    console = wide_console(file=out, highlight=False, soft_wrap=False, emoji=False)
    scrub = Redactor(env)

    def esc(text) -> str:
        return escape(scrub(str(text)))

    console.print(f"[bold]{esc(headline(rows, dv, res))}[/bold]")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("")
    for c in COLUMNS:
        table.add_column(c, overflow="fold")
    for r in rows:
        st = r.finding.status
        table.add_row(f"[{STYLES[st]}]{esc(glyph(st, out))}[/]", *[esc(c) for c in cells(r)])
    console.print(table)
    for r in rows:
        for style, text in _problem_lines(r, verbose):
            console.print(f"[{style}]{esc(text)}[/]" if style else esc(text))
    if kernels is not None and (verbose or kernels.kernels):
        console.print()
        console.print(f"[bold]Jupyter kernels[/bold] [dim]({esc(kernels.method)})[/dim]")
        for k in kernels.kernels:
            extra = f" · env {env_text(k.env_applied)}" if k.env_applied else ""
            shadow = f" · shadowed by {k.shadowed_by}" if k.shadowed_by else ""
            runs = k.interpreter or k.error or k.interpreter_how or "?"
            console.print(esc(f"  {k.name:<16} {runs}{extra}{shadow}  [{k.source}: {k.resource_dir}]"))
        if verbose:
            console.print(esc(f"  searched: {', '.join(kernels.dirs)}"))
    works = [r.env for r in rows if r.verdict == "works"]
    console.print()
    if works:
        tail = f"{len(works)} of {len(rows)} can use the GPU: " + ", ".join(e.python for e in works[:3])
    else:
        tail = f"none of {len(rows)} environments can use the GPU"
    if exit_code and strict and works:
        tail += " (--strict: a broken environment counts)"
    console.print(esc(tail + " · details: cudadoctor envs -v · share: cudadoctor envs --markdown"))


def render_markdown(rows, kernels, dv, res, env, user: str = "", host: str = "") -> str:
    scrub = Redactor(env, hide_identity=True, user=user, host=host)

    def cell(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["<details><summary>cudadoctor envs</summary>", "", headline(rows, dv, res), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        c = cells(r)
        lines.append("| " + " | ".join(cell(x) for x in c[:-1]) + f" | `{c[-1]}` {cell(r.finding.summary)} |")
    if kernels is not None and kernels.kernels:
        lines += ["", f"**Jupyter kernels** ({kernels.method})", ""]
        for k in kernels.kernels:
            env_txt = f" with {env_text(k.env_applied)}" if k.env_applied else ""
            lines.append(f"- `{k.name}` → `{k.interpreter or '?'}`{env_txt} ({k.source})" +
                         (f", shadowed by `{k.shadowed_by}`" if k.shadowed_by else ""))
    lines += ["", "</details>"]
    return scrub("\n".join(lines))
