"""Versions read from a pasted report, compared: the root cause a dump shows without an error line.

`torch.utils.collect_env`, `nvidia-smi` and `deviceQuery` print the CUDA a program was built for
and the newest CUDA the driver runs, often with no error message at all ("is_available() is
False"). A signature may declare a gate (data: `gate = {needs = ..., has = ..., weight = ...}`) over
two values its capture-only patterns (weight 0) read; when the text shows `needs` newer than `has`
the signature is confirmed with the gate's weight.
"""

from __future__ import annotations

import re
from typing import Optional

_NUM = re.compile(r"^(\d+)(?:\.(\d+))?")


def cuda_version(text: str) -> Optional[tuple]:
    """'12.4' -> (12, 4); a wheel tag's digits '124' or 'cu118' -> (12, 4) / (11, 8); None if unreadable."""
    t = text.strip().lower().removeprefix("cu")
    if t.isdigit() and len(t) in (2, 3):  # cu90, cu102, cu118: the last digit is the minor
        return int(t[:-1]), int(t[-1])
    m = _NUM.match(t)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


def pretty(text: str) -> str:
    """A CUDA version as people write it: 'cu121' -> '12.1', '12.4' stays; unreadable text unchanged."""
    v = cuda_version(text)
    return f"{v[0]}.{v[1]}" if v else text


def driver_too_old(needs: str, has: str) -> bool:
    """Is a driver whose newest CUDA is `has` too old for code built with CUDA `needs`? From CUDA 11
    on, a driver runs any minor release of its major one (minor version compatibility, no PTX JIT);
    before 11 the minor release had to be supported too."""
    n, h = cuda_version(needs), cuda_version(has)
    if n is None or h is None:
        return False
    if n[0] != h[0]:
        return n[0] > h[0]
    return n[0] < 11 and n[1] > h[1]


def differs(needs: str, has: str) -> bool:
    """Do two CUDA versions (torch's build, the nvcc release) differ at major.minor?"""
    n, h = cuda_version(needs), cuda_version(has)
    return n is not None and h is not None and n != h


GATES = {"driver_too_old": driver_too_old, "differs": differs}  # name in the signature data -> comparison


def reading(caps: dict, name: str) -> Optional[str]:
    """caps[name], or caps[name_<anything>]: a regex cannot repeat a group name across alternatives."""
    if not name:
        return None
    if caps.get(name):
        return caps[name]
    return next((v for k, v in sorted(caps.items()) if k.startswith(name + "_") and v), None)


def gate_holds(gate: dict, caps: dict) -> bool:
    needs, has = reading(caps, gate.get("needs", "")), reading(caps, gate.get("has", ""))
    test = GATES.get(gate.get("test", "driver_too_old"))
    return bool(needs and has and test and test(needs, has))
