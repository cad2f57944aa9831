"""The host compilers a CUDA release accepts, read from its own include/crt/host_config.h.

NVIDIA publishes the header in the nvidia-cuda-crt wheel (160 kB) on PyPI, one release per toolkit
(13.5.37 for CUDA 13.5). Its `#error -- unsupported GNU version! gcc versions later than N` and
`__clang_major__ >= N` tests are what nvcc enforces, so they are read rather than taken from docs.
"""

from __future__ import annotations

import re
import zipfile
from typing import Optional

from matrix_refresh.wheel import WheelError, _SeekableRanges

MEMBER_SUFFIX = "include/crt/host_config.h"
_GCC = re.compile(r"#if\s+__GNUC__\s*>\s*(\d+)")
_CLANG = re.compile(r"__clang_major__\s*>=\s*(\d+)")
_MSVC = re.compile(r"_MSC_VER\s*<\s*(\d+)\s*\|\|\s*_MSC_VER\s*>=\s*(\d+)")
_MSVC_YEARS = re.compile(r"Only the versions between (\d{4}) and (\d{4})")


def limits(text: str) -> dict:
    """{'gcc_max': 16, 'clang_max': 22, 'msvc': '2019-2026 (_MSC_VER 1920-1959)'} from host_config.h."""
    out: dict = {}
    g = [int(x) for x in _GCC.findall(text)]
    if g:
        out["gcc_max"] = max(g)
    c = [int(x) for x in _CLANG.findall(text)]
    if c:
        out["clang_max"] = max(c) - 1  # "clang_major >= 23 is refused": 22 is the newest accepted
    m, y = _MSVC.search(text), _MSVC_YEARS.search(text)
    if m and y:
        out["msvc"] = f"{y.group(1)}-{y.group(2)} (_MSC_VER {m.group(1)}-{int(m.group(2)) - 1})"
    return out


def read_limits(ranges) -> dict:
    """limits() of the host_config.h inside an nvidia-cuda-crt wheel behind `ranges`."""
    try:
        z = zipfile.ZipFile(_SeekableRanges(ranges))
        name = next((n for n in z.namelist() if n.endswith(MEMBER_SUFFIX)), None)
        if name is None:
            raise WheelError(f"the wheel has no {MEMBER_SUFFIX}")
        text = z.read(name).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, OSError, KeyError) as e:
        raise WheelError(f"cannot read {MEMBER_SUFFIX}: {e}") from e
    out = limits(text)
    if "gcc_max" not in out:
        raise WheelError(f"{name}: no gcc version test found")
    return out


def crt_release_for(crt, cuda_mm: str) -> Optional[object]:
    """The newest nvidia-cuda-crt release of a CUDA minor ('13.5' -> 13.5.37)."""
    rels = [r for r in (crt.releases if crt else []) if ".".join(r.version.split(".")[:2]) == cuda_mm]
    return rels[-1] if rels else None
