"""Ctrl-C and SIGTERM: kill cudadoctor's children (they run in their own sessions and never get the
terminal's signals), then leave at once instead of waiting for worker threads that wait on them."""

from __future__ import annotations

import os
import signal
import sys

from cudadoctor.system import proc


def _stop_on_signal(signum, frame) -> None:  # pragma: no cover - exercised by tests/faults
    proc.kill_all()
    try:
        sys.stderr.write("cudadoctor: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(128 + signum)


def install() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # keep `nohup`/background-job semantics
                signal.signal(sig, _stop_on_signal)
        except (ValueError, OSError):  # not the main thread, or the signal cannot be caught here
            pass
