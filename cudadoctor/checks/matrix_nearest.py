"""Shared by the matrix steps: mark a finding judged from the nearest row of the data (no step here).

A verdict drawn from a row older than what the machine has is marked "unverified" in its summary and
evidence; a FAIL drawn that way becomes a WARN, because a wrong diagnosis is worse than none (a newer
toolkit may accept what the last row refuses). matrix.freshness says once what is newer.
"""

from __future__ import annotations

import dataclasses

from cudadoctor.matrix.freshness import suffix, unverified
from cudadoctor.model import Finding, Fix, Status


def mark(f: Finding, have: str, row: str, stops: str, soften: bool = True) -> Finding:
    """`soften`: the verdict itself came from the row (not only a number in its fix): FAIL -> WARN."""
    if f.status is Status.SKIP:
        return f
    status = Status.WARN if soften and f.status is Status.FAIL else f.status
    return dataclasses.replace(f, status=status, summary=f.summary + suffix(have, row),
                               evidence={**f.evidence, "matrix_row": unverified(have, row, stops)})


def mark_all(findings: list, have: str, row: str, stops: str, keep: tuple = ()) -> list:
    """`mark` every finding but those whose id is in `keep`; SKIPs are left alone."""
    return [f if f.id in keep else mark(f, have, row, stops) for f in findings]


def refix(f: Finding, text: str, commands: tuple) -> Finding:
    """The same finding with another fix (when the nearest row's numbers would mislead in a command)."""
    return dataclasses.replace(f, fix=Fix(text, tuple(commands), f.fix.docs if f.fix else ""))
