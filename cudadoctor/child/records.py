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
