"""`cudadoctor libs`: which copy of each CUDA library is really loaded, from where, and why."""

from __future__ import annotations

from typing import Optional

import typer

GLYPH = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-", "error": "E"}


def print_findings(step, redact, verbose: bool = False) -> None:
    """Plain lines for one step's findings: glyph, summary, then detail and fix for problems."""
    for f in step.findings:
        typer.echo(redact(f"  {GLYPH.get(f.status.value, '?')} {f.summary}"))
        if f.status.value in ("warn", "fail", "error") or verbose:
            if f.detail:
                typer.echo(redact(f"      {f.detail}"))
            if f.fix is not None:
                typer.echo(redact(f"      fix: {f.fix.text}"))
                for c in f.fix.commands:
                    typer.echo(redact(f"        $ {c}"))


def run_steps_for(step_ids: list, python: Optional[str], timeout: float = 120.0):
    from cudadoctor.doctor import run_check
    from cudadoctor.facts.registry import Options
    from cudadoctor.system.host import HostSystem

    system = HostSystem()
    report = run_check(system, Options(python=python, timeout_torch=timeout), only=step_ids)
    return system, report


def register(app: typer.Typer) -> None:
    @app.command("libs")
    def libs(
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose torch to inspect (default: this one)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Every copy found and why it lost."),
        timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds allowed for the torch probe."),
    ) -> None:
        """List the CUDA libraries torch really loads (path, version, origin), and the traps around them."""
        import json

        from cudadoctor.model import to_jsonable
        from cudadoctor.redact import Redactor

        from cudadoctor.cli import check_python_option

        check_python_option(python)
        system, report = run_steps_for(["libraries"], python, timeout)
        redact = Redactor(system.env)
        lf = report.facts.get("libs")
        step = report.steps[0]
        info = lf.value if lf is not None else None
        if json_out:
            out = {"method": getattr(info, "method", ""), "fact_state": lf.state.value if lf else "not_gathered",
                   "error": lf.error if lf else "", "libraries": to_jsonable(getattr(info, "loaded", [])),
                   "copies": to_jsonable(getattr(info, "copies", [])),
                   "missing": list(getattr(info, "missing", [])), "torch_cudnn": getattr(info, "torch_cudnn", ""),
                   "status": step.status.value, "findings": [f.to_dict() for f in step.findings]}
            typer.echo(redact(json.dumps(out, indent=2)))
            raise typer.Exit(report.exit_code)
        if info is not None and info.loaded:
            typer.echo(f"CUDA libraries ({info.method}):")
            w = max(len(x.family) for x in info.loaded) + 2
            for x in info.loaded:
                origin = x.origin + (f" {x.origin_detail}" if x.origin_detail and x.origin in ("pip-wheel", "toolkit",
                                                                                                  "conda") else "")
                via = f"  via {x.via}" if x.via else ""
                typer.echo(redact(f"  {x.family.ljust(w)}{(x.version or '?'):<14}{origin:<40}{x.realpath}{via}"))
            if verbose:
                for fam in sorted({c.family for c in info.copies}):
                    copies = info.copies_of(fam)
                    if len(copies) > 1:
                        typer.echo(redact(f"  copies of {fam}: " + "; ".join(
                            f"{c.version or '?'} {c.origin} {c.realpath}" for c in copies)))
        typer.echo(f"{GLYPH.get(step.status.value, '?')} {step.title}: {redact(step.summary)}")
        print_findings(step, redact, verbose)
        raise typer.Exit(report.exit_code)
