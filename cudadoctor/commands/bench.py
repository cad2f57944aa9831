"""`cudadoctor bench`: is this GPU as fast as it should be, and is the workload launch-bound?"""

from __future__ import annotations

from typing import Optional

import typer

STATUS_GLYPH = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red"), "skip": ("–", "dim"),
                "error": ("✗", "red")}


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        quick: bool = typer.Option(False, "--quick", help="Smaller sizes, fewer repetitions: a few seconds."),
        json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON on stdout."),
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose torch runs the measurements (default: this one)."),
        device: int = typer.Option(0, "--device", metavar="N", help="CUDA device index, as torch numbers it."),
        timeout: Optional[float] = typer.Option(None, "--timeout", metavar="S",
                                                help="Seconds allowed per measurement child (default 90 quick, 240)."),
        collectives: bool = typer.Option(False, "--collectives",
                                         help="Between GPUs instead: all_reduce, all_gather, reduce_scatter and "
                                              "sendrecv from 8 B to 1 GiB over every GPU (NCCL), and the GPU-to-GPU "
                                              "copy matrix."),
        max_bytes: str = typer.Option("1G", "--max-bytes", metavar="SIZE",
                                      help="With --collectives: GPU memory per GPU the sweep may use (e.g. 256M, 2G)."),
    ) -> None:
        """Measure launch cost (eager vs CUDA graph), copy bandwidth and matmul rates, next to what this GPU
        should reach, with likely causes for figures far below. Exit 0: measured (warnings allowed), 1: a
        measurement failed or gave wrong results, 2: usage error."""
        from cudadoctor.cli import check_python_option, fail_usage

        check_python_option(python)
        if device < 0:
            raise fail_usage("--device must be 0 or more")
        if timeout is not None and timeout <= 0:
            raise fail_usage("--timeout must be a positive number of seconds")
        from cudadoctor.system.host import HostSystem

        if collectives:
            _collectives(HostSystem(), python, max_bytes, timeout, json_out)
        from cudadoctor.bench.runner import BenchOptions

        system = HostSystem()
        opts = BenchOptions(quick=quick, python=python, device=device, timeout_s=timeout)
        result = _with_progress(system, opts, json_out)
        if json_out:
            import json

            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            render(result)
        raise typer.Exit(1 if result.status.value in ("fail", "error") else 0)


def _with_progress(system, opts, json_out: bool):
    """Run the bench with a live progress display on stderr (only when stderr is a terminal)."""
    import sys

    from cudadoctor.bench.runner import run_bench

    if not sys.stderr.isatty():
        return run_bench(system, opts)
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from cudadoctor.bench import judge
    from cudadoctor.paths import cache_dir

    console = Console(stderr=True)
    try:
        opts.progress_dir = str(cache_dir() / "bench")
    except Exception:  # noqa: BLE001 - no cache dir: a spinner without per-step lines
        opts.progress_dir = None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task("starting the measurement child (import torch)…", total=None)

        def on_record(rec: dict) -> None:
            st = rec.get("stage")
            if st == "device":
                progress.console.print(f"[dim]device {rec.get('index')}: {rec.get('name')} "
                                       f"(cc {rec.get('capability')})[/dim]")
            elif st == "begin":
                progress.update(task, description=f"measuring {rec.get('id', '').replace('_', ' ')}…")
            elif st == "measure" and rec.get("id") in judge.FIGURES:
                fid = rec["id"]
                label, unit, _ = judge.FIGURES[fid]
                val = judge.value_of(fid, rec)
                if fid == "launch":
                    progress.console.print(f"  {label}: {judge.fmt_value(val, unit)}, CUDA graph "
                                           f"{judge.fmt_value(rec.get('graph_us'), unit)} per kernel")
                else:
                    progress.console.print(f"  {label}: {judge.fmt_value(val, unit)}")
            elif st == "error":
                progress.console.print(f"  [red]{rec.get('id')}: {rec.get('error')}[/red]")

        opts.progress = on_record
        return run_bench(system, opts)


def render(result) -> None:
    from rich.table import Table

    from cudadoctor.bench.judge import fmt_ratio, fmt_value
    from cudadoctor.render.common import wide_console

    console = wide_console()
    head = f"cudadoctor bench{' --quick' if result.quick else ''} · {result.device_name or 'no GPU'}"
    if result.capability:
        head += f" (cc {result.capability})"
    head += f" · through {'torch' if result.backend == 'torch' else 'the CUDA driver API'} · {result.python}"
    console.print(head, highlight=False)
    if result.peaks is not None:
        p = result.peaks
        console.print(f"[dim]expected: {p.model} datasheet ({p.confidence}) {p.source}[/dim]", highlight=False)
    t = Table(box=None, pad_edge=False, show_edge=False)
    for col, just in (("", "left"), ("measurement", "left"), ("measured", "right"), ("expected peak", "right"),
                      ("ratio", "right"), ("typical", "right"), ("", "left")):
        t.add_column(col, justify=just)
    for f in result.figures:
        glyph, colour = STATUS_GLYPH[f.status.value]
        if f.id == "launch" and f.value is not None:
            measured = fmt_value(f.value, f.unit)
            expected = f"graph {fmt_value(f.extra.get('graph_us'), f.unit)}"
            ratio = f"{f.extra.get('eager_over_graph') or 0:.1f}×"
            typical = ""
            note = "launch-bound for small kernels" if f.extra.get("launch_bound") else ""
        else:
            measured = fmt_value(f.value, f.unit) if f.value is not None else ""
            expected = fmt_value(f.expected, f.unit) if f.expected else ""
            ratio = fmt_ratio(f.ratio) if f.ratio is not None else ""
            typical = fmt_ratio(f.typical) if f.typical and f.ratio is not None else ""
            note = {"skip": "not measured", "fail": "failed", "error": "failed"}.get(f.status.value, "")
            if f.checked is False:
                note = "wrong result"
        t.add_row(f"[{colour}]{glyph}[/{colour}]", f.label, measured, expected, ratio, typical, note)
    if any(f.value is not None for f in result.figures):
        console.print(t)
    for f in result.figures:
        if f.advice:
            console.print(f"\n[bold]launch:[/bold] {f.advice}", highlight=False)
    for f in result.figures:
        if f.status.value in ("warn", "fail") and (f.causes or f.error):
            glyph, colour = STATUS_GLYPH[f.status.value]
            console.print(f"\n[{colour}]{glyph}[/{colour}] {f.label}: {f.summary}", highlight=False)
            for c in f.causes:
                console.print(f"    likely: {c.text}", highlight=False)
                for cmd in c.commands:
                    console.print(f"      [cyan]{cmd}[/cyan]", highlight=False)
    if result.stop_reason:
        console.print(f"\n[red]✗[/red] {result.stop_reason}", highlight=False)
    why: list = []
    for f in result.figures:
        if f.value is None and f.status.value in ("skip", "fail", "error") and f.summary not in why \
                and not f.summary.startswith(("not reached", "not measured")):
            why.append(f.summary)
    for w in why:
        console.print(f"[dim]not measured: {w}[/dim]", highlight=False)
    for n in result.notes:
        console.print(f"[dim]note: {n}[/dim]", highlight=False)
    if result.nvml_error:
        console.print(f"[dim]note: NVML unavailable ({result.nvml_error}): no causes from clocks, link or "
                      "power[/dim]", highlight=False)
    console.print(f"[dim]{result.elapsed_s:.1f} s[/dim]")


def _collectives(system, python, max_bytes: str, timeout, json_out: bool) -> None:
    """`bench --collectives`: run, print, exit (0 measured, 1 a collective failed or was wrong)."""
    from cudadoctor.bench.collectives import run_collectives
    from cudadoctor.cli import fail_usage
    from cudadoctor.facts.host_links import parse_size

    budget = parse_size(max_bytes)
    if not budget or budget < 1024:
        raise fail_usage(f"--max-bytes {max_bytes!r}: a size such as 256M or 2G")
    result = run_collectives(system, python, budget, timeout or 600.0)
    if json_out:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        render_collectives(result)
    raise typer.Exit(1 if result.status.value in ("fail", "error") else 0)


def _size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def render_collectives(result) -> None:
    from rich.table import Table

    from cudadoctor.bench.collectives import COLLS
    from cudadoctor.render.common import wide_console

    console = wide_console()  # as bench's own table: whole rows in a file or pipe
    run = result.run
    head = f"cudadoctor bench --collectives · {result.gpus} GPUs"
    if run is not None:
        head += f" · torch {run.torch} · NCCL {run.nccl_version} · via {', '.join(run.transports) or '?'}"
    console.print(head, highlight=False)
    console.print("[dim]busbw in GB/s (nccl-tests' definitions), time per call in µs[/dim]", highlight=False)
    if run is not None and run.bench:
        t = Table(box=None, pad_edge=False, show_edge=False)
        t.add_column("size", justify="right")
        for c in COLLS:
            t.add_column(c, justify="right")
        for n in sorted({x["bytes"] for x in run.bench if "bytes" in x}):
            cells = []
            for c in COLLS:
                x = next((r for r in run.bench if r.get("coll") == c and r.get("bytes") == n), None)
                if x is None:
                    cells.append("")
                elif "skipped" in x:
                    cells.append("[dim]over budget[/dim]")
                elif "busbw" not in x or x.get("ok") is False:
                    cells.append("[red]wrong[/red]" if "busbw" in x else "[red]failed[/red]")
                else:
                    cells.append(f"{x['busbw']:.2f} ({x['time_us']:.0f} µs)")
            t.add_row(_size(n), *cells)
        console.print(t)
    if result.copies:
        n = result.gpus
        t = Table(box=None, pad_edge=False, show_edge=False, title="GPU-to-GPU copy, GB/s (256 MiB, CUDA ordinals)")
        t.add_column("src \\ dst")
        for j in range(n):
            t.add_column(f"cuda:{j}", justify="right")
        for i in range(n):
            cells = []
            for j in range(n):
                c = next((x for x in result.copies if x.get("src") == i and x.get("dst") == j), None)
                cells.append("-" if i == j else "" if c is None else
                             (f"{c['gbps']:.1f} {c.get('label', '')}" if c.get("ok") else "[red]failed[/red]"))
            t.add_row(f"cuda:{i}", *cells)
        console.print(t)
    j = result.judged
    if j:
        glyph = {"ok": "[green]✓[/green]", "warn": "[yellow]![/yellow]"}.get(j["status"], "")
        console.print(f"{glyph} all_reduce busbw {j['busbw']:g} GB/s at {_size(j['bytes'])}: {j['pair']} should give "
                      f"~{j['expected']:.0f} ({j['from']}; ratio {j['ratio']:.2f})", highlight=False)
    if run is not None and run.outcome != "ok":
        console.print(f"[red]✗[/red] the sweep did not finish: {run.outcome} in {run.stage}: {run.error}", highlight=False)
    if result.copy_error:
        console.print(f"[red]✗[/red] copy matrix: {result.copy_error}", highlight=False)
    for note in result.notes:
        console.print(f"[dim]note: {note}[/dim]", highlight=False)
    console.print(f"[dim]{result.elapsed_s:.1f} s[/dim]")
