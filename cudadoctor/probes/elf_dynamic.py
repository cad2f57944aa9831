"""A shared object's dynamic linking facts, read the way the dynamic loader reads them: the libraries it
needs (DT_NEEDED), where it looks for them (DT_RUNPATH / DT_RPATH), and its dynamic symbol table (what it
exports, what it must find elsewhere).

Hand-written on purpose, over the section-header reader in fatbin.py: pyelftools (the well-kept pure-Python
ELF library) builds one Python object per symbol and took 2.8 s to list libtorch_cpu.so's 74,265 exports
(torch 2.13, measured 2026-12-01); struct.iter_unpack over the same table takes tens of milliseconds, and a
check reads four such tables. Only 64-bit little-endian ELF (x86-64, aarch64): what torch ships.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.probes.fatbin import BinaryFormatError, _elf_sections, _Source, system_source

ET_DYN = 3
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
STV_HIDDEN, STV_INTERNAL = 2, 1
_SYM = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
_DYN = struct.Struct("<qQ")  # d_tag, d_val
MAX_TABLE = 64 << 20  # never read a symbol or string table larger than this (libtorch_cuda's is ~10 MB)


@dataclass
class Dynamic:
    path: str = ""
    elf_type: int = 0
    needed: list = field(default_factory=list)  # DT_NEEDED, in order
    runpath: list = field(default_factory=list)  # DT_RUNPATH entries ($ORIGIN not expanded)
    rpath: list = field(default_factory=list)  # DT_RPATH entries (used only when there is no DT_RUNPATH)
    soname: str = ""
    _src: Optional[_Source] = None
    _sections: dict = field(default_factory=dict)  # name -> (offset, size)


def _sections64(src: _Source, path: str) -> tuple:
    """(e_type, {name: (offset, size)}) of a 64-bit little-endian ELF; BinaryFormatError otherwise."""
    hdr = src.at(0, 64)
    if len(hdr) < 64 or hdr[:4] != b"\x7fELF":
        raise BinaryFormatError(f"{path}: not an ELF file")
    if hdr[4] != 2 or hdr[5] != 1:
        raise BinaryFormatError(f"{path}: not a 64-bit little-endian ELF file")
    e_type = struct.unpack_from("<H", hdr, 16)[0]
    shoff = struct.unpack_from("<Q", hdr, 40)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", hdr, 58)
    if not shoff or shentsize < 64:
        return e_type, {}
    return e_type, _elf_sections(src, path, shoff, shentsize, shnum, shstrndx, "<IIQQQQIIQQ", (0, 1, 4, 5))


def _cstr(blob: bytes, off: int) -> str:
    if off >= len(blob):
        return ""
    end = blob.find(b"\0", off)
    return blob[off:end if end >= 0 else len(blob)].decode("latin-1")


def read_dynamic(system, path: str) -> Dynamic:
    """NEEDED, RUNPATH/RPATH and SONAME of `path` (through the System port). BinaryFormatError when it is not a
    readable 64-bit ELF file; an ELF without a dynamic section (a static binary, a .o) needs nothing."""
    return dynamic_of(system_source(system, path), path)


def dynamic_of(src: _Source, path: str, sections: Optional[dict] = None, e_type: int = 0) -> Dynamic:
    """read_dynamic() on a source already open (the scan's, whose read-ahead holds the ELF header); with the section
    table fatbin.read_source already read from it (`sections`, `e_type`), not read again."""
    e_type, secs = (e_type, sections) if sections else _sections64(src, path)
    d = Dynamic(path, e_type, _src=src, _sections=secs)
    off, size = secs.get(".dynamic", (0, 0))
    soff, ssize = secs.get(".dynstr", (0, 0))
    if not size or not ssize:
        return d
    if size > 1 << 20 or off + size > src.size or soff + ssize > src.size:
        raise BinaryFormatError(f"{path}: truncated or corrupt dynamic section")
    entries = [e for e in _DYN.iter_unpack(src.at(off, size - size % 16)) if e[0] in
               (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
    if not entries:
        return d
    # the strings these entries name sit together near the table's start: read from there, not all 10 MB of
    # libtorch_cuda's .dynstr
    first = min(v for _, v in entries)
    last = max(v for _, v in entries)
    blob = src.at(soff + first, min(ssize - first, last - first + 4096))
    for tag, v in entries:
        s = _cstr(blob, v - first)
        if tag == DT_NEEDED:
            d.needed.append(s)
        elif tag == DT_SONAME:
            d.soname = s
        elif tag == DT_RUNPATH:
            d.runpath += [x for x in s.split(":") if x]
        elif tag == DT_RPATH:
            d.rpath += [x for x in s.split(":") if x]
    return d


def _symbols(d: Dynamic):
    """(name, bind, visibility, defined) of every dynamic symbol."""
    src, secs = d._src, d._sections
    off, size = secs.get(".dynsym", (0, 0))
    soff, ssize = secs.get(".dynstr", (0, 0))
    if src is None or not size or not ssize:
        return
    if size > MAX_TABLE or ssize > MAX_TABLE or off + size > src.size or soff + ssize > src.size:
        raise BinaryFormatError(f"{d.path}: symbol table too large or past the end of the file")
    strtab = src.at(soff, ssize)
    for st_name, st_info, st_other, st_shndx, _v, _s in _SYM.iter_unpack(src.at(off, size - size % 24)):
        if st_name:
            yield _cstr(strtab, st_name), st_info >> 4, st_other & 3, st_shndx != 0


def exported(d: Dynamic) -> set:
    """Names another object can bind to: defined, global/weak/unique, not hidden."""
    return {n for n, bind, vis, defined in _symbols(d)
            if defined and bind in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE) and vis not in (STV_HIDDEN, STV_INTERNAL)}


def required(d: Dynamic) -> list:
    """Undefined global (not weak) names: each must be found in a loaded library, or dlopen fails with
    'undefined symbol: NAME' (Python loads extension modules with RTLD_NOW, and ctypes always adds it)."""
    return sorted({n for n, bind, _vis, defined in _symbols(d) if not defined and bind == STB_GLOBAL})
