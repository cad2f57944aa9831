"""A fake System: files, executables and command answers held in memory.

Commands are answered by `FakeCmd` (or a callable taking argv and returning one), looked up by the
full argv tuple first, then by the executable's path, then by its basename.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

from cudadoctor.system.base import System
from cudadoctor.system.proc import ProcResult


@dataclass
class FakeCmd:
    stdout: str = ""
    stderr: str = ""
    returncode: int = 0
    hang: bool = False  # behave like a hung tool: the run ends at its timeout
    delay: float = 0.0  # real seconds to sleep (to test concurrency); 0 for instant


Answer = Union[FakeCmd, Callable[[tuple], FakeCmd]]


class FakeSystem(System):
    def __init__(self, env: Optional[Mapping[str, str]] = None, files: Optional[dict] = None,
                 executables: Optional[Mapping[str, Answer]] = None, symlinks: Optional[dict] = None,
                 unreadable: Sequence[str] = (), python: str = "/usr/bin/python3",
                 hang_sleep: float = 0.0, host: str = "node1", user: str = "alice"):
        self.env = dict(env or {"PATH": "/usr/bin:/bin"})
        self.files: dict = {}
        for p, v in (files or {}).items():
            self.add_file(p, v)
        self.executables: dict = {}
        for p, a in (executables or {}).items():
            self.add_exe(p, a)
        self.commands: dict = {}  # argv tuple -> Answer
        self.symlinks = dict(symlinks or {})
        self.unreadable = set(unreadable)
        self.denied: set = set()  # files whose permissions refuse this user (access_error)
        self.python = python
        self.hang_sleep = hang_sleep  # real seconds a hung command takes (keep tiny in tests)
        self.calls: list = []
        self.inputs: dict = {}  # argv -> the bytes last given on stdin (a plan a child reads)
        self.envs: dict = {}  # argv -> the environment changes last asked for (run's `env`)
        self.host, self.user = host, user
        self.procs: dict = {}  # pid -> {"name", "user", "cmdline", "uses_gpu"}: processes this namespace shows

    # ---- building the fake
    def add_file(self, path: str, content: Union[str, bytes]) -> None:
        self.files[path] = content.encode() if isinstance(content, str) else content

    def add_exe(self, path: str, answer: Answer = None) -> None:
        self.executables[path] = answer if answer is not None else FakeCmd()
        self.files.setdefault(path, b"\x7fELF")

    def on(self, argv: Sequence[str], answer: Answer) -> None:
        self.commands[tuple(argv)] = answer

    # ---- processes
    def run(self, argv, timeout, env=None, input_bytes=None, cwd=None) -> ProcResult:
        argv = tuple(str(a) for a in argv)
        self.calls.append(argv)
        if input_bytes is not None:
            self.inputs[argv] = input_bytes
        if env is not None:
            self.envs[argv] = dict(env)
        answer = self.commands.get(argv)
        exe = argv[0]
        if answer is None:
            path = exe if "/" in exe else self.which(exe)
            if path is not None and path not in self.executables:
                path = self._resolve(path)
            if path is None or path not in self.executables:
                return ProcResult(argv, not_found=True)
            answer = self.executables[path]
        cmd = answer(argv) if callable(answer) else answer
        if cmd is None:
            return ProcResult(argv, not_found=True)
        if cmd.hang:
            if self.hang_sleep:
                time.sleep(min(self.hang_sleep, timeout))
            # what it printed before it hung survives, as with proc.run
            return ProcResult(argv, stdout=cmd.stdout, stderr=cmd.stderr, timed_out=True, timeout_s=timeout,
                              elapsed_s=timeout)
        if cmd.delay:
            time.sleep(cmd.delay)
        return ProcResult(argv, returncode=cmd.returncode, stdout=cmd.stdout, stderr=cmd.stderr,
                          elapsed_s=cmd.delay, timeout_s=timeout)

    # ---- files
    def _resolve_one(self, path: str) -> str:
        seen = 0
        while path in self.symlinks and seen < 40:
            target = self.symlinks[path]
            path = target if target.startswith("/") else os.path.normpath(os.path.join(os.path.dirname(path), target))
            seen += 1
        return path

    def _resolve(self, path: str) -> str:
        """Resolve symlinks component by component (directory links too), like realpath."""
        if not path.startswith("/"):
            return path
        cur = ""
        for part in path.split("/")[1:]:
            if part in ("", "."):
                continue
            if part == "..":
                cur = os.path.dirname(cur)
                continue
            cur = self._resolve_one(cur + "/" + part)
        return cur or "/"

    def read_bytes(self, path, limit=16 * 1024 * 1024):
        if path in self.unreadable:
            return None
        data = self.files.get(self._resolve(path))
        return None if data is None else data[:limit]

    def read_error(self, path):
        if path in self.unreadable:
            return "PermissionError: Permission denied"
        return "" if self._resolve(path) in self.files else "FileNotFoundError: No such file or directory"

    def exists(self, path):
        p = self._resolve(path).rstrip("/") or "/"
        return p in self.files or self.is_dir(p)

    def is_dir(self, path):
        p = self._resolve(path).rstrip("/") + "/"
        return any(k.startswith(p) for k in self.files) or any(k.startswith(p) for k in self.symlinks)

    def is_executable(self, path):
        return path in self.executables or self._resolve(path) in self.executables

    def listdir(self, path):
        p = self._resolve(path).rstrip("/") + "/"
        names = set()
        for k in list(self.files) + list(self.symlinks):
            if k.startswith(p):
                names.add(k[len(p):].split("/")[0])
        return sorted(names)

    def realpath(self, path):
        return self._resolve(path)

    def is_symlink(self, path):
        return path in self.symlinks

    def access_error(self, path):
        if not self.exists(path):
            return "ENOENT"
        return "EACCES" if path in self.denied else ""

    def file_size(self, path):
        data = self.files.get(self._resolve(path))
        return None if data is None else len(data)

    def walk(self, top, max_files=200_000) -> Iterator[str]:
        p = top.rstrip("/") + "/"
        for n, k in enumerate(sorted(k for k in self.files if k.startswith(p))):
            if n >= max_files:
                return
            yield k

    def own_python(self):
        return self.python

    def uname(self):
        return {"system": "Linux", "release": "6.8.0-fake", "machine": "x86_64", "version": "#1 SMP"}

    def hostname(self):
        return self.host

    def username(self):
        return self.user

    def process(self, pid):
        p = self.procs.get(pid)
        return None if p is None else dict({"name": "", "user": "", "cmdline": "", "uses_gpu": None}, **p)

    # ---- added for `envs` (issue 16): the working directory and CPU count of the fake machine
    workdir = "/home/alice/project"
    cpus = 4

    def cwd(self):
        return self.workdir

    def cpu_count(self):
        return self.cpus
