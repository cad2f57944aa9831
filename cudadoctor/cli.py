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

def _no_type_for_flags() -> None:
    """typer's rich help prints a type after every option, `<bool>` after flags too, which take no value: it
    reads as if `--json <bool>` wanted an argument. Flags get no type column; other options keep theirs."""
    opt = getattr(getattr(typer, "core", None), "TyperOption", None)
    shown = getattr(opt, "display_type_rich", None)
    if shown is None or getattr(shown, "_flags_untyped", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and self.metavar is None else shown(self, ctx)

    display_type_rich._flags_untyped = True
    opt.display_type_rich = display_type_rich


_no_type_for_flags()
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


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """The commands panel shows each command's first paragraph with the docstring's own line breaks (typer keeps
    them there, unlike in a command's own help), so help wrapped in mid-sentence. Give each command a short help:
    that paragraph as one line, wrapped at the terminal's edge."""
    import inspect

    for info in typer_app.registered_commands:
        text = info.help or (info.callback.__doc__ if info.callback else "") or ""
        if info.short_help is None and text:
            info.short_help = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


_one_line_summaries(app)


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
