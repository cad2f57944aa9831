#!/usr/bin/env python3
"""Refresh cudadoctor's version matrix from the package indexes: prints a diff of matrix/*.toml.

Maintainer-run, never at user time (README, "Keeping the version matrix current"):

    python scripts/refresh_matrix.py                  # ask PyPI (and the PyTorch index), print the diff
    python scripts/refresh_matrix.py --apply          # ... and write the proposed rows into matrix/
    python scripts/refresh_matrix.py --record DIR     # ... and save every answer into DIR
    python scripts/refresh_matrix.py --replay DIR     # no network: answer from DIR (the tests do this)

Exit: 0 the tables cover everything the indexes know (only index.toml's date moved), 1 rows were
proposed or something needs a hand (the "to do" lines), 2 usage error or PyPI did not answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from cudadoctor.matrix import TABLES, Matrix  # noqa: E402
from matrix_refresh.gather import Reader, gather  # noqa: E402
from matrix_refresh.index import FetchError, Fetcher  # noqa: E402
from matrix_refresh.propose import diff, new_texts, propose  # noqa: E402
from matrix_refresh.wheel import HttpRanges  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_tables(folder: str) -> tuple:
    """(Matrix, {table: text}) from a folder of matrix/*.toml."""
    texts, tables = {}, {}
    for name in TABLES:
        path = os.path.join(folder, f"{name}.toml")
        try:
            with open(path, encoding="utf-8") as f:
                texts[name] = f.read()
        except FileNotFoundError:
            texts[name] = ""
        tables[name] = tomllib.loads(texts[name])
    return Matrix(tables), texts


def report(snap, p, d: str) -> str:
    lines = [f"# scripts/refresh_matrix.py, {snap.checked}: what the indexes know"]
    for name, pkg in sorted(snap.pypi.items()):
        r = pkg.newest()
        lines.append(f"#   {name:26} " + (f"{r.version} ({r.date})" if r else f"no answer: {pkg.error}"))
    for name, w in sorted(snap.wheels.items()):
        lines.append(f"#   read {name}: " + (w["error"] if w.get("error") else
                     f"{len(w['sass_counts'])} SASS targets in {sum(w['sass_counts'].values())} fatbin entries, "
                     f"{w.get('fetched_bytes', 0) / 1e6:.0f} MB fetched in {w.get('requests', 0)} requests"))
    for mm, lim in sorted(snap.crt.items()):
        lines.append(f"#   host_config.h of CUDA {mm}: " + (lim["error"] if lim.get("error") else
                     f"gcc <= {lim.get('gcc_max')}, clang <= {lim.get('clang_max')}"))
    lines += [f"# note: {n}" for n in snap.notes]
    lines += [f"# to do: {t}" for t in p.todo]
    if not p.rows and not p.todo:
        lines.append("# the tables cover everything the indexes know")
    return "\n".join(lines) + "\n" + d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Propose matrix/*.toml rows from what the package indexes know.")
    ap.add_argument("--matrix", default=os.path.join(REPO, "matrix"), help="the tables' folder (default: matrix/)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--record", metavar="DIR", help="also save every answer into DIR")
    mode.add_argument("--replay", metavar="DIR", help="answer from DIR instead of the network")
    ap.add_argument("--no-wheels", action="store_true", help="do not read archs from torch wheels (no download)")
    ap.add_argument("--apply", action="store_true", help="write the proposed rows into the tables")
    ap.add_argument("--today", default=date.today().isoformat(), help="the date written as 'checked'")
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.matrix, "torch.toml")):
        print(f"refresh_matrix: {args.matrix} has no torch.toml", file=sys.stderr)
        return 2
    m, old = load_tables(args.matrix)
    fetcher = Fetcher("replay" if args.replay else "record" if args.record else "live", args.replay or args.record)
    try:
        snap = gather(m, fetcher, Reader(fetcher, HttpRanges), args.today, read_wheels=not args.no_wheels)
    except FetchError as e:
        print(f"refresh_matrix: {e}", file=sys.stderr)
        return 2
    p = propose(m, snap)
    new = new_texts(old, p)
    d = diff(old, new)
    sys.stdout.write(report(snap, p, d))
    if args.apply:
        for table, text in new.items():
            with open(os.path.join(args.matrix, f"{table}.toml"), "w", encoding="utf-8") as f:
                f.write(text)
        print(f"# written to {args.matrix}; now fill the 'to do' values and run: pytest tests/test_matrix_data.py",
              file=sys.stderr)
    return 1 if (p.rows or p.todo) else 0


if __name__ == "__main__":
    sys.exit(main())
