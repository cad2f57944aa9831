"""The GPU architectures inside a torch wheel's libtorch_cuda.so, read without unpacking the wheel.

A wheel is a zip. Its central directory (at the end) says where each member starts and how it is
stored, so only that directory and the one member are fetched, with HTTP range requests:

- a member stored without compression (method 0) is read in place: cudadoctor's fatbin reader asks
  for the ELF header, the section headers and each fatbin entry header, and nothing else comes over
  the wire;
- a deflated member (method 8, what torch's wheels use: 2.15.0's libtorch_cuda.so is 362 MB
  compressed, 520 MB inflated) cannot be read in place, so only that member's compressed bytes are
  streamed and inflated into a temporary file (the rest of the wheel is never downloaded), which the
  fatbin reader then reads.

zipfile (stdlib) parses the central directory through a seekable file object over the ranges; zlib
inflates. The arch list is what most of the library's fatbin containers carry (see `arch_list`).
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
import time
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

from cudadoctor.compat import parse_arch
from cudadoctor.probes import fatbin

# The fatbin reader's random-access source (size + fetch(offset, n)), reused rather than copied.
Source = fatbin._Source

MEMBER = "torch/lib/libtorch_cuda.so"
TIMEOUT = 60.0
CHUNK = 8 << 20


class WheelError(RuntimeError):
    """The wheel could not be read (network, not a zip, no libtorch_cuda.so, corrupt member)."""


class HttpRanges:
    """Random access to a remote file through HTTP range requests (urllib, a timeout on each)."""

    def __init__(self, url: str, timeout: float = TIMEOUT, opener: Optional[Callable] = None):
        self.url, self.timeout = url, timeout
        self._open = opener or urllib.request.urlopen
        self.requests = self.bytes = 0
        head = self._get(0, 1)
        total = head["range"].rpartition("/")[2] if head["range"] else ""
        if not total.isdigit():
            raise WheelError(f"{url}: the server does not answer range requests (Content-Range {head['range']!r})")
        self.size = int(total)

    def _get(self, offset: int, n: int) -> dict:
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={offset}-{offset + n - 1}"})
        try:
            with self._open(req, timeout=self.timeout) as r:
                data = r.read()
                rng = r.headers.get("Content-Range", "")
        except OSError as e:  # URLError, HTTPError, timeouts
            raise WheelError(f"{self.url}: {e}") from e
        self.requests += 1
        self.bytes += len(data)
        return {"data": data, "range": rng}

    def read(self, offset: int, n: int) -> bytes:
        if n <= 0 or offset >= self.size:
            return b""
        return self._get(offset, min(n, self.size - offset))["data"]


class FileRanges:
    """The same interface over a local file (tests, and wheels already downloaded)."""

    def __init__(self, path: str):
        self.path = path
        self.size = os.path.getsize(path)
        self.requests = self.bytes = 0

    def read(self, offset: int, n: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read(max(0, n))
        self.requests += 1
        self.bytes += len(data)
        return data


class _SeekableRanges(io.RawIOBase):
    """A read-only seekable file over a ranges object, for zipfile's central-directory parsing."""

    def __init__(self, ranges):
        self.r, self.pos = ranges, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else (self.pos + off if whence == 1 else self.r.size + off)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.r.size - self.pos if n is None or n < 0 else n
        data = self.r.read(self.pos, n)
        self.pos += len(data)
        return data


@dataclass
class WheelArchs:
    """What libtorch_cuda.so inside one wheel carries."""

    member: str
    stored: bool  # True: read in place; False: the deflated member was streamed and inflated
    sass_counts: dict = field(default_factory=dict)  # sm_XY -> fatbin entries
    ptx_counts: dict = field(default_factory=dict)  # compute_XY -> fatbin entries
    fetched_bytes: int = 0
    requests: int = 0
    seconds: float = 0.0

    @property
    def archs(self) -> list:
        """The TORCH_CUDA_ARCH_LIST as matrix/torch.toml writes it ('9.0'), SASS."""
        return arch_list(self.sass_counts)

    @property
    def ptx(self) -> list:
        return arch_list(self.ptx_counts)

    @property
    def extra(self) -> list:
        return extra_targets(self.sass_counts)


def _plain_cc(name: str) -> Optional[str]:
    a = parse_arch(name)
    return f"{a.major}.{a.minor}" if a and not a.variant else None


def arch_list(counts: dict) -> list:
    """The arch list a build was made with, from how many fatbin entries each target has.

    torch compiles every .cu file for each arch of TORCH_CUDA_ARCH_LIST, and a few kernels also for
    arch-specific targets. So the list is the plain targets present in at least half as many entries
    as the most common one (torch 2.11.0+cu130's libtorch_cuda.so: sm_75, sm_80, sm_86, sm_90,
    sm_100, sm_120 in 444 entries each; sm_100a 59, sm_90a 4, sm_89 1).
    """
    if not counts:
        return []
    top = max(counts.values())
    plain = [(a, _plain_cc(a)) for a, n in counts.items() if n * 2 >= top]
    ccs = sorted({cc for _, cc in plain if cc}, key=lambda s: tuple(int(x) for x in s.split(".")))
    return ccs


def extra_targets(counts: dict) -> list:
    """Targets only a few kernels are built for (sm_90a, sm_100a): not part of the arch list."""
    base = set(arch_list(counts))
    return sorted(a for a in counts if _plain_cc(a) not in base)


def _member_offset(ranges, info: zipfile.ZipInfo) -> int:
    """Where a member's data starts: after its local header (whose name/extra lengths can differ)."""
    local = ranges.read(info.header_offset, 30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise WheelError(f"{info.filename}: corrupt local header at byte {info.header_offset}")
    n, e = struct.unpack_from("<HH", local, 26)
    return info.header_offset + 30 + n + e


def _inflate_to(ranges, start: int, csize: int, out, chunk: int = CHUNK) -> int:
    d = zlib.decompressobj(-15)
    pos = written = 0
    while pos < csize:
        data = ranges.read(start + pos, min(chunk, csize - pos))
        if not data:
            raise WheelError(f"the member ends early: {pos} of {csize} compressed bytes")
        pos += len(data)
        try:
            block = d.decompress(data)
        except zlib.error as e:
            raise WheelError(f"corrupt deflate stream at compressed byte {pos}: {e}") from e
        out.write(block)
        written += len(block)
    out.write(d.flush())
    return written


def read_wheel_archs(ranges, member: str = MEMBER, tmpdir: Optional[str] = None) -> WheelArchs:
    """Read the archs of `member` (torch/lib/libtorch_cuda.so) from a wheel behind `ranges`."""
    t0 = time.monotonic()
    try:
        z = zipfile.ZipFile(_SeekableRanges(ranges))
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise WheelError(f"not a wheel (zip): {e}") from e
    info = next((i for i in z.infolist() if i.filename == member or i.filename.endswith("/" + member)), None)
    if info is None:
        raise WheelError(f"the wheel has no {member} (a CPU-only wheel?)")
    start = _member_offset(ranges, info)
    try:
        if info.compress_type == zipfile.ZIP_STORED:
            src = Source(info.file_size, lambda off, n: ranges.read(start + off, n), window=1 << 20)
            binary = fatbin.read_source(src, info.filename)
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            with tempfile.TemporaryFile(dir=tmpdir) as f:
                size = _inflate_to(ranges, start, info.compress_size, f)
                if size != info.file_size:
                    raise WheelError(f"{member}: inflated to {size} bytes, the zip says {info.file_size}")

                def fetch(off: int, n: int) -> bytes:
                    f.seek(off)
                    return f.read(n)

                binary = fatbin.read_source(Source(size, fetch, window=1 << 20), info.filename)
        else:
            raise WheelError(f"{member}: zip compression method {info.compress_type} is not stored or deflate")
    except fatbin.BinaryFormatError as e:
        raise WheelError(str(e)) from e
    return WheelArchs(info.filename, info.compress_type == zipfile.ZIP_STORED, binary.counts("sass"),
                      binary.counts("ptx"), ranges.bytes, ranges.requests, time.monotonic() - t0)
