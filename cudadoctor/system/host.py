"""The real machine."""

from __future__ import annotations

import errno
import getpass
import os
import platform
import socket
import stat
import sys
from typing import Callable, Iterator, Mapping, Optional, Sequence

from cudadoctor.system import proc
from cudadoctor.system.base import System


class HostSystem(System):
    def __init__(self, env: Optional[Mapping[str, str]] = None):
        self.env = dict(os.environ if env is None else env)

    def run(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None,
            input_bytes: Optional[bytes] = None, cwd: Optional[str] = None) -> proc.ProcResult:
        return proc.run(argv, timeout, env=proc.child_env(self.env, env), input_bytes=input_bytes, cwd=cwd)

    def start(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> proc.Started:
        return proc.start(argv, proc.child_env(self.env, env))

    def wait(self, handle: object, timeout: float, until: Optional[Callable[[bytes], bool]] = None) -> proc.ProcResult:
        return proc.finish(handle, timeout, until)

    def run_lines(self, argv: Sequence[str], timeout: float, on_line: Callable[[str], None],
                  env: Optional[Mapping[str, str]] = None) -> proc.ProcResult:
        return proc.run_lines(argv, timeout, on_line, env=proc.child_env(self.env, env))

    def read_bytes(self, path: str, limit: int = 16 * 1024 * 1024) -> Optional[bytes]:
        try:
            with _open_no_fifo(path) as f:
                return f.read(limit)
        except (OSError, ValueError):
            return None

    def read_range(self, path: str, offset: int, size: int) -> Optional[bytes]:
        try:
            with _open_no_fifo(path) as f:
                f.seek(offset)
                return f.read(size)
        except (OSError, ValueError, OverflowError):
            return None

    def read_error(self, path: str) -> str:
        try:
            with _open_no_fifo(path) as f:
                f.read(1)
            return ""
        except OSError as e:
            return f"{type(e).__name__}: {e.strerror or e}"
        except ValueError as e:
            return str(e)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def access_error(self, path: str) -> str:
        if not os.path.exists(path):
            return "ENOENT"
        return "" if os.access(path, os.R_OK | os.W_OK) else "EACCES"

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_executable(self, path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def listdir(self, path: str) -> list:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def is_symlink(self, path: str) -> bool:
        return os.path.islink(path)

    def file_size(self, path: str) -> Optional[int]:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def walk(self, top: str, max_files: int = 200_000) -> Iterator[str]:
        n = 0
        for root, dirs, files in os.walk(top, followlinks=False, onerror=lambda e: None):
            dirs.sort()
            for name in sorted(files):
                yield os.path.join(root, name)
                n += 1
                if n >= max_files:
                    return

    def walk_tree(self, top: str, prune: Optional[Callable[[str, str], bool]] = None,
                  max_files: int = 200_000) -> Iterator[tuple]:
        # os.scandir gives the type of most entries without a stat; a folder is known by (device, inode)
        try:
            st = os.stat(top)
        except OSError:
            return
        seen = {(st.st_dev, st.st_ino)}
        stack = [top]
        n = 0
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            for e in entries:
                try:
                    is_dir = e.is_dir()  # follows a symlink
                except OSError:
                    continue
                if is_dir:
                    if prune is not None and prune(d, e.name):
                        continue
                    try:
                        est = e.stat() if e.is_symlink() else e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    key = (est.st_dev, est.st_ino)
                    if key in seen:
                        yield e.path, "loop"
                        continue
                    seen.add(key)
                    subdirs.append(e.path)
                    continue
                n += 1
                if n > max_files:
                    yield d, "cut"
                    return
                yield e.path, ""
            stack.extend(reversed(subdirs))

    def own_python(self) -> str:
        return sys.executable

    def uname(self) -> dict:
        u = platform.uname()
        return {"system": u.system, "release": u.release, "machine": u.machine, "version": u.version}

    def hostname(self) -> str:
        try:
            return socket.gethostname()
        except OSError:
            return ""

    def username(self) -> str:
        try:
            return getpass.getuser()
        except Exception:  # noqa: BLE001 - getpass raises several types when no user is known
            return ""

    def cwd(self) -> str:
        try:
            return os.getcwd()
        except OSError:  # the folder was removed under us
            return ""

    def home(self) -> str:
        return self.env.get("HOME") or os.path.expanduser("~")

    def cpu_count(self) -> int:
        try:
            return len(os.sched_getaffinity(0))  # the CPUs this process may use (a cgroup or taskset limit)
        except (AttributeError, OSError):
            return os.cpu_count() or 2

    def process(self, pid: int) -> Optional[dict]:
        import psutil

        try:
            p = psutil.Process(pid)
            with p.oneshot():
                name = _ask(p.name)
                user = _ask(p.username)
                cmdline = " ".join(_ask(p.cmdline, []))
        except psutil.NoSuchProcess:
            return None
        except psutil.Error:
            return {"name": "", "user": "", "cmdline": "", "uses_gpu": None}
        # /proc/PID/maps by hand: psutil's memory_maps() reads smaps, which walks the page tables of every
        # mapping (seconds for a process that holds a whole GPU's memory); maps is one cheap read.
        maps = self.read_text(f"/proc/{pid}/maps", limit=16 * 1024 * 1024)
        uses_gpu = None if not maps else "/dev/nvidia" in maps
        return {"name": name, "user": user, "cmdline": cmdline, "uses_gpu": uses_gpu}


def _ask(fn, default=""):
    """One psutil accessor; its default when the answer is denied (another user's process) or unknown."""
    import psutil

    try:
        return fn()
    except (psutil.AccessDenied, psutil.ZombieProcess, KeyError, OSError):
        return default


def _open_no_fifo(path: str):
    """open(path, "rb"), except that a FIFO or socket is refused instead of blocking the doctor forever
    (opening a FIFO waits for a writer; one can sit in a scanned tree under any name)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO or socket)", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
