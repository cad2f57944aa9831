"""Ctrl-C and SIGTERM: kill cudadoctor's children (they run in their own sessions and never get the
terminal's signals), then leave at once instead of waiting for worker threads that wait on them."""

from __future__ import annotations

import os
import signal

from cudadoctor.system import proc

_PID = 0  # the process that installed the handler; a process forked from it (explain's scan workers) inherits it


_STOPPING = False  # set by the first signal: a second one landing inside the handler (it takes locks) exits at once


def _stop_on_signal(signum, frame) -> None:  # pragma: no cover - exercised by tests/faults
    global _STOPPING
    if os.getpid() != _PID or _STOPPING:  # a forked worker signalled before it set its own handling, or a 2nd signal
        os._exit(128 + signum)
    _STOPPING = True
    try:
        proc.kill_all()
        # os.write, not sys.stderr: the handler may interrupt the main thread inside a write to sys.stderr, and
        # re-entering its buffer raises RuntimeError, which would skip the exit below
        os.write(2, b"cudadoctor: interrupted\n")
    except BaseException:  # noqa: BLE001 - whatever happens, stop
        pass
    os._exit(128 + signum)


def install() -> None:
    global _PID
    _PID = os.getpid()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # keep `nohup`/background-job semantics
                signal.signal(sig, _stop_on_signal)
        except (ValueError, OSError):  # not the main thread, or the signal cannot be caught here
            pass
