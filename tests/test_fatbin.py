"""The pure-Python fatbin/ELF reader: real nvcc builds (fatbins, cubins, executables, shared objects,
compressed and not), synthetic containers, and truncated/corrupt input."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import pytest

from cudadoctor.probes import fatbin
from cudadoctor.probes.fatbin import BinaryFormatError, read_bytes, read_file
from fakes.system import FakeSystem

KERNEL = 'extern "C" __global__ void k(int *o) { o[threadIdx.x] = threadIdx.x; }\n'
MAIN = KERNEL + "int main() { int *d; cudaMalloc(&d, 128); k<<<1, 32>>>(d); return (int)cudaDeviceSynchronize(); }\n"

# (gencode list, expected sass, expected ptx)
GENCODES = [
    (["arch=compute_90,code=sm_90"], ["sm_90"], []),
    (["arch=compute_80,code=compute_80"], [], ["compute_80"]),
    (["arch=compute_90a,code=sm_90a"], ["sm_90a"], []),
    (["arch=compute_100f,code=sm_100f"], ["sm_100f"], []),
    (["arch=compute_80,code=sm_80", "arch=compute_86,code=sm_86", "arch=compute_90,code=[sm_90,compute_90]"],
     ["sm_80", "sm_86", "sm_90"], ["compute_90"]),
    (["arch=compute_120,code=compute_120", "arch=compute_75,code=sm_75"], ["sm_75"], ["compute_120"]),
]


def _nvcc() -> str:
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def _compile(tmp, name: str, src: str, args: list) -> str:
    cu = os.path.join(tmp, name + ".cu")
    with open(cu, "w") as f:
        f.write(src)
    out = os.path.join(tmp, name)
    subprocess.run([_nvcc(), *args, "-o", out, cu], check=True, capture_output=True, timeout=300)
    return out


def _flags(gencodes):
    out = []
    for g in gencodes:
        out += ["-gencode", g]
    return out


@pytest.mark.nvcc
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compress-all"])
@pytest.mark.parametrize("gencodes,sass,ptx", GENCODES, ids=[g[0][0].split(",")[1] + f"+{len(g[0])}" for g in GENCODES])
def test_fatbin_files_read_exactly_what_was_built(tmp_path, gencodes, sass, ptx, compress):
    extra = ["-Xfatbin=-compress-all"] if compress else []
    out = _compile(str(tmp_path), "k.fatbin", KERNEL, ["-fatbin", *_flags(gencodes), *extra])
    b = fatbin.read_file(FakeSystem(files={"/k.fatbin": open(out, "rb").read()}), "/k.fatbin")
    assert b.format == "fatbin"
    assert b.sass == sass
    assert b.ptx == ptx
    if compress and sass:
        assert {i.compressed for i in b.images if i.kind == "sass"} == {"zstd"}
    for arch in ptx:
        assert b.ptx_isa()[arch] == "9.0"  # nvcc 13.0 writes PTX ISA 9.0


@pytest.mark.nvcc
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compress-all"])
def test_executable_and_shared_object(tmp_path, compress):
    from cudadoctor.system.host import HostSystem

    extra = ["-Xfatbin=-compress-all"] if compress else []
    gen = _flags(["arch=compute_80,code=sm_80", "arch=compute_90a,code=sm_90a", "arch=compute_90,code=compute_90"])
    exe = _compile(str(tmp_path), "prog", MAIN, [*gen, *extra])
    so = _compile(str(tmp_path), "libk.so", KERNEL, ["-shared", "-Xcompiler", "-fPIC",
                                                      *_flags(["arch=compute_86,code=sm_86"]), *extra])
    s = HostSystem()
    e = read_file(s, exe)
    assert (e.format, e.sass, e.ptx) == ("elf", ["sm_80", "sm_90a"], ["compute_90"])
    # an executable holds two ELF images per arch, as `cuobjdump --list-elf` lists them (see nokernelimage.txt)
    assert e.counts("sass") == {"sm_80": 2, "sm_90a": 2}
    lib = read_file(s, so)
    assert (lib.format, lib.sass, lib.ptx) == ("elf", ["sm_86"], [])


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a", "sm_100a", "sm_120"])
def test_cubin(tmp_path, arch):
    out = _compile(str(tmp_path), f"{arch}.cubin", KERNEL, ["-cubin", f"-arch={arch}"])
    b = read_bytes(open(out, "rb").read(), out)
    assert (b.format, b.sass, b.ptx) == ("cubin", [arch], [])


@pytest.mark.nvcc
def test_ptx_text_and_relocatable_object(tmp_path):
    ptx = _compile(str(tmp_path), "k.ptx", KERNEL, ["-ptx", "-arch=sm_90a"])
    b = read_bytes(open(ptx, "rb").read(), ptx)
    assert (b.format, b.sass, b.ptx) == ("ptx", [], ["compute_90a"])
    obj = _compile(str(tmp_path), "k.o", KERNEL, ["-rdc=true", "-c", *_flags(["arch=compute_80,code=sm_80"])])
    o = read_bytes(open(obj, "rb").read(), obj)
    assert (o.format, o.sass) == ("elf", ["sm_80"])  # from __nv_relfatbin


@pytest.mark.nvcc
def test_truncated_and_corrupt_real_builds(tmp_path):
    out = _compile(str(tmp_path), "k.fatbin", KERNEL, ["-fatbin", *_flags(["arch=compute_90,code=sm_90",
                                                                           "arch=compute_80,code=compute_80"])])
    data = open(out, "rb").read()
    for cut in (3, 10, 40, len(data) // 2, len(data) - 1):
        with pytest.raises(BinaryFormatError) as e:
            read_bytes(data[:cut], "k.fatbin")
        assert "k.fatbin" in str(e.value)
    exe = _compile(str(tmp_path), "prog", MAIN, _flags(["arch=compute_90,code=sm_90"]))
    edata = open(exe, "rb").read()
    with pytest.raises(BinaryFormatError, match="truncated"):
        read_bytes(edata[: len(edata) // 3], "prog")  # section headers past the end
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 16 + 8, 1 << 40)  # first entry claims a 1 TiB payload
    with pytest.raises(BinaryFormatError, match="corrupt fatbin entry"):
        read_bytes(bytes(bad), "k.fatbin")


# ---------------------------------------------------------------- synthetic containers (no nvcc)


def make_entry(kind: int, arch: int, payload: bytes = b"\0" * 32, flags: int = 0x11, ptx=(9, 0)) -> bytes:
    hdr = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x101, 64, len(payload), 0, 0, ptx[1], ptx[0], arch, 0, 0, flags, 0, 0)
    return hdr + payload


def make_fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_synthetic_fatbin_flags_and_kinds():
    data = make_fatbin(make_entry(2, 90), make_entry(2, 90, flags=0x100011), make_entry(2, 100, flags=0x200011),
                       make_entry(1, 80, ptx=(8, 7)), make_entry(1, 80, ptx=(9, 0), flags=0x8011),
                       make_entry(8, 90))
    b = read_bytes(data)
    assert b.sass == ["sm_90", "sm_90a", "sm_100f"]
    assert b.ptx == ["compute_80"]
    assert b.lto == ["lto_90"]
    assert b.ptx_isa() == {"compute_80": "9.0"}
    assert b.counts("ptx") == {"compute_80": 2}
    assert [i.compressed for i in b.images if i.kind == "ptx"] == ["", "zstd"]


def test_two_containers_in_a_host_elf_section_are_both_read():
    """A host ELF with .nv_fatbin holding two 8-aligned containers, read through read_range hops."""
    c1 = make_fatbin(make_entry(2, 80, b"\1" * 20))
    c2 = make_fatbin(make_entry(2, 90), make_entry(1, 90))
    pad = b"\0" * ((-len(c1)) % 8)
    section = c1 + pad + c2
    elf = _host_elf({".nv_fatbin": section, ".text": b"\x90" * 64})
    fs = FakeSystem(files={"/lib/libx.so": elf})
    b = read_file(fs, "/lib/libx.so")
    assert (b.format, b.sass, b.ptx) == ("elf", ["sm_80", "sm_90"], ["compute_90"])
    plain = read_file(FakeSystem(files={"/lib/liby.so": _host_elf({".text": b"\x90" * 64})}), "/lib/liby.so")
    assert (plain.format, plain.images) == ("elf", [])


def _host_elf(sections: dict) -> bytes:
    """A minimal little-endian ELF64 (e_machine x86-64) with the given PROGBITS sections."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in list(sections) + [".shstrtab"])
    body = b""
    offs = {}
    pos = 64
    for n, data in sections.items():
        offs[n] = pos + len(body)
        body += data + b"\0" * ((-len(data)) % 8)
    strtab_off = pos + len(body)
    body += names + b"\0" * ((-len(names)) % 8)
    shoff = pos + len(body)
    shdrs = [b"\0" * 64]
    for n, data in sections.items():
        shdrs.append(struct.pack("<IIQQQQIIQQ", names.index(n.encode() + b"\0"), 1, 0, 0, offs[n], len(data),
                                 0, 0, 8, 0))
    shdrs.append(struct.pack("<IIQQQQIIQQ", names.index(b".shstrtab\0"), 3, 0, 0, strtab_off, len(names), 0, 0, 1, 0))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    hdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(shdrs), len(shdrs) - 1)
    return hdr + body + b"".join(shdrs)


@pytest.mark.parametrize("data,match", [
    (b"", "too short"),
    (b"hello world, not a binary", "not a CUDA binary"),
    (b"\x7fELF\x02", "truncated ELF header"),
    (struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, 500) + b"\0" * 20, "truncated"),
    (struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 4, 0), "corrupt fatbin header"),
])
def test_bad_input_is_a_clear_error(data, match):
    with pytest.raises(BinaryFormatError, match=match):
        read_bytes(data, "x.bin")


def test_truncated_fatbin_section_in_elf():
    elf = _host_elf({".nv_fatbin": make_fatbin(make_entry(2, 90))})
    with pytest.raises(BinaryFormatError, match="truncated"):
        read_bytes(elf[:100], "libcut.so")


def test_unreadable_and_missing_files():
    fs = FakeSystem(files={"/ok.fatbin": make_fatbin(make_entry(2, 86))}, unreadable=["/ok.fatbin"])
    with pytest.raises(BinaryFormatError, match="cannot read"):
        read_file(fs, "/ok.fatbin")
    with pytest.raises(BinaryFormatError, match="no such file"):
        read_file(fs, "/missing.so")


def test_candidate_names():
    assert fatbin.is_candidate_name("libtorch_cuda.so")
    assert fatbin.is_candidate_name("libcudnn.so.9")
    assert fatbin.is_candidate_name("k.cubin")
    assert not fatbin.is_candidate_name("module.py")


def test_large_file_through_the_read_ahead_window_matches_in_memory(tmp_path):
    """Thousands of entries of mixed sizes across many 256 KiB windows, as in libtorch_cuda.so."""
    import random
    import time

    from cudadoctor.system.host import HostSystem

    rng = random.Random(11)
    archs = [75, 80, 86, 90, 100, 120]
    containers = []
    for _ in range(400):
        entries = [make_entry(2, a, b"\0" * rng.choice([8, 200, 5000, 70000])) for a in archs]
        c = make_fatbin(*entries)
        containers.append(c + b"\0" * ((-len(c)) % 8))
    elf = _host_elf({".nv_fatbin": b"".join(containers)})
    path = tmp_path / "libbig.so"
    path.write_bytes(elf)
    t0 = time.monotonic()
    b = read_file(HostSystem(), str(path))
    took = time.monotonic() - t0
    assert b.counts("sass") == {f"sm_{a}": 400 for a in archs}
    assert b.counts("sass") == read_bytes(elf).counts("sass")
    assert took < 5.0
