"""Reading what child scripts report: one JSON object per line after a marker.

Children (the torch probe, the bench child, the driver-API launcher) print `MARK {json}` lines and
flush each at once, so a child that hangs or dies still leaves every record before that. Junk lines
(site hooks, library banners) and a torn last line are skipped.
"""

from __future__ import annotations

import json
from typing import Optional


def parse_marked(stdout: str, mark: str, key: Optional[str] = None) -> list:
    """Every JSON object after `mark` in `stdout`, in order; with `key`, only those with a string `key`."""
    out = []
    for line in stdout.splitlines():
        i = line.find(mark)
        if i < 0:
            continue
        try:
            rec = json.loads(line[i + len(mark):])
        except ValueError:
            continue
        if isinstance(rec, dict) and (key is None or isinstance(rec.get(key), str)):
            out.append(rec)
    return out


def said_last(out: bytes, mark: str, stage: str = "done") -> bool:
    """The output ends with a whole `mark` record of `stage`: the child has said all it will (a parent may
    stop waiting there, see proc.finish(until=...))."""
    i = out.rfind(mark.encode())
    return i >= 0 and out.endswith(b"\n") and f'"stage": "{stage}"'.encode() in out[i:]


def stop_reason(res, what: str, doing: str, crash: str = "", finished: bool = True, tail: int = 300) -> str:
    """Why a child that reports in marked lines stopped before its end ('' when it finished).

    `res` is its ProcResult, `doing` what it was busy with after its last record, `crash` the error a
    crash record carried, `finished` whether its final record arrived."""
    if res.timed_out:
        return f"{what} gave no answer within {res.timeout_s:g} s while {doing} (killed)"
    if crash:
        return f"{what} failed while {doing}: {crash}"
    if res.signal_name:
        return f"{what} was killed by {res.signal_name} while {doing}"
    if not finished:
        text = (res.stderr or res.stdout).strip()[-tail:]
        return f"{what} ended without a report (exit code {res.returncode}) while {doing}" + (
            f": {text}" if text else "")
    return ""
