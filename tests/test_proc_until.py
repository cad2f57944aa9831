"""proc.finish(until=...): stop waiting once a child has reported everything, without leaving it behind.

health's CUDA child reports "done" and then spends ~0.1 s per GPU releasing its contexts as it exits
(measured on the 2x H200, 2026-11-30); the parent answers at "done" and a reaper collects the child.
"""

from __future__ import annotations

import sys
import time

from cudadoctor.facts.health import launch_done
from cudadoctor.facts.health_launch import LAUNCH_MARK
from cudadoctor.system import proc
from proc_support import alive

CHILD = (
    "import sys, time\n"
    "sys.stdout.write('@@X@@ first\\n'); sys.stdout.flush(); time.sleep(0.2)\n"
    "sys.stdout.write('@@X@@ done\\n'); sys.stdout.flush()\n"
    "time.sleep(float(sys.argv[1]))\n"
)



def test_finish_returns_at_the_final_record_and_the_child_is_reaped():
    s = proc.start([sys.executable, "-c", CHILD, "1.0"])
    t0 = time.monotonic()
    res = proc.finish(s, 10, until=lambda out: b"@@X@@ done\n" in out)
    waited = time.monotonic() - t0
    assert waited < 0.8, waited  # not the child's extra second
    assert res.extra.get("detached") and res.returncode is None and not res.timed_out
    assert "@@X@@ first" in res.stdout and "@@X@@ done" in res.stdout
    pid = s.live.p.pid
    assert alive(pid)  # still in its second of sleep: it was not killed
    deadline = time.monotonic() + 5
    while s.live.p.returncode is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.live.p.returncode == 0 and not alive(pid)  # it ended on its own, and the reaper collected it


def test_finish_without_the_record_waits_for_the_end_or_the_timeout():
    s = proc.start([sys.executable, "-c", CHILD, "0.1"])
    res = proc.finish(s, 10, until=lambda out: b"never\n" in out)
    assert res.returncode == 0 and not res.extra.get("detached")
    s = proc.start([sys.executable, "-c", CHILD, "30"])
    t0 = time.monotonic()
    res = proc.finish(s, 1.0, until=lambda out: b"never\n" in out)
    assert res.timed_out and time.monotonic() - t0 < 5


def test_launch_done_needs_the_whole_final_record():
    rec = LAUNCH_MARK + '{"stage": "done", "total_s": 0.3}'
    assert launch_done((LAUNCH_MARK + '{"stage": "init"}\n' + rec + "\n").encode())
    assert not launch_done((LAUNCH_MARK + '{"stage": "init"}\n' + rec).encode())  # the line is not whole yet
    assert not launch_done((LAUNCH_MARK + '{"stage": "device", "ordinal": 0}\n').encode())
    assert not launch_done(b'{"stage": "done"}\n')  # not one of the child's records
