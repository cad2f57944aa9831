"""Running other programs: argv lists only (never a shell), always with a timeout.

A hung tool must never hang cudadoctor. A timed-out child is killed with its whole process group;
if it still does not die (a process stuck in the kernel on a hung driver), it is abandoned rather
than waited for. Output is captured up to a cap so a tool that spews cannot exhaust memory.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

OUTPUT_CAP = 8 * 1024 * 1024  # bytes kept per stream
KILL_GRACE_S = 2.0

# Children still running, so that Ctrl-C / SIGTERM can kill them: they run in their own sessions and
# never see the terminal's signals themselves.
_LIVE: set = set()
# Re-entrant: kill_all runs in the Ctrl-C handler, which interrupts the main thread wherever it is, also inside
# `with _LIVE_LOCK` (a child being started or reaped); a plain Lock would deadlock cudadoctor there.
_LIVE_LOCK = threading.RLock()
_STOPPING = threading.Event()


def kill_all() -> None:
    """Kill the process group of every child still running and start no new one (cudadoctor is stopping)."""
    _STOPPING.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        _kill_group(p)


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: Optional[int] = None  # None: did not start, or did not end
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0
    timed_out: bool = False
    timeout_s: Optional[float] = None
    not_found: bool = False  # the executable does not exist
    error: str = ""  # why it could not start (permission denied, exec format error, ...)
    truncated: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def started(self) -> bool:
        return not self.not_found and not self.error

    @property
    def signal_name(self) -> Optional[str]:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def describe(self) -> str:
        """One line saying how the run ended, for findings and evidence."""
        cmd = " ".join(self.argv)
        if self.not_found:
            return f"{cmd}: not found"
        if self.error:
            return f"{cmd}: could not start ({self.error})"
        if self.timed_out:
            return f"{cmd}: no answer within {self.timeout_s:g} s (killed)"
        if self.signal_name:
            return f"{cmd}: killed by {self.signal_name}"
        return f"{cmd}: exit code {self.returncode}"

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


def jit_cache_dir() -> str:
    from cudadoctor.paths import cache_dir

    return str(cache_dir() / "nv-compute-cache")


#: what child_env changes in a child's environment
CHILD_ENV_KEYS = ("LC_ALL", "LANG", "PYTHONDONTWRITEBYTECODE", "CUDA_CACHE_PATH")


def child_env(base: Mapping[str, str], overrides: Optional[Mapping[str, Optional[str]]] = None) -> dict:
    """The environment of a child: the user's, made predictable and read-only. An override of None
    removes the variable."""
    env = dict(base)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # read-only: a child interpreter must not write .pyc files
    # read-only: a PTX JIT in a child (a probe build for an older arch, a torch without SASS for this
    # GPU) would otherwise fill the user's ~/.nv/ComputeCache; cudadoctor's own cache dir takes it
    env["CUDA_CACHE_PATH"] = jit_cache_dir()
    for k, v in (overrides or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def user_env_overrides(base: Mapping[str, str]) -> dict:
    """Overrides that give a child the user's own values of what child_env changes: for launchers
    such as srun that carry the environment to another cudadoctor, which must judge the user's."""
    return {k: base.get(k) for k in CHILD_ENV_KEYS}


def _drain(stream, sink: list, cap: int, flag: list) -> None:
    kept = 0
    # read1: whatever is there now. read(n) would wait for n bytes or EOF, and a process the tool left
    # behind holding the pipe would then keep output already written from ever arriving.
    read = getattr(stream, "read1", stream.read)
    try:
        while True:
            chunk = read(65536)
            if not chunk:
                break
            if kept < cap:
                take = chunk[: cap - kept]
                sink.append(take)
                kept += len(take)
                if len(take) < len(chunk):
                    flag[0] = True
            else:
                flag[0] = True
    except (OSError, ValueError):
        pass


def run(
    argv: Sequence[str],
    timeout: float,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    input_bytes: Optional[bytes] = None,
    cap: int = OUTPUT_CAP,
) -> ProcResult:
    return finish(start(argv, env, cwd, input_bytes, cap), timeout)


@dataclass
class Started:
    """A child started by `start`, to be waited for by `finish` (its timeout counts from the start)."""

    live: object  # _Live, or the ProcResult of a child that could not start
    out: list = field(default_factory=list)
    trunc: list = field(default_factory=lambda: [False])


def start(argv: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
          input_bytes: Optional[bytes] = None, cap: int = OUTPUT_CAP) -> Started:
    """Start `argv` now and return at once: the caller does other work while it runs, then `finish`."""
    s = Started(None)
    s.live = _start(argv, env, cwd, input_bytes, cap, s.trunc,
                    lambda p: threading.Thread(target=_drain, args=(p.stdout, s.out, cap, s.trunc), daemon=True))
    return s


def finish(s: Started, timeout: float, until: Optional[Callable[[bytes], bool]] = None) -> ProcResult:
    """Wait for a started child until `timeout` seconds after its start, then kill its group.

    `until(stdout so far)`: once it says the child has reported everything, stop waiting. What the child
    does after its last record is not waited for: health's CUDA child releases a context per GPU as it
    exits, ~0.1 s on an H200 (measured 2026-11-30), spent in the driver after the answer is known. A
    reaper thread collects such a child (and kills its group should it never end); the result then has
    no return code and `extra["detached"]` set."""
    res = _finish(s.live, timeout, (lambda: until(b"".join(list(s.out)))) if until is not None else None)
    if res.started:
        res = dataclasses.replace(res, stdout=b"".join(list(s.out)).decode("utf-8", errors="replace"),
                                  truncated=s.trunc[0])
    return res


def run_lines(
    argv: Sequence[str],
    timeout: float,
    on_line: Callable[[str], None],
    env: Optional[Mapping[str, str]] = None,
    cap: int = OUTPUT_CAP,
) -> ProcResult:
    """Like `run`, but each stdout line goes to `on_line` as it arrives and is not kept (no cap on
    stdout); stderr is kept up to `cap`. A timeout kills the process group; lines read before it
    have been handed over."""
    def pump_of(p: subprocess.Popen) -> threading.Thread:
        def pump() -> None:
            try:
                for raw in p.stdout:
                    on_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
            except (OSError, ValueError):
                pass

        return threading.Thread(target=pump, daemon=True)

    return _finish(_start(argv, env, None, None, cap, [False], pump_of), timeout)


@dataclass
class _Live:
    argv: tuple
    t0: float
    p: subprocess.Popen
    threads: list
    err: list
    trunc: list


def _start(argv, env, cwd, input_bytes, cap, trunc, stdout_reader):
    """Start `argv` in its own session, reading stdout with `stdout_reader(p)` and stderr: a _Live, or the
    ProcResult of a child that could not start."""
    argv = tuple(str(a) for a in argv)
    t0 = time.monotonic()
    if _STOPPING.is_set():
        return ProcResult(argv, error="not started: cudadoctor is stopping")
    try:
        p = subprocess.Popen(  # noqa: S603 - argv list, no shell
            argv,
            stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as e:
        return ProcResult(argv, not_found=True, error="", elapsed_s=time.monotonic() - t0,
                          extra={"os_error": str(e)})
    except (PermissionError, OSError) as e:
        return ProcResult(argv, error=f"{type(e).__name__}: {e.strerror or e}", elapsed_s=time.monotonic() - t0)

    with _LIVE_LOCK:
        _LIVE.add(p)
    if _STOPPING.is_set():  # stopped between the check above and the start
        _kill_group(p)
    err: list = []
    threads = [stdout_reader(p), threading.Thread(target=_drain, args=(p.stderr, err, cap, trunc), daemon=True)]
    for t in threads:
        t.start()
    if input_bytes is not None:
        # in a thread: a child that never reads its stdin must not block the write past the timeout
        threading.Thread(target=_feed, args=(p.stdin, input_bytes), daemon=True).start()
    return _Live(argv, t0, p, threads, err, trunc)


def _finish(live, timeout: float, until: Optional[Callable[[], bool]] = None) -> ProcResult:
    """Wait for `live` at most until `timeout` seconds after its start, then kill the group. The result's
    stdout is left to the caller. `until()`: true once the child has said all it will (see `finish`)."""
    if isinstance(live, ProcResult):
        return live
    argv, t0, p, threads, err, trunc = live.argv, live.t0, live.p, live.threads, live.err, live.trunc
    timed_out = False
    rc = None
    try:
        if until is not None:
            rc = _wait_until(p, t0 + timeout, until)
            if rc is _DETACHED:
                threading.Thread(target=_reap, args=(live,), daemon=True).start()
                return ProcResult(argv, returncode=None, stderr=b"".join(list(err)).decode("utf-8", errors="replace"),
                                  elapsed_s=time.monotonic() - t0, timeout_s=timeout, truncated=trunc[0],
                                  extra={"detached": True})
        else:
            rc = p.wait(timeout=max(0.0, timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(p)
        try:
            rc = p.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            rc = None  # stuck (uninterruptible sleep in the driver): abandon it
    finally:
        if rc is not _DETACHED:
            with _LIVE_LOCK:
                _LIVE.discard(p)
    _close_pipes(p, threads)
    return ProcResult(
        argv,
        returncode=None if timed_out else rc,
        stderr=b"".join(list(err)).decode("utf-8", errors="replace"),
        elapsed_s=time.monotonic() - t0,
        timed_out=timed_out,
        timeout_s=timeout,
        truncated=trunc[0],
    )


_DETACHED = object()
#: how long a detached child may take to exit before its group is killed
REAP_S = 30.0


def _wait_until(p: subprocess.Popen, deadline: float, until: Callable[[], bool]):
    """p's return code, or _DETACHED once `until()` holds; TimeoutExpired at the deadline."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(p.args, 0)
        try:
            return p.wait(timeout=min(left, 0.005))
        except subprocess.TimeoutExpired:
            if until():
                return _DETACHED


def _reap(live) -> None:
    """Collect a detached child (its group killed if it has not ended within REAP_S) and its pipes."""
    p = live.p
    try:
        p.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        _kill_group(p)
        try:
            p.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(p)
    _close_pipes(p, live.threads)


def _close_pipes(p: subprocess.Popen, threads: list) -> None:
    """Once p has ended (or, stuck in the driver, been given up on): join the readers of its stdout and
    stderr, then close their streams.

    What p wrote is at most a pipe buffer away, so a short grace suffices (one deadline for both streams).
    Only a process it left behind (in another session) can keep the pipes open longer; it is not waited
    for: its reader is then blocked in read() holding the stream's lock, and close() would block with it.
    Such a stream is abandoned; the daemon thread ends when that process closes its end."""
    deadline = time.monotonic() + KILL_GRACE_S
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    for t, stream in zip(threads, (p.stdout, p.stderr)):
        if t.is_alive():
            continue
        try:
            stream.close()
        except OSError:
            pass


def _feed(stdin, data: bytes) -> None:
    try:
        stdin.write(data)
        stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            p.kill()
        except OSError:
            pass
