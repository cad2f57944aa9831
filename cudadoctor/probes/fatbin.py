"""Read which GPU architectures a CUDA binary carries, in pure Python (no cuobjdump needed).

Handles host ELF executables and shared objects (the `.nv_fatbin` / `__nv_relfatbin` sections),
`.fatbin` files, `.cubin` files (ELF with e_machine EM_CUDA = 190) and `.ptx` text files.
Compressed fatbin entries (nvcc's default for PTX; `-Xfatbin=-compress-all` for SASS) are listed
from their entry headers, which stay uncompressed: no payload needs decompressing to list archs.

Format facts relied on (NVIDIA does not publish the fatbin layout; these match
`cuobjdump --list-elf/--list-ptx` on nvcc 11.8-13.0 output and the layouts read by LLVM's
offload tools and the open `cricket` project's fatbin reader; verified by tests that compile with
real nvcc 13.0 and by benchmarks/gpu/probes.sh against cuobjdump on torch's libtorch_cuda.so):

- A fatbin container starts with a 16-byte header, little-endian: u32 magic 0xBA55ED50,
  u16 version (1), u16 header size (16), u64 size of the entries that follow.
- Each entry starts with its own header (64 bytes or more; its size is in the header):
  u16 kind (1 = PTX, 2 = ELF/SASS, 8 = LTO-IR for `code=lto_XY`; other kinds are listed as
  `unknown` and ignored), u16 version, u32 header size,
  u64 payload size, u32 compressed size, u32 (unused here), u16 minor, u16 major (the PTX ISA
  version for PTX), u32 arch (e.g. 90 for sm_90 / compute_90), u32 name offset, u32 name length,
  u64 flags, u64 zero, u64 uncompressed size. The payload follows the entry header.
- Flags: 0x1 64-bit, 0x2000 compressed (NVIDIA's LZ4-style format), 0x8000 compressed (zstd, CUDA
  12.8+), 0x100000 arch-specific target (`sm_90a`), 0x200000 family target (`sm_100f`).
- A host ELF holds one or more containers, back to back and 8-byte aligned, in `.nv_fatbin`
  (`__nv_relfatbin` for relocatable device code).
- A cubin's SM is in the ELF e_flags: bits 0-7 for ELF ABI version < 8 (CUDA <= 12.x), bits 8-15
  for ABI version 8 (CUDA 12.8+/13); its `a`/`f` variant is in the `.note.nv.tkinfo` note, which
  records ptxas' `-arch sm_XYa` option.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import parse_arch

FATBIN_MAGIC = 0xBA55ED50
EM_CUDA = 190
KIND_PTX, KIND_ELF = 1, 2
KIND_LTO = (4, 8)  # LTO-IR (NVVM IR for -dlto / code=lto_XY): 8 with nvcc 13.0
FLAG_COMPRESSED_LZ4 = 0x2000
FLAG_COMPRESSED_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_MIN_ENTRY_HEADER = 64
_WINDOW = 1 << 20


class BinaryFormatError(ValueError):
    """The file is not a CUDA binary cudadoctor can read, or it is truncated/corrupt."""


@dataclass(frozen=True)
class Image:
    kind: str  # "sass", "ptx" or "lto"
    arch: str  # "sm_90a", "compute_80", "lto_90"
    ptx_isa: str = ""  # "9.0" for PTX entries
    compressed: str = ""  # "", "lz4" or "zstd"
    size: int = 0
    offset: int = 0  # where the entry's payload starts in the file


@dataclass
class BinaryArchs:
    path: str
    format: str  # "elf" (host executable/shared object), "cubin", "fatbin" or "ptx"
    images: list = field(default_factory=list)

    @property
    def sass(self) -> list:
        return _sorted_unique(i.arch for i in self.images if i.kind == "sass")

    @property
    def ptx(self) -> list:
        return _sorted_unique(i.arch for i in self.images if i.kind == "ptx")

    @property
    def lto(self) -> list:
        return _sorted_unique(i.arch for i in self.images if i.kind == "lto")

    @property
    def has_cuda(self) -> bool:
        return bool(self.images)

    def counts(self, kind: str = "sass") -> dict:
        """Entries per arch (what `cuobjdump --list-elf | sort | uniq -c` counts for SASS)."""
        return dict(sorted(Counter(i.arch for i in self.images if i.kind == kind).items(), key=lambda kv: _key(kv[0])))

    def ptx_isa(self) -> dict:
        """PTX arch -> the newest PTX ISA version among its entries ('9.0')."""
        out: dict = {}
        for i in self.images:
            if i.kind == "ptx" and i.ptx_isa:
                cur = out.get(i.arch)
                if cur is None or _isa_key(i.ptx_isa) > _isa_key(cur):
                    out[i.arch] = i.ptx_isa
        return out


def _isa_key(v: str) -> tuple:
    try:
        a, b = v.split(".")
        return (int(a), int(b))
    except ValueError:
        return (0, 0)


def _key(name: str) -> tuple:
    a = parse_arch(name)
    return (a.major, a.minor, a.variant) if a else (999, 0, name)


def _sorted_unique(names) -> list:
    return sorted(set(names), key=_key)


# ---------------------------------------------------------------- sources of bytes


class _Source:
    """Random access to a file's bytes: either an in-memory buffer or a System-backed file."""

    def __init__(self, size: int, fetch, window: int = 0):
        self.size = size
        self._fetch = fetch
        self._window = window  # >0: read ahead this much and serve small reads from it
        self._buf_off, self._buf = 0, b""

    def at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n <= 0 or offset >= self.size:
            return b""
        n = min(n, self.size - offset)
        if not self._window:
            return self._fetch(offset, n) or b""
        rel = offset - self._buf_off
        if 0 <= rel and rel + n <= len(self._buf):
            return self._buf[rel:rel + n]
        if n >= self._window:
            return self._fetch(offset, n) or b""
        self._buf_off = offset
        self._buf = self._fetch(offset, min(self._window, self.size - offset)) or b""
        return self._buf[:n]


def bytes_source(data: bytes) -> _Source:
    return _Source(len(data), lambda off, n: data[off:off + n])


def system_source(system, path: str) -> _Source:
    size = system.file_size(path)
    if size is None:
        why = system.read_error(path) or "cannot read its size"
        raise BinaryFormatError(f"{path}: cannot read: {why}")
    first = system.read_range(path, 0, 1)
    if first is None:
        raise BinaryFormatError(f"{path}: cannot read: {system.read_error(path) or 'unreadable'}")
    return _Source(size, lambda off, n: system.read_range(path, off, n), window=256 * 1024)


# ---------------------------------------------------------------- entry points


def read_file(system, path: str) -> BinaryArchs:
    """Read `path` through the System port. Raises BinaryFormatError with a one-line reason."""
    if system.is_dir(path):
        raise BinaryFormatError(f"{path}: is a directory")
    if not system.exists(path):
        raise BinaryFormatError(f"{path}: no such file")
    return read_source(system_source(system, path), path)


def read_bytes(data: bytes, path: str = "<bytes>") -> BinaryArchs:
    return read_source(bytes_source(data), path)


def read_source(src: _Source, path: str) -> BinaryArchs:
    head = src.at(0, 64)
    if len(head) < 4:
        raise BinaryFormatError(f"{path}: too short to be a CUDA binary ({src.size} bytes)")
    if head[:4] == b"\x7fELF":
        return _read_elf(src, path)
    if struct.unpack_from("<I", head, 0)[0] == FATBIN_MAGIC:
        out = BinaryArchs(path, "fatbin")
        _read_containers(src, 0, src.size, path, out, strict=True)
        return out
    text = src.at(0, 1 << 16)
    if _looks_like_ptx(text):
        return _read_ptx_text(src, path)
    raise BinaryFormatError(f"{path}: not a CUDA binary (not an ELF file, a fatbin, a cubin or PTX text)")


def is_candidate_name(name: str) -> bool:
    """File names worth opening when scanning a tree for CUDA binaries."""
    n = name.lower()
    return n.endswith((".so", ".cubin", ".fatbin")) or ".so." in n


# ---------------------------------------------------------------- ELF


def _read_elf(src: _Source, path: str) -> BinaryArchs:
    ident = src.at(0, 16)
    if len(ident) < 16:
        raise BinaryFormatError(f"{path}: truncated ELF header")
    cls, data = ident[4], ident[5]
    if data != 1:
        raise BinaryFormatError(f"{path}: big-endian ELF files are not CUDA binaries cudadoctor reads")
    if cls == 2:
        hdr = src.at(0, 64)
        if len(hdr) < 64:
            raise BinaryFormatError(f"{path}: truncated ELF header")
        e_machine = struct.unpack_from("<H", hdr, 18)[0]
        e_flags = struct.unpack_from("<I", hdr, 48)[0]
        e_shoff = struct.unpack_from("<Q", hdr, 40)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", hdr, 58)
        sh_fmt, sh_fields = "<IIQQQQIIQQ", (0, 1, 4, 5)  # name, type, offset, size
    elif cls == 1:
        hdr = src.at(0, 52)
        if len(hdr) < 52:
            raise BinaryFormatError(f"{path}: truncated ELF header")
        e_machine = struct.unpack_from("<H", hdr, 18)[0]
        e_flags = struct.unpack_from("<I", hdr, 36)[0]
        e_shoff = struct.unpack_from("<I", hdr, 32)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", hdr, 46)
        sh_fmt, sh_fields = "<IIIIIIIIII", (0, 1, 4, 5)
    else:
        raise BinaryFormatError(f"{path}: corrupt ELF header (class byte {cls})")
    sections = _elf_sections(src, path, e_shoff, e_shentsize, e_shnum, e_shstrndx, sh_fmt, sh_fields)
    if e_machine == EM_CUDA:
        return _read_cubin(src, path, ident, e_flags, sections)
    out = BinaryArchs(path, "elf")
    for name, (off, size) in sections.items():
        if name in FATBIN_SECTIONS and size:
            if off + size > src.size:
                raise BinaryFormatError(f"{path}: truncated: section {name} ends at byte {off + size} "
                                        f"but the file has {src.size} bytes")
            _read_containers(src, off, off + size, path, out, strict=False)
    return out


def _elf_sections(src, path, shoff, shentsize, shnum, shstrndx, fmt, fields) -> dict:
    """Section name -> (offset, size). {} when the file has no section headers (stripped hard)."""
    if shoff == 0:
        return {}
    entsize = struct.calcsize(fmt)
    if shentsize < entsize:
        raise BinaryFormatError(f"{path}: corrupt ELF section header size {shentsize}")
    if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: the real values are in section 0
        s0 = src.at(shoff, entsize)
        if len(s0) < entsize:
            raise BinaryFormatError(f"{path}: truncated: the ELF section headers are past the end of the file")
        v = struct.unpack(fmt, s0)
        shnum = shnum or v[5]
        if shstrndx == 0xFFFF:
            shstrndx = v[7]
    if shoff + shnum * shentsize > src.size:
        raise BinaryFormatError(f"{path}: truncated: the ELF section headers end at byte {shoff + shnum * shentsize} "
                                f"but the file has {src.size} bytes")
    if shnum > 65536 * 4:
        raise BinaryFormatError(f"{path}: corrupt ELF ({shnum} sections)")
    table = src.at(shoff, shnum * shentsize)
    raw = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        raise BinaryFormatError(f"{path}: corrupt ELF (string table index {shstrndx} of {shnum} sections)")
    i_name, i_type, i_off, i_size = fields
    str_off, str_size = raw[shstrndx][i_off], raw[shstrndx][i_size]
    names = src.at(str_off, str_size)
    out: dict = {}
    for s in raw:
        n = s[i_name]
        if n >= len(names):
            continue
        end = names.find(b"\0", n)
        name = names[n:end if end >= 0 else len(names)].decode("latin-1")
        if s[i_type] == 8:  # SHT_NOBITS: no bytes in the file
            continue
        out.setdefault(name, (s[i_off], s[i_size]))
    return out


_RE_TK_ARCH = re.compile(rb"-arch[ =](sm_\d+[af]?)")


def _read_cubin(src, path, ident, e_flags, sections) -> BinaryArchs:
    abiversion = ident[8]
    sm = (e_flags >> 8) & 0xFF if abiversion >= 8 else e_flags & 0xFF
    name = f"sm_{sm}"
    tk = sections.get(".note.nv.tkinfo")
    if tk:
        m = _RE_TK_ARCH.search(src.at(tk[0], min(tk[1], 4096)))
        if m:
            cand = m.group(1).decode()
            a = parse_arch(cand)
            if a and a.major * 10 + a.minor == sm:
                name = cand
    if not parse_arch(name) or sm == 0:
        raise BinaryFormatError(f"{path}: corrupt cubin (no SM architecture in its ELF flags {e_flags:#x})")
    return BinaryArchs(path, "cubin", [Image("sass", name, size=src.size, offset=0)])


# ---------------------------------------------------------------- fatbin containers


def _read_containers(src, start: int, end: int, path: str, out: BinaryArchs, strict: bool) -> None:
    off = start
    first = True
    if strict and end - start < 16:
        raise BinaryFormatError(f"{path}: truncated fatbin header ({end - start} of 16 bytes)")
    while off + 16 <= end:
        hdr = src.at(off, 16)
        magic = struct.unpack_from("<I", hdr, 0)[0] if len(hdr) >= 4 else 0
        if magic != FATBIN_MAGIC:
            if first and strict:
                raise BinaryFormatError(f"{path}: corrupt fatbin (bad magic {magic:#x} at byte {off})")
            nxt = _find_magic(src, off, end)
            if nxt is None:
                return
            off = nxt
            continue
        first = False
        if len(hdr) < 16:
            raise BinaryFormatError(f"{path}: truncated fatbin header at byte {off}")
        _, version, hsize, fsize = struct.unpack("<IHHQ", hdr)
        if hsize < 16:
            raise BinaryFormatError(f"{path}: corrupt fatbin header at byte {off} (header size {hsize})")
        cend = off + hsize + fsize
        if cend > end:
            raise BinaryFormatError(f"{path}: truncated: the fatbin at byte {off} needs {hsize + fsize} bytes, "
                                    f"only {end - off} are there")
        _read_entries(src, off + hsize, cend, path, out)
        off = (cend + 7) & ~7


def _find_magic(src, off: int, end: int) -> Optional[int]:
    needle = struct.pack("<I", FATBIN_MAGIC)
    pos = off
    while pos < end:
        chunk = src.at(pos, min(_WINDOW, end - pos))
        if not chunk:
            return None
        i = chunk.find(needle)
        while i >= 0 and (pos + i) % 8:
            i = chunk.find(needle, i + 1)
        if i >= 0:
            return pos + i
        pos += max(len(chunk) - 3, 1)
    return None


def _read_entries(src, off: int, end: int, path: str, out: BinaryArchs) -> None:
    while off < end:
        if end - off < _MIN_ENTRY_HEADER:
            if not any(src.at(off, end - off)):  # zero padding at the end of a container
                return
            raise BinaryFormatError(f"{path}: truncated fatbin entry header at byte {off}")
        h = src.at(off, _MIN_ENTRY_HEADER)
        kind, _ver, ehs, psize = struct.unpack_from("<HHIQ", h, 0)
        if kind == 0 and ehs == 0:
            return  # padding
        if ehs < _MIN_ENTRY_HEADER or off + ehs + psize > end:
            raise BinaryFormatError(f"{path}: corrupt fatbin entry at byte {off} (header {ehs} bytes, "
                                    f"payload {psize} bytes, container ends at byte {end})")
        minor, major, arch = struct.unpack_from("<HHI", h, 24)
        flags = struct.unpack_from("<Q", h, 40)[0]
        variant = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
        comp = "zstd" if flags & FLAG_COMPRESSED_ZSTD else ("lz4" if flags & FLAG_COMPRESSED_LZ4 else "")
        if kind == KIND_ELF:
            out.images.append(Image("sass", f"sm_{arch}{variant}", compressed=comp, size=psize, offset=off + ehs))
        elif kind == KIND_PTX:
            out.images.append(Image("ptx", f"compute_{arch}{variant}", ptx_isa=f"{major}.{minor}",
                                    compressed=comp, size=psize, offset=off + ehs))
        elif kind in KIND_LTO:
            out.images.append(Image("lto", f"lto_{arch}{variant}", compressed=comp, size=psize, offset=off + ehs))
        else:  # a kind this reader does not know: listed, never judged (the structure itself was valid)
            out.images.append(Image("unknown", f"kind{kind}_{arch}{variant}", compressed=comp, size=psize,
                                    offset=off + ehs))
        off += ehs + psize


# ---------------------------------------------------------------- PTX text

_RE_PTX_TARGET = re.compile(r"^\s*\.target\s+(sm_\d+[af]?)", re.M)
_RE_PTX_VERSION = re.compile(r"^\s*\.version\s+(\d+\.\d+)", re.M)


def _looks_like_ptx(text: bytes) -> bool:
    t = text.decode("latin-1")
    return bool(_RE_PTX_VERSION.search(t) and _RE_PTX_TARGET.search(t))


def _read_ptx_text(src, path) -> BinaryArchs:
    t = src.at(0, 1 << 16).decode("latin-1")
    ver = _RE_PTX_VERSION.search(t).group(1)
    target = _RE_PTX_TARGET.search(t).group(1).replace("sm_", "compute_")
    return BinaryArchs(path, "ptx", [Image("ptx", target, ptx_isa=ver, size=src.size)])
