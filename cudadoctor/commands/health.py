"""`cudadoctor health`: can this node run CUDA work right now? Without the user's Python, fast enough for
every job's prolog.

Options are parsed with argparse, not typer: `cudadoctor health` is dispatched by cudadoctor/entry.py
before typer, click and every other command are imported (about 60 ms of a ~0.5 s budget). The typer
command registered here only lists `health` in `cudadoctor --help` and hands its arguments over.
Exit codes (node-problem-detector's custom-plugin convention): 0 healthy, 1 unhealthy, 2 cannot tell
(or a usage error).
"""

import argparse
import os
import sys
import time

HELP = "Can this node run CUDA work right now? A sub-second node check for Slurm prologs, health checks and NPD."
EPILOG = """exit codes: 0 healthy, 1 unhealthy, 2 cannot tell (or a usage error)

examples:
  cudadoctor health                              # a line per check, each problem with its fix
  cudadoctor health --expect-gpus 8 --expect-driver 580.159.04 --quiet
  cudadoctor health --json --save /var/lib/cudadoctor/health.json
  cudadoctor health --prometheus /var/lib/node_exporter/textfile/cudadoctor.prom
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own prints a usage block; keep cudadoctor's one line
        sys.stderr.write(f"cudadoctor health: {message} (cudadoctor health --help)\n")
        raise SystemExit(2)


def _positive(v: str) -> float:
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {v!r}")
    if not 0 < f < 1e6:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {v!r}")
    return f


def _count(v: str) -> int:
    if not v.isdigit():
        raise argparse.ArgumentTypeError(f"not a GPU count: {v!r}")
    return int(v)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cudadoctor health", description=HELP, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--expect-gpus", type=_count, metavar="N", help="the node must have N GPUs (fewer: unhealthy)")
    p.add_argument("--expect-driver", metavar="VERSION", default="",
                   help="the driver must be VERSION (580, 580.159 or 580.159.04)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON (cudadoctor's report schema)")
    out.add_argument("-q", "--quiet", action="store_true",
                     help="print only the one-line verdict (a Slurm drain reason, an NPD condition message)")
    p.add_argument("--prometheus", nargs="?", const="-", metavar="FILE",
                   help="Prometheus text format: to FILE, written atomically (node_exporter's textfile "
                        "collector), or to stdout without FILE")
    p.add_argument("--save", metavar="FILE", help="also write the JSON report to FILE (atomically)")
    p.add_argument("--no-launch", action="store_true",
                   help="do not launch a kernel on the GPUs (NVML, the kernel log and /dev only)")
    p.add_argument("--timeout", type=_positive, default=20.0, metavar="SECONDS",
                   help="limit for each helper process: NVML, the kernel launch (default 20)")
    p.add_argument("--strict", action="store_true", help="warnings make the node unhealthy too")
    p.add_argument("-v", "--verbose", action="store_true", help="evidence, per-step timings and facts")
    return p


def _write(path: str, text: str) -> None:
    from cudadoctor.system.files import atomic_write

    try:
        atomic_write(path, text.encode(), mode=0o644)
    except OSError as e:
        sys.stderr.write(f"cudadoctor health: cannot write {path}: {e.strerror or e}\n")
        raise SystemExit(2)


def main(argv: list) -> int:
    t0 = time.monotonic()
    args = parser().parse_args(argv)
    if args.prometheus == "-" and (args.json or args.quiet):
        parser().error("--prometheus without FILE prints to stdout: it cannot go with --json or --quiet")
    from cudadoctor.system.host import HostSystem

    system = HostSystem()
    handle = None
    if not args.no_launch:  # the longest part: start it before importing the rest (facts, checks, render)
        from cudadoctor.facts.health_launch import launch_argv

        handle = system.start(launch_argv(system.own_python()))
    from cudadoctor.facts.health_types import HealthExpect
    from cudadoctor.health import run_health

    run = run_health(system, HealthExpect(gpus=args.expect_gpus, driver=args.expect_driver.strip()),
                     timeout=args.timeout, launch=not args.no_launch, strict=args.strict, launch_handle=handle, t0=t0)
    from cudadoctor.render.health_text import render_health_json, render_health_text

    if args.save:
        _write(args.save, render_health_json(run, system.env) + "\n")
    if args.prometheus:
        from cudadoctor.render.prometheus import render_prometheus

        text = render_prometheus(run)
        if args.prometheus == "-":
            sys.stdout.write(text)
            return run.report.exit_code
        _write(args.prometheus, text)
    if args.json:
        sys.stdout.write(render_health_json(run, system.env) + "\n")
    elif args.quiet:
        from cudadoctor.redact import Redactor

        sys.stdout.write(Redactor(system.env)(run.reason) + "\n")
    else:
        render_health_text(run, system.env, verbose=args.verbose)
    return run.report.exit_code


def run_main(argv: list) -> int:
    """main() as a process entry point: never a traceback (exit 2, "cannot tell", with the error)."""
    try:
        code = main(argv)
        sys.stdout.flush()
        return code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("cudadoctor: interrupted\n")
        return 130
    except Exception as e:  # noqa: BLE001 - never a traceback on the user
        if os.environ.get("CUDADOCTOR_DEBUG"):
            raise
        sys.stderr.write(f"cudadoctor health: internal error: {type(e).__name__}: {e}\n"
                         "Set CUDADOCTOR_DEBUG=1 for the traceback, and please report it.\n")
        return 2


def register(app) -> None:
    import typer

    @app.command("health", help=HELP + " Exit 0 healthy, 1 unhealthy, 2 cannot tell. `cudadoctor health "
                 "--help` lists its options.", add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def health(ctx: typer.Context) -> None:
        raise typer.Exit(run_main(list(ctx.args)))
