"""`cudadoctor explain`: a pasted error or a whole log -> known causes and fixes, root cause first."""

from __future__ import annotations

import typer

HELP = """Explain a CUDA error: paste it, pipe a log, or point at a file.

  cudadoctor explain "RuntimeError: CUDA error: no kernel image is available"
  python train.py 2>&1 | cudadoctor explain -
  cudadoctor explain --file train.log --json

Exit code 0: recognised; 1: not recognised; 2: bad input."""


def register(app: typer.Typer) -> None:
    @app.command("explain", help=HELP)
    def explain(
        text: list[str] = typer.Argument(None, help="The error text ('-' reads stdin)."),
        file: str = typer.Option(None, "--file", "-f", help="Read the text from this file (any size)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout."),
        offline: bool = typer.Option(False, "--offline", help="Do not look at this machine; explain the text only."),
        list_all: bool = typer.Option(False, "--list", help="List every known signature."),
    ) -> None:
        import json
        import os
        import sys

        from cudadoctor.explain import personal, rank, render, scan, scan_pool, signatures

        def usage(msg: str) -> "typer.Exit":
            typer.echo(f"cudadoctor explain: {msg}", err=True)
            return typer.Exit(2)

        sigs = signatures.load()
        if list_all:
            if as_json:
                typer.echo(json.dumps(render.list_dict(sigs), indent=2))
            else:
                typer.echo(render.list_text(sigs), nl=False)
            raise typer.Exit(0)

        args = list(text or [])
        scanner = scan.Scanner(sigs)
        sample = ""
        if file is not None:
            if args:
                raise usage("give the text or --file, not both")
            try:
                fh = open(file, "rb")
            except OSError as e:
                raise usage(f"cannot read {file}: {e.strerror or e}")
            with fh:  # no seeking back: --file may be a pipe or a FIFO
                head = fh.read(65536)
                sample = head.decode("utf-8", "replace")
                res = scanner.scan_stream(_Prefixed(head, fh), workers=scan_pool.default_workers())
        elif args == ["-"]:
            stream = sys.stdin.buffer
            head = stream.read(65536)
            sample = head.decode("utf-8", "replace")
            res = scanner.scan_stream(_Prefixed(head, stream), workers=scan_pool.default_workers())
        elif args:
            sample = " ".join(args)
            res = scanner.scan_text(sample)
        else:
            raise usage("no text given. Usage: cudadoctor explain \"ERROR TEXT\" | explain - | explain --file LOG")
        if res.blank:
            raise usage("the input is empty")

        found = rank.matches(sigs, res)
        facts: dict = {}
        names = [] if offline else personal.facts_needed(found)
        if names:
            facts = personal.gather(names)
        m = personal.load_matrix()
        personals = {x.id: personal.personalise(x, facts, m) for x in found[: personal.MAX_MATCHES]}
        close = rank.fallback(sigs, found, sample)  # never an empty answer: guesses when nothing is strong
        from cudadoctor.redact import Redactor

        scrub = Redactor(os.environ)  # a pasted log can hold tokens: never echo them back
        if as_json:
            typer.echo(scrub(json.dumps(render.result_dict(found, personals, res, close, sorted(facts), offline),
                                        indent=2)))
        else:
            typer.echo(scrub(render.text_report(found, personals, close, res, offline)), nl=False)
        raise typer.Exit(0 if found else 1)


class _Prefixed:
    """A binary stream that first yields `head` (already read to sample the text)."""

    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head[:n], self.head[n:]
            return out
        return self.rest.read(n)
