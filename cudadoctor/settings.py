"""Settings shared by every layer (timeouts read from the environment). Imports nothing of cudadoctor,
so any module may use it without an arrow running backwards (system -> facts -> checks -> render)."""

from __future__ import annotations

import math
import os


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable `name` when it holds a positive number, else `default`."""
    try:
        v = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return v if math.isfinite(v) and v > 0 else default
