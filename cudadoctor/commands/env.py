"""`cudadoctor env`: the CUDA-relevant environment variables, what each does, and the traps they set."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("env")
    def env(
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose torch to inspect (default: this one)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON."),
        markdown: bool = typer.Option(False, "--markdown",
                                      help="A redacted block for a bug report (hides user, home and host names)."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Details and fixes for every finding."),
        timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds allowed for the torch probe."),
    ) -> None:
        """Show the allow-listed CUDA variables with what they do, and check them against this machine."""
        import json

        from cudadoctor.checks.environment import doc_for
        from cudadoctor.cli import fail_usage
        from cudadoctor.cli import check_python_option
        from cudadoctor.commands.libs import GLYPH, print_findings, run_steps_for
        from cudadoctor.redact import Redactor

        if json_out and markdown:
            raise fail_usage("--json and --markdown cannot be used together")
        check_python_option(python)
        system, report = run_steps_for(["environment"], python, timeout)
        redact = Redactor(system.env, hide_identity=markdown, user=system.username(), host=system.hostname())
        ef = report.facts.get("env")
        variables = dict(ef.value.vars) if ef is not None and ef.value is not None else {}
        step = report.steps[0]
        if json_out:
            out = {"variables": {k: {"value": v, "meaning": doc_for(k)} for k, v in sorted(variables.items())},
                   "status": step.status.value, "findings": [f.to_dict() for f in step.findings]}
            typer.echo(redact(json.dumps(out, indent=2)))
            raise typer.Exit(report.exit_code)
        if markdown:
            lines = ["### CUDA environment (cudadoctor env)", "", "| variable | value | meaning |", "|---|---|---|"]
            for k, v in sorted(variables.items()):
                cell = v.replace("|", "\\|")
                lines.append(f"| `{k}` | `{cell}` | {doc_for(k)} |")
            lines += ["", f"**{step.status.value.upper()}** {step.summary}", ""]
            for f in step.findings:
                lines.append(f"- {f.status.value}: `{f.id}` {f.summary}")
                if f.fix is not None and f.status.value in ("warn", "fail"):
                    lines += [f"  - fix: {f.fix.text}"] + [f"    `{c}`" for c in f.fix.commands]
            typer.echo(redact("\n".join(lines)))
            raise typer.Exit(report.exit_code)
        typer.echo("CUDA-relevant environment variables (allow-listed; secret-looking values redacted):")
        w = max([len(k) for k in variables] + [8]) + 2
        for k, v in sorted(variables.items()):
            meaning = doc_for(k)
            typer.echo(redact(f"  {k.ljust(w)}{v}"))
            if meaning and verbose:
                typer.echo(f"  {''.ljust(w)}↳ {meaning}")
        typer.echo(f"{GLYPH.get(step.status.value, '?')} {step.title}: {redact(step.summary)}")
        print_findings(step, redact, verbose)
        raise typer.Exit(report.exit_code)
