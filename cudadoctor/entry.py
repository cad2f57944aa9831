"""The `cudadoctor` console script. `cudadoctor health` runs from here, before typer, click and the other
commands are imported: it runs before every job, and they would cost ~60 ms of its ~0.5 s budget.
Everything else goes to the typer app (cudadoctor/cli.py)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["health"]:
        from cudadoctor.commands.health import run_main
        from cudadoctor.system import stop

        stop.install()
        sys.exit(run_main(sys.argv[2:]))
    from cudadoctor.cli import main as cli_main

    cli_main()
