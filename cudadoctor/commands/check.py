"""`cudadoctor check` (the ordered checklist) and `cudadoctor checks` (list the steps)."""

from __future__ import annotations

from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose torch to inspect (default: this one)."),
        only: List[str] = typer.Option([], "--only", metavar="ID", help="Run only these steps (repeatable, or comma-separated)."),
        skip: List[str] = typer.Option([], "--skip", metavar="ID", help="Skip these steps (repeatable, or comma-separated)."),
        json_out: bool = typer.Option(False, "--json", help="Print the versioned JSON report."),
        markdown: bool = typer.Option(False, "--markdown", help="Print a redacted block for a bug report."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Evidence and per-step timings."),
        strict: bool = typer.Option(False, "--strict", help="Warnings make the exit code 1."),
        facts_file: Optional[str] = typer.Option(None, "--facts", metavar="FILE",
                                                 help="Re-judge the facts of a saved --json report offline."),
        timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds allowed for the torch probe."),
        no_gpu_ops: bool = typer.Option(False, "--no-gpu-ops", help="Do not run the minimal GPU op."),
        kernel: Optional[str] = typer.Option(None, "--kernel", metavar="NAME",
                                             help="Check the interpreter a Jupyter kernel runs, with its kernel.json env."),
        expect_gpus: Optional[int] = typer.Option(None, "--expect-gpus", metavar="N", min=0,
                                                  help="How many GPUs this node should have (a missing GPU fails)."),
    ) -> None:
        """Run the ordered checklist, lowest layer first. Exit 0: nothing failed, 1: a check failed, 2: usage
        error or a check crashed."""
        from cudadoctor.checks import registry as checks
        from cudadoctor.cli import check_python_option, fail_usage

        if json_out and markdown:
            raise fail_usage("--json and --markdown cannot be used together")
        given_only, given_skip = bool(only), bool(skip)
        only, skip = step_ids(only), step_ids(skip)
        for flag, given_flag, ids in (("--only", given_only, only), ("--skip", given_skip, skip)):
            if given_flag and not ids:
                raise fail_usage(f"{flag} needs at least one step id (`cudadoctor checks` lists them)")
        bad = checks.unknown_ids(list(only) + list(skip))
        if bad:
            known = ", ".join(s.id for s in checks.ordered())
            raise fail_usage(f"unknown step id {', '.join(bad)} (known: {known}; `cudadoctor checks` lists them)")
        from cudadoctor.doctor import python_version_of, run_check
        from cudadoctor.facts.registry import Options
        from cudadoctor.system.host import HostSystem

        system = HostSystem()
        target_kernel = None
        if kernel is not None:
            from cudadoctor.commands.check_kernel import kernel_target

            system, python, target_kernel = kernel_target(system, kernel, python, facts_file)
        else:
            check_python_option(python)
        given = None
        saved: dict = {}
        source = "live"
        if facts_file is not None:
            given, saved = _load_facts(facts_file)
            source = f"facts file {facts_file}"
        opts = Options(python=python, timeout_torch=timeout, gpu_ops=not no_gpu_ops)
        from cudadoctor.doctor import add_unjudged, steps_missing_facts

        if target_kernel is not None:
            opts.extra["kernel"] = target_kernel.name

        if expect_gpus is not None:
            from cudadoctor.model import Fact

            opts.extra["expect_gpus"] = expect_gpus
            if given is not None:  # re-judging a saved report: today's expectation, the saved facts
                given["gpu_expect"] = Fact.found({"gpus": expect_gpus}, "--expect-gpus")
        unjudged = steps_missing_facts(only, skip, given) if given is not None else {}
        report = run_check(system, opts, only, list(skip) + list(unjudged), strict, given_facts=given, source=source)
        if target_kernel is not None:
            from cudadoctor.commands.check_kernel import add_kernel_to_report

            add_kernel_to_report(report, target_kernel, strict)
        if facts_file is not None:
            # a re-judged report is about the machine that gathered the facts, not this one
            report.host = str(saved.get("host") or "")
            report.node = str(saved.get("node") or report.host)
            if unjudged:
                add_unjudged(report, only, skip, unjudged, strict)
        if target_kernel is not None and not json_out:
            from cudadoctor.commands.check_kernel import kernel_line

            typer.echo(kernel_line(target_kernel, system.env, markdown))
        if json_out:
            from cudadoctor.render.json_report import render_json

            typer.echo(render_json(report, system.env))
        elif markdown:
            from cudadoctor.render.markdown import render_markdown

            typer.echo(render_markdown(report, system.env, user=system.username(), host=report.host or system.hostname()))
        else:
            from cudadoctor.render.console import render_console

            render_console(report, system.env, verbose=verbose, python_version=python_version_of(report))
        raise typer.Exit(report.exit_code)

    @app.command("checks")
    def list_checks(json_out: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
        """List the checklist's steps in order, with their ids."""
        from cudadoctor.checks import registry as checks

        steps = checks.ordered()
        if json_out:
            import json

            typer.echo(json.dumps([{"order": n, "id": s.id, "title": s.title, "requires": list(s.requires),
                                    "facts": list(s.facts), "description": s.description}
                                   for n, s in enumerate(steps, 1)], indent=2))
            return
        w = max(len(s.id) for s in steps) + 2
        for n, s in enumerate(steps, 1):
            req = f"  (after {', '.join(s.requires)})" if s.requires else ""
            typer.echo(f"{n:>2} {s.id.ljust(w)}{s.description}{req}")


def step_ids(values: list) -> list:
    """`--only a,b` as well as `--only a --only b`: every id given, blanks dropped."""
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def _load_facts(path: str) -> tuple:
    """(typed facts, the saved report) from a `check --json` report."""
    import json

    from cudadoctor.cli import fail_usage
    from cudadoctor.facts.saved import facts_from_report

    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read().decode("utf-8", errors="replace"))
    except OSError as e:
        raise fail_usage(f"--facts {path}: {e.strerror or e}")
    except ValueError as e:
        raise fail_usage(f"--facts {path}: not JSON ({e})")
    if not isinstance(raw, dict) or not isinstance(raw.get("facts"), dict):
        raise fail_usage(f"--facts {path}: not a cudadoctor report (no \"facts\" object)")
    return facts_from_report(raw), raw
