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

Modules (what the loader can and cannot use; checked against nvcc 13.0 builds here and real launches
on an H200, /work/recon m_build.txt and m_rdc.txt, kept as tests/data/h200/modules.txt):

- One container in `.nv_fatbin` = one CUDA module = one translation unit (`a.cu`, `b.cu`, each static
  library's object), registered on its own (`__cudaRegisterFatBinary`). Its entries are the same
  kernels built for several targets; a kernel can only use the images of its own container. So a
  .so of a.cu (sm_90) + b.cu (sm_80 only) launches a's kernel on cc 9.0 and fails b's with error 209
  "no kernel image is available": judge each module, the file by its worst (`Module`).
- `nvcc -shared`/`nvcc -o` adds one more container: the device-link output for the default arch
  (sm_75 with CUDA 13), a cubin with no kernels when nothing was compiled with `-rdc`. A module
  with no kernels cannot fail a launch; it is never a verdict (`Module.kernels == ()`, or `stub`
  when compressed: an image under 2 KiB unpacked cannot hold a kernel, the smallest one is 2.8 KiB).
- `__nv_relfatbin` holds relocatable device code (`-rdc`): per translation unit its SASS and PTX
  as inputs to the device linker, and with `-lcudadevrt` the device runtime's own objects for every
  arch. The loader runs the device-LINKED image in `.nv_fatbin`; when that has no image for the
  GPU, the CUDA runtime links the relocatable objects at load time (JIT), which works only if each
  of them has PTX the GPU can JIT or SASS for exactly its SM (an `-rdc` executable of compute_80
  PTX only ran on cc 9.0; of sm_80 SASS only it failed with error 500 "named symbol not found").
  A PTX-only `-rdc` build has an EMPTY container in `.nv_fatbin` and everything in `__nv_relfatbin`.
  So relocatable images never count as the file's archs (cuobjdump does not list them either:
  libnvshmem_host.so.3's compute_120 PTX and libtorch_nvshmem.so's sm_89 are device-link inputs)
  and never make a verdict milder than that load-time link would be (`relocatable_rescue`).
- Kernel names come from a cubin's symbol table (STT_FUNC symbols with the CUDA entry flag
  STO_CUDA_ENTRY 0x10 in st_other) or a PTX `.entry` line, read from one uncompressed image of the
  module; a zstd-compressed one is unpacked only when the interpreter has a zstd decoder
  (`compression.zstd`, Python 3.14+, or the `zstandard` package) and it is small. Otherwise the
  module is named by its index and offset. Read only for modules that cannot run (`module_kernels`).
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import ModuleArchs, parse_arch

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
STO_CUDA_ENTRY = 0x10  # st_other bit of a kernel (an entry point) in a cubin's symbol table
STUB_MAX_BYTES = 2048  # an unpacked cubin this small holds no kernel (an empty one is 2,856 bytes for sm_75)
_MAX_NAME_READ = 8 << 20  # never read or unpack more than this to name a module's kernels


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
    module: int = 0  # index of its module (container) in the file
    relocatable: bool = False  # from __nv_relfatbin: an input to the device linker, not a loaded image
    unpacked: int = 0  # its size once decompressed (the payload size when it is not compressed)
    packed: int = 0  # the compressed bytes of a compressed payload (the rest of `size` is padding)


@dataclass
class Module:
    """One fatbin container: the images of one translation unit (or one device-link output)."""

    index: int
    section: str = ""  # ".nv_fatbin", "__nv_relfatbin" or "" (a lone .fatbin/.cubin/.ptx file)
    offset: int = 0  # where its container starts in the file
    images: list = field(default_factory=list)
    kernels: Optional[tuple] = None  # entry kernels; None until read or when unreadable (compressed)

    @property
    def relocatable(self) -> bool:
        return self.section == "__nv_relfatbin"

    @property
    def sass(self) -> list:
        return _sorted_unique(i.arch for i in self.images if i.kind == "sass")

    @property
    def ptx(self) -> list:
        return _sorted_unique(i.arch for i in self.images if i.kind == "ptx")

    @property
    def stub(self) -> bool:
        """No kernels: read so, or (compressed, not unpacked here) only SASS images too small to hold one."""
        if self.kernels is not None:
            return not self.kernels and not self.ptx
        sass = [i for i in self.images if i.kind == "sass"]
        return (bool(sass) and len(sass) == len(self.images)
                and all(i.compressed and 0 < i.unpacked < STUB_MAX_BYTES for i in sass))

    def ptx_isa(self) -> dict:
        return _ptx_isa(self.images)

    def archs(self) -> ModuleArchs:
        """What the judge (compat.judge_modules) needs of this module."""
        return ModuleArchs(self.index, self.section, self.offset, self.sass, self.ptx, self.ptx_isa(),
                           None if self.kernels is None else list(self.kernels), self.stub)


@dataclass
class BinaryArchs:
    path: str
    format: str  # "elf" (host executable/shared object), "cubin", "fatbin" or "ptx"
    images: list = field(default_factory=list)
    modules: list = field(default_factory=list)
    elf_type: int = 0  # 1: a relocatable object (.o): its __nv_relfatbin is all it has
    sections: dict = field(default_factory=dict)  # a host ELF's section name -> (offset, size), for elf_dynamic

    @property
    def loaded(self) -> list:
        """The images the loader uses: not the device linker's relocatable inputs (except in a .o)."""
        if self.elf_type == 1:
            return self.images
        return [i for i in self.images if not i.relocatable]

    @property
    def sass(self) -> list:
        return _sorted_unique(i.arch for i in self.loaded if i.kind == "sass")

    @property
    def ptx(self) -> list:
        return _sorted_unique(i.arch for i in self.loaded if i.kind == "ptx")

    @property
    def lto(self) -> list:
        return _sorted_unique(i.arch for i in self.loaded if i.kind == "lto")

    @property
    def relocatable(self) -> dict:
        """{'sass': [...], 'ptx': [...]} of __nv_relfatbin (device-link inputs), {} when none or a .o."""
        rel = [i for i in self.images if i.relocatable]
        if not rel or self.elf_type == 1:
            return {}
        return {"sass": _sorted_unique(i.arch for i in rel if i.kind == "sass"),
                "ptx": _sorted_unique(i.arch for i in rel if i.kind == "ptx")}

    @property
    def has_cuda(self) -> bool:
        return bool(self.images)

    def loader_modules(self) -> list:
        """The modules the loader registers (all of them in a .o, a .fatbin, a .cubin or a .ptx file)."""
        if self.elf_type == 1:
            return self.modules
        return [m for m in self.modules if not m.relocatable]

    def relocatable_modules(self) -> list:
        return [] if self.elf_type == 1 else [m for m in self.modules if m.relocatable]

    def judged_modules(self) -> tuple:
        """([ModuleArchs] the loader registers, [ModuleArchs] of __nv_relfatbin) for compat.judge_modules."""
        return ([m.archs() for m in self.loader_modules() if m.images or m.section],
                [m.archs() for m in self.relocatable_modules()])

    def counts(self, kind: str = "sass") -> dict:
        """Entries per arch (what `cuobjdump --list-elf | sort | uniq -c` counts for SASS)."""
        return dict(sorted(Counter(i.arch for i in self.loaded if i.kind == kind).items(), key=lambda kv: _key(kv[0])))

    def ptx_isa(self) -> dict:
        """PTX arch -> the newest PTX ISA version among its loaded entries ('9.0')."""
        return _ptx_isa(self.loaded)


def _ptx_isa(images) -> dict:
    out: dict = {}
    for i in images:
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
        e_type, e_machine = struct.unpack_from("<HH", hdr, 16)
        e_flags = struct.unpack_from("<I", hdr, 48)[0]
        e_shoff = struct.unpack_from("<Q", hdr, 40)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", hdr, 58)
        sh_fmt, sh_fields = "<IIQQQQIIQQ", (0, 1, 4, 5)  # name, type, offset, size
    elif cls == 1:
        hdr = src.at(0, 52)
        if len(hdr) < 52:
            raise BinaryFormatError(f"{path}: truncated ELF header")
        e_type, e_machine = struct.unpack_from("<HH", hdr, 16)
        e_flags = struct.unpack_from("<I", hdr, 36)[0]
        e_shoff = struct.unpack_from("<I", hdr, 32)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", hdr, 46)
        sh_fmt, sh_fields = "<IIIIIIIIII", (0, 1, 4, 5)
    else:
        raise BinaryFormatError(f"{path}: corrupt ELF header (class byte {cls})")
    sections = _elf_sections(src, path, e_shoff, e_shentsize, e_shnum, e_shstrndx, sh_fmt, sh_fields)
    if e_machine == EM_CUDA:
        return _read_cubin(src, path, ident, e_flags, sections)
    out = BinaryArchs(path, "elf", elf_type=e_type, sections=sections if cls == 2 else {})
    for name, (off, size) in sections.items():
        if name in FATBIN_SECTIONS and size:
            if off + size > src.size:
                raise BinaryFormatError(f"{path}: truncated: section {name} ends at byte {off + size} "
                                        f"but the file has {src.size} bytes")
            _read_containers(src, off, off + size, path, out, strict=False, section=name)
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
    img = Image("sass", name, size=src.size, offset=0, unpacked=src.size)
    return BinaryArchs(path, "cubin", [img], [Module(0, "", 0, [img])])


# ---------------------------------------------------------------- fatbin containers


def _read_containers(src, start: int, end: int, path: str, out: BinaryArchs, strict: bool, section: str = "") -> None:
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
        mod = Module(len(out.modules), section, off)
        out.modules.append(mod)
        _read_entries(src, off + hsize, cend, path, out, mod)
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


def _read_entries(src, off: int, end: int, path: str, out: BinaryArchs, mod: Module) -> None:
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
        unpacked = struct.unpack_from("<Q", h, 56)[0] if comp else psize
        packed = struct.unpack_from("<I", h, 16)[0] if comp else 0
        common = dict(compressed=comp, size=psize, offset=off + ehs, module=mod.index,
                      relocatable=mod.section == "__nv_relfatbin", unpacked=unpacked, packed=packed)
        if kind == KIND_ELF:
            img = Image("sass", f"sm_{arch}{variant}", **common)
        elif kind == KIND_PTX:
            img = Image("ptx", f"compute_{arch}{variant}", ptx_isa=f"{major}.{minor}", **common)
        elif kind in KIND_LTO:
            img = Image("lto", f"lto_{arch}{variant}", **common)
        else:  # a kind this reader does not know: listed, never judged (the structure itself was valid)
            img = Image("unknown", f"kind{kind}_{arch}{variant}", **common)
        out.images.append(img)
        mod.images.append(img)
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
    img = Image("ptx", target, ptx_isa=ver, size=src.size, unpacked=src.size)
    return BinaryArchs(path, "ptx", [img], [Module(0, "", 0, [img])])


# ---------------------------------------------------------------- kernel names of a module

_RE_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$.%]*)")


def name_modules(src: _Source, modules) -> None:
    """Fill `kernels` of each module from one of its images (the cheapest readable one); stays None
    when every image is compressed and cannot be unpacked here, or too large to read."""
    for m in modules:
        if m.kernels is not None:
            continue
        for img in sorted((i for i in m.images if i.kind in ("sass", "ptx")),
                          key=lambda i: (bool(i.compressed), i.unpacked or i.size))[:2]:
            names = _image_kernels(src, img)
            if names is not None:
                m.kernels = names
                break


def name_modules_in_file(system, path: str, modules) -> None:
    """name_modules() through the System port; a file that went away leaves the names unknown."""
    try:
        name_modules(system_source(system, path), modules)
    except BinaryFormatError:
        return


def _image_kernels(src: _Source, img: Image) -> Optional[tuple]:
    if (img.unpacked or img.size) > _MAX_NAME_READ:
        return None
    raw = src.at(img.offset, img.packed if img.compressed else img.size)
    data = _unpack(img, raw) if img.compressed else raw
    if not data:
        return None
    if img.kind == "ptx":
        return tuple(sorted({m.group(1).decode("latin-1") for m in _RE_PTX_ENTRY.finditer(data)}))
    return cubin_kernels(data)


def _unpack(img: Image, raw: bytes) -> Optional[bytes]:
    """A zstd payload unpacked with the interpreter's own decoder, if it has one (never installed for
    this: a module without names is still judged, only named by its index)."""
    if img.compressed != "zstd" or not raw:
        return None
    try:
        from compression import zstd  # Python 3.14+

        out = zstd.decompress(raw)
    except ImportError:
        try:
            import zstandard  # optional; present in many environments
        except ImportError:
            return None
        try:
            out = zstandard.ZstdDecompressor().decompress(raw, max_output_size=_MAX_NAME_READ)
        except Exception:  # noqa: BLE001 - a corrupt payload leaves the module unnamed
            return None
    except Exception:  # noqa: BLE001
        return None
    return out if len(out) <= _MAX_NAME_READ else None


def cubin_kernels(data: bytes) -> Optional[tuple]:
    """Entry kernels in a cubin (ELF64): STT_FUNC symbols with STO_CUDA_ENTRY. None if not a readable ELF.

    Hand-written on purpose: twenty lines over the section-header reader above, on a blob already in
    memory; an ELF library would add a dependency for the same three tables."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize < 64 or shoff + shnum * shentsize > len(data):
        return None
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: set = set()
    for sh in secs:
        if sh[1] != 2 or sh[6] >= shnum:  # SHT_SYMTAB and its string table
            continue
        stroff, strsize = secs[sh[6]][4], secs[sh[6]][5]
        entsize = sh[9] or 24
        if sh[4] + sh[5] > len(data) or stroff + strsize > len(data) or entsize < 24:
            return None
        for k in range(sh[5] // entsize):
            st_name, st_info, st_other = struct.unpack_from("<IBB", data, sh[4] + k * entsize)
            if st_info & 0xF == 2 and st_other & STO_CUDA_ENTRY and st_name < strsize:
                end = data.find(b"\0", stroff + st_name, stroff + strsize)
                names.add(data[stroff + st_name:end if end >= 0 else stroff + strsize].decode("latin-1"))
    return tuple(sorted(names))
