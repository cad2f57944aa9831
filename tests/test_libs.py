"""Libraries actually loaded: the H200 fixture (cuDNN 9.19 from the pip wheel) and each trap."""

from __future__ import annotations

from libs_support import (
    SITE,
    FakeCmd,
    FakeSystem,
    base_facts,
    data,
    finding_ids,
    gather_libs,
    h200_kernel_module,
    h200_system,
    h200_torch,
)

from cudadoctor.checks.registry import Context, load_all, run_one
from cudadoctor.facts import libs as L
from cudadoctor.facts.types import PlatformInfo, TorchInfo, UserspaceDriverInfo
from cudadoctor.model import Fact, Status


def run_libraries(facts):
    return run_one(load_all()["libraries"], Context(facts=facts))


# ---------------------------------------------------------------- pure helpers

def test_cudnn_version_str():
    assert L.cudnn_version_str(91900) == "9.19.0"
    assert L.cudnn_version_str(90100) == "9.1.0"
    assert L.cudnn_version_str(8902) == "8.9.2"
    assert L.cudnn_version_str(None) == ""


def test_file_version_and_family():
    assert L.file_version("/x/libcudnn.so.9.14.0") == "9.14.0"
    assert L.file_version("/x/libcuda.so.580.159.04") == "580.159.04"
    assert L.file_version("/x/libcudnn.so.9") == "9"
    assert L.family_of("libcudnn_graph.so.9") == "libcudnn_graph"
    assert L.family_of("libcudart.so.13") == "libcudart"
    assert L.family_of("libcublasLt.so.13") == "libcublasLt"
    assert L.family_of("libc.so.6") == ""


def test_parse_ldd_on_h200_output():
    found, missing = L.parse_ldd(data("libs", "ldd_torch_cuda.txt"))
    paths = dict(found)
    assert paths["libcudnn.so.9"] == SITE + "/nvidia/cudnn/lib/libcudnn.so.9"
    assert missing == []


# ---------------------------------------------------------------- the H200 machine

def test_h200_cudnn_from_pip_wheel_not_system():
    f = gather_libs(h200_system())
    assert f.ok and f.value.method == "maps"
    cudnn = f.value.by_family("libcudnn")
    assert len(cudnn) == 1
    c = cudnn[0]
    assert c.origin == L.PIP
    assert c.origin_detail.startswith("nvidia-cudnn-cu13 9.19")
    assert c.version.startswith("9.19")
    assert f.value.torch_cudnn == "9.19.0"
    system_copies = [x for x in f.value.copies_of("libcudnn") if x.origin == L.SYSTEM]
    assert [x.version for x in system_copies] == ["9.14.0"]


def test_h200_origins():
    f = gather_libs(h200_system())
    by = {x.family: x for x in f.value.loaded}
    assert by["libcudart"].origin == L.PIP and by["libcudart"].version == "13.0.96"
    assert by["libcublas"].origin_detail == "nvidia-cublas 13.1.0.3"
    assert by["libcuda"].version == "580.159.04"
    assert by["libcuda"].via.startswith("LD_LIBRARY_PATH")
    assert by["libnccl"].via == "torch's RUNPATH"


def test_h200_check_is_ok_and_names_unused_system_cudnn():
    r = run_libraries(base_facts())
    ids = finding_ids(r)
    assert r.status is Status.OK
    assert ids["libs.loaded"] is Status.OK
    assert ids["libs.copies.cudnn"] is Status.OK
    assert not any(s in (Status.WARN, Status.FAIL) for s in ids.values())
    copies = next(f for f in r.findings if f.id == "libs.copies.cudnn")
    assert "9.14.0" in str(copies.evidence) and "nvidia-cudnn-cu13" in str(copies.evidence)


# ---------------------------------------------------------------- traps

def test_stub_libcuda_loaded():
    stub_dir = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs"
    env = dict(h200_system().env, LD_LIBRARY_PATH=f"{stub_dir}:/usr/local/nvidia/lib64")
    s = h200_system(env)
    s.add_file(stub_dir + "/libcuda.so", b"\x7fELF")
    s.symlinks[stub_dir + "/libcuda.so.1"] = "libcuda.so"
    maps = [p for p in data("libs", "h200_maps.txt").split() if "libcuda.so" not in p] + [stub_dir + "/libcuda.so"]
    torch = h200_torch(libraries=maps, available=False, init_error="RuntimeError: CUDA driver is a stub library")
    facts = base_facts(s, torch=Fact.found(torch))
    r = run_libraries(facts)
    ids = finding_ids(r)
    assert ids["libs.stub-libcuda"] is Status.FAIL
    stub = next(f for f in r.findings if f.id == "libs.stub-libcuda")
    assert stub.fix.commands == ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64",)
    assert r.status is Status.FAIL


def _cu12_system() -> FakeSystem:
    """torch cu121 from pip, with LD_LIBRARY_PATH=/usr/local/cuda-12.1/lib64 (ragflow#4466)."""
    site = "/home/u/.venv/lib/python3.12/site-packages"
    s = FakeSystem(env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/cuda-12.1/lib64:"},
                   python="/home/u/.venv/bin/python")
    s.add_file(f"{site}/torch/lib/libtorch_cuda.so", b"\x7fELF")
    for dist, rel in (("nvidia_nvjitlink_cu12-12.4.127.dist-info", "nvidia/nvjitlink/lib/libnvJitLink.so.12"),
                      ("nvidia_cusparse_cu12-12.3.1.170.dist-info", "nvidia/cusparse/lib/libcusparse.so.12")):
        s.add_file(f"{site}/{dist}/RECORD", f"{rel},sha256=x,1\n")
        s.add_file(f"{site}/{rel}", b"\x7fELF")
    s.add_file("/usr/local/cuda-12.1/lib64/libnvJitLink.so.12.1.105", b"\x7fELF")
    s.symlinks["/usr/local/cuda-12.1/lib64/libnvJitLink.so.12"] = "libnvJitLink.so.12.1.105"
    ldd_cusparse = data("libs", "ragflow_4466_ldd_cusparse.txt")
    torch_ldd = ldd_cusparse + f"\tlibcusparse.so.12 => {site}/torch/lib/../../nvidia/cusparse/lib/libcusparse.so.12 (0x0)\n"
    s.add_exe("/usr/bin/ldd", FakeCmd(stdout=torch_ldd))
    return s, site


def test_ld_library_path_shadows_pip_nvjitlink():
    s, site = _cu12_system()
    err = (f"ImportError: {site}/torch/lib/../../nvidia/cusparse/lib/libcusparse.so.12: undefined symbol: "
           "__nvJitLinkAddData_12_1, version libnvJitLink.so.12")
    torch = TorchInfo(python="/home/u/.venv/bin/python", prefix="/home/u/.venv", installed=True, import_error=err)
    f = gather_libs(s, torch_fact=Fact.found(torch))
    assert f.value.method == "ldd"
    jit = f.value.by_family("libnvJitLink")[0]
    assert jit.origin == L.TOOLKIT and jit.version == "12.1.105" and jit.via.startswith("LD_LIBRARY_PATH")
    facts = base_facts(s, torch=Fact.found(torch), libs=f)
    r = run_libraries(facts)
    ids = finding_ids(r)
    assert ids["libs.shadows-older"] is Status.FAIL  # nvJitLink 12.1 under the wheel's newer one: torch fails
    assert ids["libs.undefined-symbol"] is Status.FAIL
    shadow = next(x for x in r.findings if x.id == "libs.shadows-older")
    assert shadow.fix.commands == ("unset LD_LIBRARY_PATH",)


def test_missing_libcudart_from_import_error():
    s = FakeSystem(env={"PATH": "/usr/bin"}, python="/venv/bin/python")
    err = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
    torch = TorchInfo(python="/venv/bin/python", prefix="/venv", installed=True, import_error=err, cuda=None)
    f = gather_libs(s, torch_fact=Fact.found(torch))
    assert f.value.missing == ["libcudart.so.12"]
    r = run_libraries(base_facts(s, torch=Fact.found(torch), libs=f))
    ids = finding_ids(r)
    assert ids["libs.missing"] is Status.FAIL
    miss = next(x for x in r.findings if x.id == "libs.missing")
    assert any("nvidia-cuda-runtime-cu12" in c for c in miss.fix.commands)


def test_missing_from_ldd_not_found():
    site = "/venv/lib/python3.11/site-packages"
    s = FakeSystem(env={"PATH": "/usr/bin"}, python="/venv/bin/python")
    s.add_file(f"{site}/torch/lib/libtorch_cuda.so", b"\x7fELF")
    s.add_exe("/usr/bin/ldd", FakeCmd(stdout="\tlibcudnn.so.9 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n"))
    torch = TorchInfo(python="/venv/bin/python", prefix="/venv", installed=True, file=f"{site}/torch/__init__.py",
                      import_error="OSError: libcudnn.so.9: cannot open shared object file")
    f = gather_libs(s, torch_fact=Fact.found(torch))
    assert "libcudnn.so.9" in f.value.missing
    assert ("/usr/bin/ldd", f"{site}/torch/lib/libtorch_cuda.so") in s.calls


def test_ldd_timeout_is_recorded_not_raised():
    site = "/venv/lib/python3.11/site-packages"
    s = FakeSystem(env={"PATH": "/usr/bin"}, python="/venv/bin/python")
    s.add_file(f"{site}/torch/lib/libtorch_cuda.so", b"\x7fELF")
    s.add_exe("/usr/bin/ldd", FakeCmd(hang=True))
    torch = TorchInfo(python="/venv/bin/python", prefix="/venv", installed=True, file=f"{site}/torch/__init__.py",
                      import_error="ImportError: boom")
    f = gather_libs(s, torch_fact=Fact.found(torch))
    assert any("ldd" in e for e in f.value.errors)


def test_two_copies_of_cudart_loaded():
    s = h200_system()
    s.add_file("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.48", b"\x7fELF")
    maps = data("libs", "h200_maps.txt").split() + ["/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.48"]
    r = run_libraries(base_facts(s, torch=Fact.found(h200_torch(libraries=maps))))
    assert finding_ids(r)["libs.loaded-twice"] is Status.WARN


def test_kernel_module_vs_userspace_mismatch():
    km = h200_kernel_module()
    km.version = "570.86.15"
    r = run_libraries(base_facts(kernel_module=Fact.found(km)))
    assert finding_ids(r)["libs.driver-mismatch"] is Status.FAIL


def test_no_mismatch_check_under_wsl():
    km = h200_kernel_module()
    km.version = "570.86.15"
    plat = PlatformInfo(system="Linux", is_wsl=True, wsl_version=2)
    r = run_libraries(base_facts(kernel_module=Fact.found(km), platform=Fact.found(plat)))
    assert "libs.driver-mismatch" not in finding_ids(r)


def test_loader_search_without_torch():
    s = h200_system()
    f = gather_libs(s, torch_fact=Fact.not_found("python", "No module named 'torch'",
                                                 value=TorchInfo(python="/usr/bin/python3")))
    assert f.value.method == "loader-search"
    by = {x.soname: x for x in f.value.loaded}
    assert by["libcuda.so.1"].realpath == "/usr/local/nvidia/lib64/libcuda.so.580.159.04"
    assert by["libcuda.so.1"].via == "LD_LIBRARY_PATH entry /usr/local/nvidia/lib64"
    assert by["libcudnn.so.9"].version == "9.14.0"
    assert by["libcudnn.so.9"].origin == L.SYSTEM


def test_origin_conda_and_wsl():
    s = FakeSystem(env={"PATH": "/usr/bin", "CONDA_PREFIX": "/opt/conda"})
    s.add_file("/opt/conda/lib/libcudart.so.11.8.89", b"x")
    s.add_file("/opt/conda/conda-meta/history", b"")
    s.add_file("/usr/lib/wsl/lib/libcuda.so.1", b"x")
    cls = L.Classifier(s, [], [], set())
    assert cls.describe("/opt/conda/lib/libcudart.so.11.8.89").origin == L.CONDA
    w = cls.describe("/usr/lib/wsl/lib/libcuda.so.1")
    assert w.origin == L.WSL


def test_no_cuda_library_anywhere_skips():
    s = FakeSystem(env={"PATH": "/usr/bin"})
    torch = TorchInfo(python="/usr/bin/python3", installed=True, version="2.5.0+cpu", libraries=["/usr/lib/libc.so.6"])
    facts = base_facts(s, torch=Fact.found(torch))
    facts["libs"] = gather_libs(s, torch_fact=Fact.found(torch))
    r = run_libraries(facts)
    assert r.status is Status.SKIP and "libs.none" in finding_ids(r)


def test_stub_libcuda_copied_into_another_folder():
    """A copy of the toolkit's stub (not a symlink) is recognised by its size; the fix drops that folder."""
    stub = b"\x7fELF" + b"s" * 60000
    env = dict(h200_system().env, LD_LIBRARY_PATH="/tmp/fake:/usr/local/nvidia/lib64")
    s = h200_system(env)
    s.add_file("/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so", stub)
    s.add_file("/tmp/fake/libcuda.so.1", stub)
    maps = [p for p in data("libs", "h200_maps.txt").split() if "libcuda.so" not in p] + ["/tmp/fake/libcuda.so.1"]
    r = run_libraries(base_facts(s, torch=Fact.found(h200_torch(libraries=maps, available=False))))
    f = next(x for x in r.findings if x.id == "libs.stub-libcuda")
    assert f.status is Status.FAIL
    assert f.fix.commands == ("export LD_LIBRARY_PATH=/usr/local/nvidia/lib64",)


def test_wsl_libcuda_is_not_a_stub_even_if_small():
    s = FakeSystem(env={"PATH": "/usr/bin"})
    s.add_file("/usr/local/cuda-12.8/targets/x86_64-linux/lib/stubs/libcuda.so", b"x" * 141464)
    s.add_file("/usr/lib/wsl/lib/libcuda.so.1", b"x" * 141464)
    cls = L.Classifier(s, ["/usr/local/cuda-12.8"], [], set())
    assert cls.describe("/usr/lib/wsl/lib/libcuda.so.1").origin == L.WSL


def test_a_mismatched_nvml_copy_from_ld_library_path_is_not_a_reboot():
    # (session 33, the H200's driver.nvml-shadowed case seen from the libraries step) the copy that differs from the
    # kernel module comes from an LD_LIBRARY_PATH folder: leave it out, a reboot would not help
    s = h200_system()
    s.env["LD_LIBRARY_PATH"] = "/opt/old/lib:" + s.env.get("LD_LIBRARY_PATH", "")
    ud = UserspaceDriverInfo(libcuda="/usr/local/nvidia/lib64/libcuda.so.580.159.04", libcuda_version="580.159.04",
                             libnvidia_ml="/opt/old/lib/libnvidia-ml.so.535.54.03", libnvidia_ml_version="535.54.03",
                             libnvidia_ml_via="/opt/old/lib",
                             libnvidia_ml_system="/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04",
                             libnvidia_ml_system_version="580.159.04")
    r = run_libraries(base_facts(s, userspace_driver=Fact.found(ud)))
    f = next(f for f in r.findings if f.id == "libs.driver-mismatch")
    assert f.status is Status.FAIL and "/opt/old/lib" in f.detail and "sudo reboot" not in f.fix.commands
    # (seen on the H200: the first version also dropped libcuda's folder, the driver's own, which was not mismatched)
    assert f.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
