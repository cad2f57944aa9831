"""The command line: thin. Options -> run -> render -> exit code.

Subcommands live in cudadoctor/commands/*.py; each module has `register(app)`. Modules import
nothing heavy at import time (no torch, no pynvml, no rich) so `--help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import typer

from cudadoctor import __version__

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

app = typer.Typer(
    name="cudadoctor",
    help="A doctor for CUDA environments: finds the broken layer and says what to type to fix it.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cudadoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """cudadoctor: check, explain, probe and benchmark CUDA set-ups."""


def _register_commands() -> None:
    import cudadoctor.commands as pkg

    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"cudadoctor.commands.{m.name}")
        reg = getattr(mod, "register", None)
        if reg is not None:
            reg(app)


_register_commands()


def fail_usage(message: str) -> "typer.Exit":
    """Print a usage error and return the Exit to raise (exit code 2)."""
    typer.echo(f"cudadoctor: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def check_python_option(python) -> None:
    """`--python PATH` must name an executable file (the target interpreter); else a usage error."""
    if python is None:
        return
    if not python.strip():
        raise fail_usage("--python needs a path to an interpreter")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise fail_usage(f"--python {python}: no executable file there")


def main() -> None:
    from cudadoctor.system import stop

    stop.install()
    try:
        app(standalone_mode=True)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except KeyboardInterrupt:
        sys.stderr.write("cudadoctor: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - never a traceback on the user
        if os.environ.get("CUDADOCTOR_DEBUG"):
            raise
        sys.stderr.write(f"cudadoctor: internal error: {type(e).__name__}: {e}\n"
                         "Set CUDADOCTOR_DEBUG=1 for the traceback, and please report it.\n")
        sys.exit(EXIT_USAGE)


def _quiet_broken_pipe() -> None:
    # The reader went away (e.g. `cudadoctor check --json | head -1`): stop quietly.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    sys.exit(EXIT_FAIL)
