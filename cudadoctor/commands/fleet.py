"""`cudadoctor fleet`: many nodes' reports as one answer (`summarize`), gathered through Slurm (`slurm`).

Exit codes of `summarize` and `slurm`: 0 every node answered and passed; 1 a node failed a check,
did not answer, or a report file could not be read (with --strict also: a warning, or a node that
differs from the others); 2 usage error, or srun could not be used at all.
"""

from __future__ import annotations

from typing import List, Optional

import typer

fleet_app = typer.Typer(
    name="fleet",
    help="Many nodes at once: which of them differ, and how.",
    no_args_is_help=True,
    add_completion=False,
)


def _emit(summary, env, json_out: bool, markdown: bool) -> None:
    from cudadoctor.fleet import render

    if json_out:
        typer.echo(render.render_json(summary, env))
    elif markdown:
        typer.echo(render.render_markdown(summary, env))
    else:
        render.render_console(summary, env)


@fleet_app.command("summarize")
def summarize(
    paths: List[str] = typer.Argument(..., metavar="REPORT...|DIR",
                                      help="`cudadoctor check --json` reports, or folders of them (*.json)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the summary as Markdown."),
    strict: bool = typer.Option(False, "--strict", help="Warnings and nodes that differ make the exit code 1."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Worker processes reading reports "
                                                                         "(default: one per CPU)."),
) -> None:
    """Group nodes by GPU, driver, CUDA, torch, cuDNN, nvcc and check outcome; name the ones that differ
    and the ones that fail, with the finding."""
    from cudadoctor.cli import fail_usage
    from cudadoctor.fleet.load import load_reports
    from cudadoctor.fleet.summary import summarize as make_summary
    from cudadoctor.system.host import HostSystem

    if json_out and markdown:
        raise fail_usage("--json and --markdown cannot be used together")
    system = HostSystem()
    records, bad = load_reports(system, paths, jobs=jobs)
    if not records:
        why = "; ".join(f"{b.path}: {b.reason}" for b in bad[:5]) or "nothing given"
        raise fail_usage(f"no cudadoctor report could be read ({why}{' ...' if len(bad) > 5 else ''})")
    summary = make_summary(records, bad, strict=strict, source="files")
    _emit(summary, system.env, json_out, markdown)
    raise typer.Exit(summary.exit_code)


@fleet_app.command("slurm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def slurm(
    ctx: typer.Context,
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="Partition (default: Slurm's default "
                                                                             "one, or the current allocation)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", min=1, help="How many nodes (default: every usable "
                                                                            "node of the partition or allocation)."),
    time_limit: float = typer.Option(300.0, "--time-limit", min=5.0, metavar="S",
                                     help="Seconds each node's check may take; a node that takes longer is "
                                          "reported as not answering."),
    alloc_wait: float = typer.Option(300.0, "--alloc-wait", min=0.0, metavar="S",
                                     help="Seconds to wait for Slurm to grant the nodes."),
    cudadoctor: str = typer.Option("cudadoctor", "--cudadoctor", metavar="PATH",
                                   help="cudadoctor as the nodes run it (default: `cudadoctor` on their PATH)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                         help="Interpreter whose torch the nodes inspect (passed to check)."),
    save: Optional[str] = typer.Option(None, "--save", metavar="DIR",
                                       help="Also write each node's report to DIR/NODE.json."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the summary as Markdown."),
    strict: bool = typer.Option(False, "--strict", help="Warnings and nodes that differ make the exit code 1."),
) -> None:
    """Run `cudadoctor check --json` on every node through srun (one task per node, with a time limit)
    and summarise. srun options go after `--`, e.g. `cudadoctor fleet slurm -p gpu -- --account=ops`."""
    import os

    from cudadoctor.cli import fail_usage
    from cudadoctor.fleet import slurm as fs
    from cudadoctor.fleet.summary import summarize as make_summary
    from cudadoctor.system.host import HostSystem

    if json_out and markdown:
        raise fail_usage("--json and --markdown cannot be used together")
    extra = tuple(ctx.args)
    bad = [a for a in extra if not a.startswith("-")]
    if bad:
        raise fail_usage(f"unexpected argument {bad[0]!r}: srun options go after `--` and start with '-'")
    if save is not None and os.path.exists(save) and not os.path.isdir(save):
        raise fail_usage(f"--save {save}: not a folder")
    system = HostSystem()
    try:
        p = fs.plan(system, partition, nodes, time_limit, extra, cudadoctor, python, strict, alloc_wait)
        records, reports, meta = fs.collect(system, p)
    except fs.SlurmError as e:
        raise fail_usage(str(e))
    if save is not None:
        _save(save, reports)
    summary = make_summary(records, (), strict=strict, source="slurm", meta=meta)
    _emit(summary, system.env, json_out, markdown)
    raise typer.Exit(summary.exit_code)


def _save(folder: str, reports: dict) -> None:
    import json
    import os

    from cudadoctor.cli import fail_usage

    try:
        os.makedirs(folder, exist_ok=True)
        for node, rep in reports.items():
            safe = "".join(c if (c.isalnum() or c in "._-") else "_" for c in node) or "node"
            with open(os.path.join(folder, f"{safe}.json"), "w", encoding="utf-8") as f:
                json.dump(rep, f, indent=2, ensure_ascii=False)
    except OSError as e:
        raise fail_usage(f"--save {folder}: {e.strerror or e}")


@fleet_app.command("node", hidden=True)
def node(
    time_limit: float = typer.Option(300.0, "--time-limit", min=1.0),
    python: Optional[str] = typer.Option(None, "--python"),
    strict: bool = typer.Option(False, "--strict"),
) -> None:
    """The task `fleet slurm` runs on each node: `check --json` with a time limit, in srun-safe lines."""
    import sys

    from cudadoctor.fleet.slurm import node_lines
    from cudadoctor.system.host import HostSystem

    for line in node_lines(HostSystem(), time_limit, python=python, strict=strict):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")
