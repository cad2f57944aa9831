"""Process checks the tests share (Linux /proc): is a child still running, and which children does a process have."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Still running: a process that has ended, or is a zombie waiting to be reaped, is not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] not in ("Z", "X")
    except OSError:
        return False


def children(pid: int) -> list:
    """The pids of a process's children (its main thread's), [] once it has ended."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []
