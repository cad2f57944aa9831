"""The System interface (the set of ports). Implementations: HostSystem (real), FakeSystem (tests)."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Iterator, Mapping, Optional, Sequence

from cudadoctor.system.proc import ProcResult


class System:
    """Abstract set of ports. Every method is total: errors come back as values, never raised."""

    #: the process environment cudadoctor runs in (the target's children inherit it)
    env: Mapping[str, str]

    # ---- processes
    def run(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None,
            input_bytes: Optional[bytes] = None, cwd: Optional[str] = None) -> ProcResult:
        raise NotImplementedError

    def start(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> object:
        """Start `argv` now and return a handle at once; `wait(handle, timeout)` gives its ProcResult, the
        timeout counting from the start. Lets a caller start its longest child before its own slow work
        (health's kernel launch before its imports). This default defers the run to `wait`."""
        return (tuple(argv), env)

    def wait(self, handle: object, timeout: float, until: Optional[Callable[[bytes], bool]] = None) -> ProcResult:
        """`until(stdout so far)`: stop waiting once it holds (the child has reported all it will; see
        proc.finish). This default waits for the end."""
        argv, env = handle
        return self.run(argv, timeout, env=env)

    def which(self, name: str, path: Optional[str] = None) -> Optional[str]:
        found = self.which_all(name, path)
        return found[0] if found else None

    def which_all(self, name: str, path: Optional[str] = None) -> list:
        path = self.env.get("PATH", "") if path is None else path
        out = []
        for d in path.split(os.pathsep):
            if not d:
                continue
            cand = os.path.join(d, name)
            if self.is_executable(cand) and cand not in out:
                out.append(cand)
        return out

    # ---- files
    def read_bytes(self, path: str, limit: int = 16 * 1024 * 1024) -> Optional[bytes]:
        """Return the file's first `limit` bytes, or None when it cannot be read."""
        raise NotImplementedError

    def read_range(self, path: str, offset: int, size: int) -> Optional[bytes]:
        """Up to `size` bytes of the file from `offset` (b'' past its end), or None when unreadable.

        Lets binary readers (the fatbin reader) hop through large files without loading them whole.
        """
        data = self.read_bytes(path, offset + size)
        return None if data is None else data[offset:offset + size]

    def run_lines(self, argv: Sequence[str], timeout: float, on_line: Callable[[str], None],
                  env: Optional[Mapping[str, str]] = None) -> ProcResult:
        """Run `argv` like `run`, handing each stdout line (without its newline) to `on_line` as it
        arrives instead of keeping stdout (the result's stdout is empty). For outputs larger than
        `run` keeps, such as a report from every node of a cluster through srun.

        This default runs `run` and then hands over its lines; HostSystem streams them.
        """
        res = self.run(argv, timeout, env=env)
        for line in res.stdout.splitlines():
            on_line(line)
        return dataclasses.replace(res, stdout="")

    def read_text(self, path: str, limit: int = 4 * 1024 * 1024) -> Optional[str]:
        data = self.read_bytes(path, limit)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_error(self, path: str) -> str:
        """Why `path` cannot be read ('' when it can)."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def access_error(self, path: str) -> str:
        """Why this process may not open `path` for reading and writing by its permissions ('' when it may): the
        check a device file needs (/dev/nvidia0 owned by a group the user is not in). Nothing is opened, so a wedged
        device cannot hang it; a device cgroup (Slurm, a container) that refuses the open is not seen here."""
        return "" if self.exists(path) else "ENOENT"

    def is_dir(self, path: str) -> bool:
        raise NotImplementedError

    def is_executable(self, path: str) -> bool:
        raise NotImplementedError

    def listdir(self, path: str) -> list:
        raise NotImplementedError

    def realpath(self, path: str) -> str:
        raise NotImplementedError

    def is_symlink(self, path: str) -> bool:
        raise NotImplementedError

    def file_size(self, path: str) -> Optional[int]:
        raise NotImplementedError

    def walk(self, top: str, max_files: int = 200_000) -> Iterator[str]:
        """Yield file paths under `top` (no symlinked dirs followed), at most max_files."""
        raise NotImplementedError

    def walk_tree(self, top: str, prune: Optional[Callable[[str, str], bool]] = None,
                  max_files: int = 200_000) -> Iterator[tuple]:
        """Yield (path, note) under `top`, depth first in name order: note '' for a file, 'loop' for a
        symlinked folder that leads to a folder already walked (not entered again), 'cut' (path = the
        folder it was in) when max_files stopped the walk. Symlinked folders are followed once each, so
        a link loop ends; `prune(parent, name)` True skips a folder. Unreadable folders are skipped.

        This default works on any port from listdir/is_dir/realpath; HostSystem's uses os.scandir.
        """
        seen = {self.realpath(top)}
        stack = [top]
        n = 0
        while stack:
            d = stack.pop()
            subdirs = []
            for name in self.listdir(d):
                full = os.path.join(d, name)
                if self.is_dir(full):
                    if prune is not None and prune(d, name):
                        continue
                    real = self.realpath(full)
                    if real in seen:
                        yield full, "loop"
                        continue
                    seen.add(real)
                    subdirs.append(full)
                    continue
                n += 1
                if n > max_files:
                    yield d, "cut"
                    return
                yield full, ""
            stack.extend(reversed(subdirs))

    # ---- the interpreter cudadoctor itself runs in (for helper children such as the NVML probe)
    def own_python(self) -> str:
        raise NotImplementedError

    def uname(self) -> dict:
        raise NotImplementedError

    def hostname(self) -> str:
        raise NotImplementedError

    def username(self) -> str:
        raise NotImplementedError

    # ---- other processes (those NVML says hold a GPU)
    def process(self, pid: int) -> Optional[dict]:
        """What this PID namespace shows of process `pid`: {"name", "user", "cmdline", "uses_gpu"}, or None
        when no process has that id here. `uses_gpu`: True/False when its memory maps could be read (a CUDA
        process maps /dev/nvidia*), None when they could not (another user's process, without root)."""
        return None

    # ---- where the user is (for `envs`: the project's .venv, the home folder's conda/pyenv/Jupyter dirs)
    def cwd(self) -> str:
        """The working directory cudadoctor was started in ('' when unknown)."""
        raise NotImplementedError

    def home(self) -> str:
        """The user's home folder: $HOME, as Python's expanduser reads it."""
        return self.env.get("HOME", "")

    def cpu_count(self) -> int:
        """CPUs this process may run on (the bound for concurrent probes)."""
        return 2

    def with_env(self, overrides: Mapping[str, str]) -> "System":
        """This system as a program started with `overrides` added to the environment sees it: `env`
        shows them and every child gets them (a Jupyter kernel's kernel.json "env", a conda env's vars)."""
        return EnvOverlay(self, overrides)


class EnvOverlay(System):
    """A System whose environment has some variables set on top of another's (see System.with_env)."""

    def __init__(self, inner: System, overrides: Mapping[str, str]):
        self._inner = inner
        self._overrides = dict(overrides)
        self.env = {**inner.env, **self._overrides}

    def run(self, argv, timeout, env=None, input_bytes=None, cwd=None) -> ProcResult:
        return self._inner.run(argv, timeout, env={**self._overrides, **dict(env or {})},
                               input_bytes=input_bytes, cwd=cwd)

    def run_lines(self, argv, timeout, on_line, env=None) -> ProcResult:
        return self._inner.run_lines(argv, timeout, on_line, env={**self._overrides, **dict(env or {})})

    def start(self, argv, env=None):
        return self._inner.start(argv, env={**self._overrides, **dict(env or {})})

    def wait(self, handle, timeout, until=None) -> ProcResult:
        return self._inner.wait(handle, timeout, until)

    def home(self):
        return self._overrides["HOME"] if self._overrides.get("HOME") else self._inner.home()

    def walk_tree(self, top, prune=None, max_files=200_000):
        return self._inner.walk_tree(top, prune, max_files)

    # every other port is the inner system's (which/which_all stay System's, over this env's PATH)
    def read_bytes(self, path, limit=16 * 1024 * 1024):
        return self._inner.read_bytes(path, limit)

    def read_range(self, path, offset, size):
        return self._inner.read_range(path, offset, size)

    def read_error(self, path):
        return self._inner.read_error(path)

    def exists(self, path):
        return self._inner.exists(path)

    def access_error(self, path):
        return self._inner.access_error(path)

    def is_dir(self, path):
        return self._inner.is_dir(path)

    def is_executable(self, path):
        return self._inner.is_executable(path)

    def listdir(self, path):
        return self._inner.listdir(path)

    def realpath(self, path):
        return self._inner.realpath(path)

    def is_symlink(self, path):
        return self._inner.is_symlink(path)

    def file_size(self, path):
        return self._inner.file_size(path)

    def walk(self, top, max_files=200_000):
        return self._inner.walk(top, max_files)

    def own_python(self):
        return self._inner.own_python()

    def uname(self):
        return self._inner.uname()

    def hostname(self):
        return self._inner.hostname()

    def username(self):
        return self._inner.username()

    def cwd(self):
        return self._inner.cwd()

    def cpu_count(self):
        return self._inner.cpu_count()

    def process(self, pid):
        return self._inner.process(pid)
