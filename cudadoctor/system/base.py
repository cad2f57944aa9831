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

    def wait(self, handle: object, timeout: float) -> ProcResult:
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

    # ---- the interpreter cudadoctor itself runs in (for helper children such as the NVML probe)
    def own_python(self) -> str:
        raise NotImplementedError

    def uname(self) -> dict:
        raise NotImplementedError

    def hostname(self) -> str:
        raise NotImplementedError

    def username(self) -> str:
        raise NotImplementedError
