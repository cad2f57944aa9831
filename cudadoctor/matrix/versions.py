"""Version parsing for the matrix: packaging's Version, plus major.minor and cc helpers."""

from __future__ import annotations

import re
from typing import Iterable, Optional

from packaging.version import InvalidVersion, Version

_RE_NUMERIC = re.compile(r"^\s*v?(\d+(?:\.\d+)*)\s*$", re.IGNORECASE)


def parse_version(text) -> Optional[Version]:
    """'12.4', '535.104.05', 'V13.0.88' -> Version; None for anything else (no pre/post tags)."""
    if text is None:
        return None
    m = _RE_NUMERIC.match(str(text))
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:  # pragma: no cover - the regex admits only release numbers
        return None


def major_minor(text) -> Optional[tuple]:
    """(major, minor) of a version string; '12' -> (12, 0); None if it does not parse."""
    v = parse_version(text)
    if v is None:
        return None
    r = v.release + (0,)
    return (r[0], r[1])


def mm_text(mm: tuple) -> str:
    return f"{mm[0]}.{mm[1]}"


def cc_text(cc: tuple) -> str:
    return f"{int(cc[0])}.{int(cc[1])}"


def cc_key(text: str) -> tuple:
    a, b = text.split(".")
    return (int(a), int(b))


def split_range(item: str) -> tuple:
    """'11.0-11.8' -> ((11,0),(11,8)); '12.0' -> ((12,0),(12,0))."""
    lo, _, hi = item.partition("-")
    a, b = major_minor(lo), major_minor(hi or lo)
    if a is None or b is None:
        raise ValueError(f"not a version range: {item!r}")
    return a, b


def cuda_in_ranges(mm: tuple, items: Iterable[str]) -> bool:
    return any(lo <= mm <= hi for lo, hi in (split_range(i) for i in items))


def cudnn_from_int(n) -> Optional[str]:
    """torch.backends.cudnn.version(): 91900 -> '9.19.0' (cuDNN 9+), 8902 -> '8.9.2' (cuDNN <= 8)."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return None
    if n <= 0:
        return None
    if n >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"
