"""Where cudadoctor's own data lives: shipped data (matrix/, probe_kernels/) and the cache dir."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`matrix` or `probe_kernels`: inside an installed wheel (cudadoctor/_data/NAME) or a checkout."""
    installed = _PKG / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PKG.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"cudadoctor's data folder {name!r} is missing (looked in {installed} and {checkout})")


def cache_dir() -> Path:
    """The one place cudadoctor writes: $CUDADOCTOR_CACHE_DIR or the platform's user cache dir."""
    env = os.environ.get("CUDADOCTOR_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("cudadoctor", appauthor=False))
