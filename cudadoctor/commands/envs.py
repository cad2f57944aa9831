"""`cudadoctor envs`: every Python environment of this machine and what its torch can do with the GPU;
`envs --diff A B`: what differs between two of them."""

from __future__ import annotations

from typing import List, Optional, Tuple

import typer


def register(app: typer.Typer) -> None:
    @app.command("envs")
    def envs(
        add: List[str] = typer.Option([], "--add", metavar="PATH",
                                      help="Also check this interpreter or environment folder (repeatable)."),
        diff: Optional[Tuple[str, str]] = typer.Option(
            None, "--diff", metavar="A B",
            help="Compare two environments: interpreter paths, environment folders, or names (conda env, kernel)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON."),
        markdown: bool = typer.Option(False, "--markdown", help="A redacted block for a bug report."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="How each was found, every finding and fix."),
        strict: bool = typer.Option(False, "--strict",
                                    help="Exit 1 also when any environment is broken, hung or cannot use the GPU."),
        timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0,
                                                help="Seconds allowed for each environment's torch probe (default 60, or $CUDADOCTOR_TIMEOUT_ENVS)."),
        gpu_op: bool = typer.Option(False, "--gpu-op", help="Also run the minimal GPU op in each environment."),
    ) -> None:
        """Find the Python environments here (PATH, venvs, conda, pyenv, uv, Jupyter kernels) and check the
        torch of each, in parallel. Exit 0: one can use the GPU, 1: none can, 2: usage error."""
        from cudadoctor.cli import fail_usage

        if json_out and markdown:
            raise fail_usage("--json and --markdown cannot be used together")
        from cudadoctor.facts.python_envs import envs_timeout
        from cudadoctor.system.host import HostSystem

        system = HostSystem()
        secs = timeout if timeout is not None else envs_timeout()
        for p in add:
            if not (system.is_executable(p) or system.is_dir(p)):
                raise fail_usage(f"--add {p}: no interpreter or environment folder there")
        if diff:
            _diff(system, list(diff), list(add), secs, gpu_op, json_out, markdown, verbose)
            return
        _table(system, list(add), secs, gpu_op, json_out, markdown, verbose, strict)


def gather_all(system, add: list, timeout: float, gpu_op: bool, envs=None) -> tuple:
    """(probed environments, kernels, shared driver facts): the probes and the driver facts run together."""
    from concurrent.futures import ThreadPoolExecutor

    from cudadoctor.checks.envs_verdict import SHARED_FACTS
    from cudadoctor.facts import registry as facts
    from cudadoctor.facts.python_envs import find_all, probe_all

    opts = facts.Options()
    kernels = None
    if envs is None:
        envs, kernels = find_all(system, add, tool_timeout=opts.timeout_tool)
    with ThreadPoolExecutor(max_workers=1) as pool:
        shared = pool.submit(facts.gather, system, list(SHARED_FACTS), opts)
        res = probe_all(system, envs, timeout, gpu_op)
        return res, kernels, shared.result()


def _table(system, add, timeout, gpu_op, json_out, markdown, verbose, strict) -> None:
    from cudadoctor.checks.envs_verdict import exit_code, judge_all
    from cudadoctor.facts.views import driver_view_of
    from cudadoctor.render import envs as render

    res, kernels, shared = gather_all(system, add, timeout, gpu_op)
    rows = judge_all(res.envs, shared)
    code = exit_code(rows, strict)
    dv = driver_view_of(shared)
    if json_out:
        typer.echo(render.render_json(render.to_dict(rows, kernels, dv, res, code, timeout), system.env))
    elif markdown:
        typer.echo(render.render_markdown(rows, kernels, dv, res, system.env, system.username(), system.hostname()))
    else:
        render.render_console(rows, kernels, dv, res, code, system.env, verbose=verbose, strict=strict)
    raise typer.Exit(code)


def resolve(system, envs: list, spec: str):
    """The environment `spec` names: an interpreter or folder path, a kernel (NAME or kernel:NAME), a
    conda env or pyenv version name. None when nothing matches."""
    from cudadoctor.facts.pythons import Finder

    if spec.startswith("kernel:"):
        return _kernel_env(envs, spec[len("kernel:"):].lower())
    if "/" in spec or system.exists(spec):
        f = Finder(system)
        e = f.add_prefix(spec, "--diff") if system.is_dir(spec) else f.add(spec, "--diff")
        if e is None:
            return None
        return next((x for x in envs if x.key == e.key), e)
    return _kernel_env(envs, spec.lower()) or next((e for e in envs if e.name == spec), None)


def _kernel_env(envs: list, name: str):
    """The environment of kernel `name`: the one Jupyter starts under that name first (a kernel row, or the
    interpreter it was found as), a shadowed one only when no other has the name."""
    def names(e, live: bool) -> bool:
        if e.kind == "kernel" and e.name == name and e.kernel is not None:
            return live != bool(e.kernel.shadowed_by)
        labels = [fa for fa in e.found_as if fa.split(" (")[0] == f"kernel {name}"]
        return any(("(shadowed by" not in fa) == live for fa in labels)

    return next((e for e in envs if names(e, True)), None) or next((e for e in envs if names(e, False)), None)


def _diff(system, specs, add, timeout, gpu_op, json_out, markdown, verbose) -> None:
    import json

    from cudadoctor.checks.envs_diff import diff_envs
    from cudadoctor.checks.envs_verdict import judge_env
    from cudadoctor.cli import fail_usage
    from cudadoctor.facts.python_envs import find_all
    from cudadoctor.facts.registry import Options
    from cudadoctor.redact import Redactor

    envs, _ = find_all(system, add, tool_timeout=Options().timeout_tool)  # CUDADOCTOR_TIMEOUT_TOOL, as plain envs
    picked = []
    for s in specs:
        e = resolve(system, envs, s)
        if e is None:
            names = sorted({x.name for x in envs if x.name})
            raise fail_usage(f"--diff: no environment {s!r} here (give an interpreter path, an environment folder, "
                             f"or one of: {', '.join(names) or 'no named environment found'})")
        picked.append(e)
    if picked[0] is picked[1]:
        raise fail_usage(f"--diff: {specs[0]!r} and {specs[1]!r} are the same environment ({picked[0].python})")
    res, _, shared = gather_all(system, add, timeout, gpu_op, envs=picked)
    a, b = picked
    va, vb = judge_env(a, shared), judge_env(b, shared)
    rows = diff_envs(a, b, system.env, va.verdict, vb.verdict)
    shown = [r for r in rows if r.differs or verbose]
    redact = Redactor(system.env, hide_identity=markdown, user=system.username(), host=system.hostname())
    if json_out:
        out = {"a": {"spec": specs[0], "python": a.python, "kind": a.kind, "verdict": va.verdict},
               "b": {"spec": specs[1], "python": b.python, "kind": b.kind, "verdict": vb.verdict},
               "rows": [{"section": r.section, "item": r.item, "a": r.a, "b": r.b, "differs": r.differs}
                        for r in rows]}
        typer.echo(redact(json.dumps(out, indent=2)))
        raise typer.Exit(0)
    same = sum(1 for r in rows if not r.differs)
    head = f"A = {a.label} {a.python} ({va.verdict}) · B = {b.label} {b.python} ({vb.verdict})"
    if markdown:
        lines = ["<details><summary>cudadoctor envs --diff</summary>", "", head, "", "| | | A | B |", "|---|---|---|---|"]
        lines += [f"| {r.section} | {r.item} | `{r.a}` | `{r.b}` |" for r in shown]
        lines += ["", f"{same} of {len(rows)} compared items are the same", "", "</details>"]
        typer.echo(redact("\n".join(lines)))
        raise typer.Exit(0)
    typer.echo(redact(f"cudadoctor envs --diff · {head}"))
    w = max([len(f"{r.section} {r.item}") for r in shown] + [10]) + 2
    wa = min(max([len(r.a) for r in shown] + [4]) + 2, 70)
    for r in shown:
        mark = "≠" if r.differs else "="
        typer.echo(redact(f"  {mark} {(r.section + ' ' + r.item).ljust(w)}{r.a.ljust(wa)} | {r.b}"))
    typer.echo(redact(f"{len(rows) - same} differ, {same} the same" + ("" if verbose else " (-v shows them)")))
    raise typer.Exit(0)
