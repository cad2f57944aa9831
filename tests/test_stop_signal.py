"""Ctrl-C's handler (cudadoctor/system/stop.py) interrupts the main thread wherever it is. Two places where it
used to be able to hang or to skip its exit: inside `with proc._LIVE_LOCK` (a child being started or reaped in the
main thread: a plain Lock deadlocked the handler), and inside a write to sys.stderr (re-entering its buffer raises
RuntimeError). Each runs in its own interpreter, with a timeout, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

SIGNAL_INSIDE = {
    "holding the live-children lock": (
        "from cudadoctor.system import proc\n"
        "with proc._LIVE_LOCK:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"),
    "writing to stderr": (  # the handler's own write to sys.stderr would re-enter its buffer and raise
        "class Busy:\n"
        "    def write(self, s):\n"
        "        raise RuntimeError('reentrant call')\n"
        "    flush = write\n"
        "sys.stderr = Busy()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"),
}


@pytest.mark.parametrize("where", list(SIGNAL_INSIDE))
def test_ctrl_c_exits_130_wherever_it_lands(where):
    code = ("import os, signal, sys, time\n"
            "from cudadoctor.system import stop\n"
            "stop.install()\n" + SIGNAL_INSIDE[where] + "print('not stopped')\n")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"Ctrl-C {where}: cudadoctor hung")
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    assert "cudadoctor: interrupted" in p.stderr and "not stopped" not in p.stdout


def test_a_forked_child_signalled_before_its_own_handling_exits_silently():
    # explain's scan workers are forked from cudadoctor and inherit its handler until their initializer runs: a Ctrl-C
    # in that window must not print the parent's message once per worker
    code = ("import os, signal, sys, time\n"
            "from cudadoctor.system import stop\n"
            "stop.install()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "    os._exit(0)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0 and p.stdout.strip() == "130", (p.returncode, p.stdout, p.stderr[-2000:])
    assert "interrupted" not in p.stderr
