"""Writing files the way readers that poll them need: all or nothing."""

from __future__ import annotations

import os
import tempfile
from typing import Optional


def atomic_write(path: str, data: bytes, mode: Optional[int] = None, make_dirs: bool = False) -> None:
    """Write to a temporary file next to `path`, then os.replace: readers see all or nothing.

    `mode` sets the file's permission bits before it takes the name (the temporary file is 0600), so a
    reader running as another user (node_exporter's textfile collector) never meets an unreadable file.
    `make_dirs`: create missing folders (cudadoctor's own cache only; a path the user names must exist,
    else FileNotFoundError: cudadoctor creates nothing outside its cache on its own)."""
    d = os.path.dirname(path) or "."
    if make_dirs:
        os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
