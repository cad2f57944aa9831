"""Host C/C++ compilers nvcc may use: gcc, g++, clang, clang++ on PATH, with their versions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.model import Fact
from cudadoctor.system.base import System

NAMES = ("gcc", "g++", "clang", "clang++")
_RE_CLANG = re.compile(r"clang version (\d+\.\d+(?:\.\d+)?)")
_RE_TRAILING = re.compile(r"(\d+\.\d+(?:\.\d+)?)\s*$")
_RE_ANY = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b")


@dataclass
class HostCompiler:
    name: str = ""  # "gcc", "g++", "clang", "clang++"
    path: str = ""
    realpath: str = ""
    family: str = ""  # "gcc" or "clang" (from the --version text; `gcc` may be clang on some systems)
    version: str = ""  # "13.3.0"
    first_line: str = ""
    error: str = ""

    @property
    def major(self) -> Optional[int]:
        m = re.match(r"(\d+)", self.version or "")
        return int(m.group(1)) if m else None


@dataclass
class CompilerInfo:
    compilers: list[HostCompiler] = field(default_factory=list)
    nvcc_prepend_flags: str = ""  # NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS may pick another -ccbin
    nvcc_append_flags: str = ""
    cudahostcxx: str = ""

    def first(self, family: str) -> Optional[HostCompiler]:
        return next((c for c in self.compilers if c.family == family and c.version), None)


def parse_compiler_version(text: str) -> tuple:
    """(family, version, first line) from `gcc --version` / `clang --version` output."""
    first = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    m = _RE_CLANG.search(text or "")
    if m:
        return "clang", m.group(1), first
    m = _RE_TRAILING.search(first) or _RE_ANY.search(first)
    if m and ("gcc" in first.lower() or "g++" in first.lower() or "free software" in (text or "").lower()):
        return "gcc", m.group(1), first
    return "", (m.group(1) if m else ""), first


@gatherer("compiler", value_type=CompilerInfo)
def gather_compiler(system: System, opts: Options, deps: dict) -> Fact:
    """gcc/g++/clang/clang++ on PATH and their `--version` (nvcc's default host compiler is gcc/g++)."""
    info = CompilerInfo(nvcc_prepend_flags=system.env.get("NVCC_PREPEND_FLAGS", ""),
                        nvcc_append_flags=system.env.get("NVCC_APPEND_FLAGS", ""),
                        cudahostcxx=system.env.get("CUDAHOSTCXX", ""))
    for name in NAMES:
        path = system.which(name)
        if not path:
            continue
        c = HostCompiler(name=name, path=path, realpath=system.realpath(path))
        res = system.run([path, "--version"], opts.timeout_tool)
        if res.timed_out or not res.started or res.returncode != 0:
            c.error = res.describe()
        else:
            c.family, c.version, c.first_line = parse_compiler_version(res.output)
            if not c.version:
                c.error = f"unrecognised `{name} --version` output: {c.first_line[:200]!r}"
        info.compilers.append(c)
    if not info.compilers:
        return Fact.not_found("PATH", "no gcc, g++, clang or clang++ on PATH", value=info)
    return Fact.found(info, " / ".join(f"{c.name} --version" for c in info.compilers))
