"""`cudadoctor wsl`: is this WSL 2 set up for CUDA the way NVIDIA's WSL guide says?"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("wsl")
    def wsl(
        json_out: bool = typer.Option(False, "--json", help="Print JSON."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Details and fixes for every finding."),
    ) -> None:
        """Check WSL 2 for CUDA: /dev/dxg, /usr/lib/wsl/lib, no Linux driver inside WSL, a CUDA torch."""
        import json

        from cudadoctor.commands.libs import GLYPH, print_findings, run_steps_for
        from cudadoctor.model import to_jsonable
        from cudadoctor.redact import Redactor

        system, report = run_steps_for(["wsl"], None)
        redact = Redactor(system.env)
        step = report.steps[0]
        wf = report.facts.get("wsl")
        if json_out:
            out = {"wsl": to_jsonable(wf.value) if wf is not None else None, "status": step.status.value,
                   "summary": step.summary, "findings": [f.to_dict() for f in step.findings]}
            typer.echo(redact(json.dumps(out, indent=2)))
            raise typer.Exit(report.exit_code)
        typer.echo(f"{GLYPH.get(step.status.value, '?')} {step.title}: {redact(step.summary)}")
        if step.status.value != "skip":
            print_findings(step, redact, verbose)
        raise typer.Exit(report.exit_code)
