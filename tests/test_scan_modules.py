"""Module-by-module verdicts against what real launches did on an H200 (tests/data/h200/modules_*.txt):
the same layouts are built here with real nvcc 13.0 and judged for cc 9.0."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from cudadoctor.compat import NATIVE, NO_IMAGE, NO_KERNELS, OTHER_GPUS, PTX_JIT, ModuleArchs, judge_modules
from cudadoctor.probes import fatbin
from cudadoctor.system.host import HostSystem
from test_fatbin import _nvcc

DATA = os.path.join(os.path.dirname(__file__), "data", "h200")
A = 'extern "C" __global__ void ka(int *o) { o[threadIdx.x] = 90; }\n'
B = 'extern "C" __global__ void kb(int *o) { o[threadIdx.x] = 80; }\n'
HELPER = "__device__ int helper(int x) { return x + 41; }\n"
MAIN = ("__device__ int helper(int x);\n__global__ void kmain(int *o) { o[0] = helper(1); }\n"
        "int main() { int *d; cudaMalloc(&d, 4); kmain<<<1,1>>>(d); return (int)cudaDeviceSynchronize(); }\n")


def _recorded(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def _run(args, cwd):
    subprocess.run([_nvcc(), *args], cwd=cwd, check=True, capture_output=True, timeout=300)


def _write(tmp, name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def _judge(path, cc=(9, 0), driver="13.0"):
    s = HostSystem()
    b = fatbin.read_file(s, path)
    loader, reloc = b.judged_modules()
    fv = judge_modules(loader, reloc, cc, driver)
    fatbin.name_modules_in_file(s, path, [b.modules[v.module.index] for v in fv.modules if v.verdict != NATIVE])
    loader, reloc = b.judged_modules()
    return b, judge_modules(loader, reloc, cc, driver)


@pytest.mark.nvcc
def test_two_module_so_is_judged_by_its_worst_module_as_on_the_h200(tmp_path):
    rec = _recorded("modules_build.txt")
    assert re.search(r"libab\.so run_a err 0", rec) and re.search(r"libab\.so run_b err 209", rec)
    assert re.search(r"libabptx\.so run_b err 0", rec)
    t = str(tmp_path)
    _write(t, "a.cu", A)
    _write(t, "b.cu", B)
    _run(["-Xcompiler", "-fPIC", "-gencode", "arch=compute_90,code=sm_90", "-c", "a.cu", "-o", "a.o"], t)
    _run(["-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80", "-c", "b.cu", "-o", "b.o"], t)
    _run(["-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=compute_80", "-c", "b.cu", "-o", "b2.o"], t)
    _run(["-shared", "a.o", "b.o", "-o", "libab.so"], t)
    _run(["-shared", "a.o", "b2.o", "-o", "libabptx.so"], t)
    b, fv = _judge(os.path.join(t, "libab.so"))
    assert b.sass == ["sm_75", "sm_80", "sm_90"]  # what cuobjdump --list-elf listed there
    assert fv.verdict == NO_IMAGE  # the union (sm_90 present) said "native": the launch of kb failed (209)
    assert fv.worst.module.kernels == ["kb"]
    assert [v.verdict for v in fv.modules] == [NO_KERNELS, NATIVE, NO_IMAGE]  # sm_75: nvcc's empty dlink stub
    _, fv = _judge(os.path.join(t, "libabptx.so"))
    assert fv.verdict == PTX_JIT and fv.worst.module.index == 2  # both launches ran
    assert fv.worst.module.kernels in (None, ["kb"])  # nvcc compresses PTX (zstd): named only with a decoder
    _, fv = _judge(os.path.join(t, "libab.so"), cc=(8, 0))
    assert fv.verdict == NATIVE  # a's sm_90-only module is for newer GPUs: not this one's failure
    assert [v.verdict for v in fv.modules] == [NO_KERNELS, OTHER_GPUS, NATIVE]


RDC = [  # (-gencode, what the launch did on the H200: runs?)
    ("arch=compute_80,code=compute_80", True),
    ("arch=compute_80,code=sm_80", False),
    ("arch=compute_90,code=sm_90", True),
    ("arch=compute_80,code=[sm_80,compute_80]", True),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("gencode,runs", RDC, ids=[g for g, _ in RDC])
def test_rdc_executables_match_the_h200_launches(tmp_path, gencode, runs):
    rec = _recorded("modules_rdc.txt")
    block = rec.split(f"== rdc -gencode {gencode}\n", 1)[1]
    assert ("err=0 (no error)" in block.splitlines()[0]) == runs  # the recording says so
    t = str(tmp_path)
    _write(t, "helper.cu", HELPER)
    _write(t, "main_rdc.cu", MAIN)
    _run(["-rdc=true", "-gencode", gencode, "main_rdc.cu", "helper.cu", "-o", "rdc_x"], t)
    b, fv = _judge(os.path.join(t, "rdc_x"))
    assert (fv.verdict in (NATIVE, PTX_JIT)) == runs, fv.reason
    if gencode.endswith("code=compute_80"):
        # cudadevrt's objects (sm_90 SASS among them) sit in __nv_relfatbin: never the file's archs
        assert (b.sass, b.ptx) == ([], []) and "sm_90" in b.relocatable["sass"]
        assert fv.verdict == PTX_JIT
    if not runs:
        assert fv.worst.module.kernels == ["_Z5kmainPi"]


@pytest.mark.nvcc
def test_rdc_shared_object_with_an_empty_loader_container(tmp_path):
    """librdc.so of the recording: .nv_fatbin of 16 bytes, everything in __nv_relfatbin."""
    assert "[16] .nv_fatbin        PROGBITS        0000000000094d78 094d78 000010" in _recorded("modules_rdc.txt")
    t = str(tmp_path)
    _write(t, "a.cu", A)
    _run(["-rdc=true", "-Xcompiler", "-fPIC", "-shared", "-gencode", "arch=compute_80,code=compute_80", "a.cu",
          "-o", "librdc.so", "-lcudadevrt"], t)
    b, fv = _judge(os.path.join(t, "librdc.so"))
    assert (b.sass, b.ptx) == ([], [])  # cuobjdump: no ELF, no PTX
    assert fv.verdict == PTX_JIT
    _, old = _judge(os.path.join(t, "librdc.so"), cc=(7, 5))
    assert old.verdict == NO_IMAGE  # compute_80 PTX cannot JIT for cc 7.5: no load-time link either


def test_vendor_relfatbin_archs_are_not_the_files_archs():
    """libtorch_nvshmem.so: cuobjdump lists sm_75..sm_120 (no sm_89, no PTX); sm_89 and compute_120 are in
    __nv_relfatbin. Synthetic copy of that layout (one linked container + relocatable ones)."""
    from test_fatbin import _host_elf, make_entry, make_fatbin

    rec = _recorded("modules_vendor.txt")
    assert "libtorch_nvshmem.4.sm_90.cubin" in rec and "sm_89" not in rec.split("libtorch_nvshmem.so 4039577")[1] \
        .split("[11] __nv_relfatbin")[0]
    linked = make_fatbin(*[make_entry(2, a) for a in (75, 80, 86, 90, 100, 120)])
    rel = make_fatbin(*[make_entry(2, a) for a in (75, 80, 89, 90, 100, 120)], make_entry(1, 120))
    b = fatbin.read_bytes(_host_elf({"__nv_relfatbin": rel, ".nv_fatbin": linked}), "libtorch_nvshmem.so")
    assert b.sass == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"] and b.ptx == []
    assert b.relocatable == {"sass": ["sm_75", "sm_80", "sm_89", "sm_90", "sm_100", "sm_120"], "ptx": ["compute_120"]}
    loader, reloc = b.judged_modules()
    assert judge_modules(loader, reloc, (9, 0)).verdict == NATIVE


def test_relocatable_images_never_make_a_verdict_milder():
    linked = ModuleArchs(0, ".nv_fatbin", sass=["sm_80"], kernels=["k"])
    # relocatable SASS for sm_90 alone cannot stand in for a missing -rdc object's PTX
    reloc = [ModuleArchs(1, "__nv_relfatbin", sass=["sm_80"]), ModuleArchs(2, "__nv_relfatbin", sass=["sm_90"])]
    assert judge_modules([linked], reloc, (9, 0)).verdict == NO_IMAGE
    reloc_ok = [ModuleArchs(1, "__nv_relfatbin", sass=["sm_80"], ptx=["compute_80"]),
                ModuleArchs(2, "__nv_relfatbin", sass=["sm_90"])]
    assert judge_modules([linked], reloc_ok, (9, 0)).verdict == PTX_JIT
    # PTX of an -rdc object newer than the driver: the load-time link fails too
    reloc_new = [ModuleArchs(1, "__nv_relfatbin", ptx=["compute_80"], ptx_isa={"compute_80": "9.1"})]
    assert judge_modules([linked], reloc_new, (9, 0), "13.0").verdict == NO_IMAGE


def test_arch_specific_modules_and_stubs_are_not_failures_but_a_file_of_only_them_is():
    generic = ModuleArchs(0, sass=["sm_80", "sm_90"], kernels=["g"])
    sm100a = ModuleArchs(1, sass=["sm_100a"], kernels=["blackwell_only"])
    stub = ModuleArchs(2, sass=["sm_75"], stub=True)
    assert judge_modules([generic, sm100a, stub], [], (9, 0)).verdict == NATIVE
    assert judge_modules([sm100a, stub], [], (9, 0)).verdict == NO_IMAGE
    assert judge_modules([stub], [], (9, 0)).verdict == NO_KERNELS
    old = ModuleArchs(3, sass=["sm_80"], kernels=["forgot_sm90"])
    fv = judge_modules([generic, old], [], (9, 0))
    assert fv.verdict == NO_IMAGE and fv.worst.module.index == 3 and "forgot_sm90" in fv.reason


def test_ptx_newer_than_the_driver_in_one_module():
    a = ModuleArchs(0, sass=["sm_90"])
    b = ModuleArchs(1, ptx=["compute_80"], ptx_isa={"compute_80": "9.0"})  # CUDA 13.0 PTX
    assert judge_modules([a, b], [], (9, 0), "12.8").verdict == "ptx-unsupported-by-driver"
    assert judge_modules([a, b], [], (9, 0), "13.0").verdict == PTX_JIT


def test_compressed_device_link_stub_is_recognised_without_unpacking():
    from test_fatbin import make_fatbin

    import struct

    def entry(arch, unpacked):  # a zstd-flagged SASS entry whose header says how big it unpacks
        payload = b"\x28\xb5\x2f\xfd" + b"\0" * 28
        return struct.pack("<HHIQIIHHIIIQQQ", 2, 0x101, 64, len(payload), len(payload), 0, 8, 1, arch, 0, 0,
                           0x8011, 0, unpacked) + payload

    b = fatbin.read_bytes(make_fatbin(entry(75, 1456)) + make_fatbin(entry(90, 3568)), "x.fatbin")
    assert [m.stub for m in b.modules] == [True, False]
