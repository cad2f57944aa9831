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


def _srun_options(ctx: typer.Context) -> tuple:
    """The srun options given after `--` (`fleet slurm`, `fleet nccl`); anything else is a usage error."""
    from cudadoctor.cli import fail_usage

    extra = tuple(ctx.args)
    bad = [a for a in extra if not a.startswith("-")]
    if bad:
        raise fail_usage(f"unexpected argument {bad[0]!r}: srun options go after `--` and start with '-'")
    return extra


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
    extra = _srun_options(ctx)
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


@fleet_app.command("nccl", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def nccl(
    ctx: typer.Context,
    partition: Optional[str] = typer.Option(None, "--partition", "-p", help="Partition (default: Slurm's default one, "
                                                                             "or the current allocation)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", "-N", min=1, help="How many nodes (default: every usable "
                                                                            "node of the partition or allocation)."),
    per_node: int = typer.Option(1, "--gpus-per-node", "-G", min=1, help="Tasks (GPUs) per node: one rank each."),
    backend: str = typer.Option("nccl", "--backend", help="nccl (GPUs) or gloo (CPUs: the same plumbing, no GPU)."),
    size: str = typer.Option("64M", "--size", metavar="SIZE", help="All-reduce size per rank (e.g. 64M, 1G)."),
    time_limit: float = typer.Option(120.0, "--time-limit", min=5.0, metavar="S",
                                     help="Seconds each task may take; a rank that takes longer is stopped and named."),
    alloc_wait: float = typer.Option(300.0, "--alloc-wait", min=0.0, metavar="S",
                                     help="Seconds to wait for Slurm to grant the nodes."),
    pairs: bool = typer.Option(False, "--pairs", help="Also run every node in a pair, to name a slow node even "
                                                      "when the whole run passes."),
    cudadoctor: str = typer.Option("cudadoctor", "--cudadoctor", metavar="PATH",
                                   help="cudadoctor as the nodes run it (default: `cudadoctor` on their PATH)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                         help="Interpreter whose torch runs the ranks on the nodes."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """An all-reduce across nodes through srun (one task per GPU, the rendezvous on the first node); when it
    fails, pairs of nodes run it to name the slow or silent one. srun options go after `--`. Exit 0: the
    collective passed; 1: it failed, or a node was named; 2: usage error, or srun could not be used."""
    from cudadoctor.cli import fail_usage
    from cudadoctor.facts.host_links import parse_size
    from cudadoctor.fleet import nccl as fn
    from cudadoctor.fleet.slurm import SlurmError
    from cudadoctor.system.host import HostSystem

    extra = _srun_options(ctx)
    if backend not in ("nccl", "gloo"):
        raise fail_usage(f"--backend {backend!r}: nccl or gloo")
    nbytes = parse_size(size)
    if not nbytes or nbytes < 4:
        raise fail_usage(f"--size {size!r}: a size such as 64M or 1G")
    system = HostSystem()
    try:
        result = fn.fleet_nccl(system, force_pairs=pairs, partition=partition, nodes=nodes, per_node=per_node,
                               time_limit=time_limit, extra=extra, cudadoctor=cudadoctor, python=python,
                               backend=backend, nbytes=nbytes, alloc_wait=alloc_wait)
    except SlurmError as e:
        raise fail_usage(str(e))
    if json_out:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        from cudadoctor.fleet.render import render_nccl

        render_nccl(result)
    raise typer.Exit(result.exit_code)


@fleet_app.command("nccl-rank", hidden=True)
def nccl_rank(
    backend: str = typer.Option("nccl", "--backend"),
    time_limit: float = typer.Option(120.0, "--time-limit", min=1.0),
    port: int = typer.Option(29500, "--port"),
    nbytes: int = typer.Option(64 << 20, "--bytes"),
    python: Optional[str] = typer.Option(None, "--python"),
) -> None:
    """The task `fleet nccl` runs for each GPU: one rank, relayed in srun-safe lines."""
    import sys

    from cudadoctor.fleet.nccl import run_rank
    from cudadoctor.system.host import HostSystem

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    raise typer.Exit(run_rank(HostSystem(), say, backend, time_limit, port, python, nbytes))


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")
