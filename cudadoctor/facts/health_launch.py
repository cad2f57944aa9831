"""Where health's kernel-launch child is and how it is started: light on purpose, so that
commands/health.py can start the child before it imports the rest of cudadoctor (probes/health_launch.py
runs for about half a second; everything else happens meanwhile)."""

from __future__ import annotations

import os

from cudadoctor.paths import data_dir

LAUNCH_MARK = "@@CDHEALTH@@"
LAUNCH_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "probes", "health_launch.py")


def launch_argv(python: str) -> list:
    """Isolated (-I) and without site (-S): the child needs only ctypes and cudadoctor's own binding."""
    return [python, "-I", "-S", LAUNCH_SCRIPT, str(data_dir("probe_kernels") / "health.ptx")]
