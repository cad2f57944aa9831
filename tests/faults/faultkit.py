"""Fault-injection kit: the REAL CLI as a subprocess, with fake tools first on PATH.

Every case asserts the four things a doctor owes a broken machine: it ends within its time limit
(plus a margin for interpreter start-up on a loaded 2-core runner), it exits with the documented code,
it names the fault in a finding (ids and statuses from --json), and it never shows a Python traceback.

cudadoctor's own timeouts are lowered through CUDADOCTOR_TIMEOUT_SMI / _NVML / _TOOL (Options in
cudadoctor/facts/registry.py) and `check --timeout` for the torch probe, so hung-tool cases take seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]

# cudadoctor timeouts used by the suite (seconds)
T_SMI, T_NVML, T_TOOL, T_TORCH = 2.0, 3.0, 2.0, 3.0
KILL_GRACE = 2.0  # cudadoctor.system.proc.KILL_GRACE_S
# interpreter start-up, torch import in the probe child, JSON rendering: generous for a busy 2-core box
MARGIN = float(os.environ.get("CUDADOCTOR_FAULT_MARGIN", "12"))
# a case with no hang still has to end well inside this
BASE_LIMIT = 6.0

TIMINGS: list = []  # (case, elapsed, limit) for the summary at the end of the run

FAST_ENV = {
    "CUDADOCTOR_TIMEOUT_SMI": str(T_SMI),
    "CUDADOCTOR_TIMEOUT_NVML": str(T_NVML),
    "CUDADOCTOR_TIMEOUT_TOOL": str(T_TOOL),
    "NO_COLOR": "1",
    "COLUMNS": "200",
}


@dataclass
class Run:
    argv: list
    rc: int
    out: str
    err: str
    elapsed: float
    limit: float
    extra: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.out + "\n" + self.err

    def report(self) -> dict:
        try:
            return json.loads(self.out)
        except ValueError as e:  # pragma: no cover - a failure message, not a path
            raise AssertionError(f"stdout is not JSON ({e}): {self.out[:500]!r}\nstderr: {self.err[-800:]}")

    def findings(self) -> dict:
        """finding id -> status, over every step of the --json report."""
        return {f["id"]: f["status"] for s in self.report()["steps"] for f in s["findings"]}

    def finding(self, fid: str) -> dict:
        for s in self.report()["steps"]:
            for f in s["findings"]:
                if f["id"] == fid:
                    return f
        raise AssertionError(f"no finding {fid} in {sorted(self.findings())}")

    def steps(self) -> dict:
        return {s["id"]: s["status"] for s in self.report()["steps"]}

    def fact(self, name: str) -> dict:
        return self.report()["facts"][name]


def write_tool(folder: Path, name: str, body: str, mode: int = 0o755, shebang: str = "#!/bin/sh") -> Path:
    """An executable script `name` in `folder` (body dedented; shebang prepended unless body is bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    if isinstance(body, bytes):
        p.write_bytes(body)
    else:
        p.write_text(shebang + "\n" + textwrap.dedent(body).lstrip("\n"))
    p.chmod(mode)
    return p


def write_py_tool(folder: Path, name: str, body: str) -> Path:
    return write_tool(folder, name, body, shebang=f"#!{PY}")


def fake_torch(root: Path, init_body: str) -> Path:
    """A package `torch` under root whose __init__ runs `init_body`; returns root (for PYTHONPATH)."""
    pkg = root / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(init_body).lstrip("\n"))
    return root


def target_python(folder: Path, pythonpath: Path = None, before: str = "") -> Path:
    """A `--python` target: a wrapper that runs `before` (shell) and then this venv's interpreter,
    with `pythonpath` first on its PYTHONPATH (cudadoctor itself never sees that PYTHONPATH)."""
    pp = f'PYTHONPATH="{pythonpath}" ' if pythonpath else ""
    return write_tool(folder, "python", f"""
        {before}
        {pp}exec "{PY}" "$@"
        """)


class Faults:
    """Per-test fixture: a fake-tool folder first on PATH, a temporary HOME/cache, and `run`."""

    def __init__(self, tmp_path: Path, request):
        self.tmp = tmp_path
        self.bin = tmp_path / "fakebin"
        self.bin.mkdir()
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.cache = tmp_path / "cache"
        self.request = request
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CUDADOCTOR_")}
        self.env.update(FAST_ENV)
        self.env.update({
            "HOME": str(self.home),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "CUDADOCTOR_CACHE_DIR": str(self.cache),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        })
        self.pidfiles: list = []

    def tool(self, name: str, body, mode: int = 0o755) -> Path:
        return write_tool(self.bin, name, body, mode)

    def pidfile(self) -> Path:
        """A file a fake tool writes the pid of a process it leaves behind into (killed at teardown)."""
        p = self.tmp / f"leftover{len(self.pidfiles)}.pid"
        self.pidfiles.append(p)
        return p

    def run(self, *args, limit: float = BASE_LIMIT, env: dict = None, drop_env=(), stdout=None,
            stdin=None, codes=(0, 1), traceback_ok: bool = False, case: str = "") -> Run:
        """Run `python -m cudadoctor *args`; assert it ended within limit + MARGIN, exited with one of
        `codes` and printed no traceback."""
        e = dict(self.env)
        e.update(env or {})
        for k in drop_env:
            e.pop(k, None)
        argv = [PY, "-m", "cudadoctor", *[str(a) for a in args]]
        hard = limit + MARGIN + 30  # the test's own watchdog: a hang fails the test instead of the run
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=stdout if stdout is not None else subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                             env=e, cwd=str(self.tmp), start_new_session=True)
        try:
            out, err = p.communicate(timeout=hard)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise AssertionError(f"{' '.join(map(str, args))}: still running after {hard:.0f} s (limit {limit:g} s); "
                                 f"stderr: {(err or b'')[-800:]!r}")
        elapsed = time.monotonic() - t0
        r = Run(argv, p.returncode, (out or b"").decode("utf-8", "replace"),
                (err or b"").decode("utf-8", "replace"), elapsed, limit)
        TIMINGS.append((case or self.request.node.name, elapsed, limit))
        assert elapsed <= limit + MARGIN, f"took {elapsed:.1f} s, limit {limit:g} s + {MARGIN:g} s margin"
        if not traceback_ok:
            assert_no_traceback(r)
        assert r.rc in codes, f"exit code {r.rc}, expected {codes}\nstdout: {r.out[-1500:]}\nstderr: {r.err[-1500:]}"
        return r

    def cleanup(self) -> None:
        for pf in self.pidfiles:  # one pid a line: a tool may run several times (nvidia-smi runs twice)
            try:
                pids = [int(x) for x in pf.read_text().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def assert_no_traceback(r: Run) -> None:
    for marker in ("Traceback (most recent call last)", "internal error:", "Exception ignored"):
        assert marker not in r.text, f"{marker!r} in output:\n{r.text[-3000:]}"


def command_names() -> set:
    from typer.main import get_command

    from cudadoctor.cli import app

    return set(get_command(app).commands)


def need_command(name: str) -> None:
    if name not in command_names():
        pytest.skip(f"`cudadoctor {name}` has not landed yet")
