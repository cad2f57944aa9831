"""Running one bench child (torch or driver-API) through the System port: its records streamed to a
progress callback, and why it stopped early. Shared by runner.py and driver_runner.py, below both."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

from cudadoctor.bench.records import BenchRun, build_run, parse_records
from cudadoctor.child.records import stop_reason as child_stop_reason
from cudadoctor.system.base import System
from cudadoctor.system.proc import ProcResult


def stop_reason(res: ProcResult, run: BenchRun, what: str = "the bench child") -> str:
    """Why the child stopped before its end ('' when it finished)."""
    return child_stop_reason(res, what, run.doing(), run.crash, run.done)


class _Tail:
    """Polls the child's progress file (through the System port) and hands new records over."""

    def __init__(self, system: System, path: str, sink: Callable[[dict], None]):
        self.system, self.path, self.sink = system, path, sink
        self.seen = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.1):
            self.poll()
        self.poll()

    def poll(self) -> None:
        text = self.system.read_text(self.path) or ""
        recs = parse_records(text)
        for rec in recs[self.seen:]:
            try:
                self.sink(rec)
            except Exception:  # noqa: BLE001 - a display problem must not stop the bench
                pass
        self.seen = max(self.seen, len(recs))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=2)


def _progress_path(opts, name: str) -> Optional[str]:
    if opts.progress is None or not opts.progress_dir:
        return None
    try:
        os.makedirs(opts.progress_dir, exist_ok=True)
    except OSError:
        return None
    return os.path.join(opts.progress_dir, f"{name}-{os.getpid()}-{int(time.time() * 1000)}.jsonl")


def run_child(system: System, argv: list, opts, name: str) -> tuple:
    """Run one bench child; (ProcResult, BenchRun). Records are streamed to opts.progress when possible."""
    path = _progress_path(opts, name)
    if path:
        argv = list(argv) + ["--progress", path]
        with _Tail(system, path, opts.progress):
            res = system.run(argv, timeout=opts.timeout)
        try:
            os.unlink(path)
        except OSError:
            pass
    else:
        res = system.run(argv, timeout=opts.timeout)
    return res, build_run(parse_records(res.stdout))
