"""torch extensions against the torch that is imported (probes/elf_dynamic.py, probes/torch_links.py, step torch.ext).

The live tests build small shared objects with the real C++ compiler, linked to the real torch's libc10.so (as every
torch extension is), and compare cudadoctor's verdict with what the loader really does when the extension is opened
after `import torch` (ctypes adds RTLD_NOW, as Python's import of an extension module does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudadoctor.checks.registry import Context
from cudadoctor.checks.torch_ext import check_torch_ext
from cudadoctor.model import Fact, Status
from cudadoctor.probes import elf_dynamic
from cudadoctor.probes.scan import scan_dirs
from cudadoctor.probes.torch_links import ExtLink, TorchLinks, judge_links, torch_pin
from cudadoctor.probes.torch_names import is_torch_name
from cudadoctor.system.host import HostSystem
from fakes.system import FakeSystem

# a c10 function torch 2.14 added (read from the 2.14.1 wheel's libc10.so, absent from 2.13's): an extension built
# against 2.14 headers that narrows an integer calls it
NEWER = "_ZN3c106detail25report_narrowing_overflowEPKc"
INVENTED = "_ZN3c106detail26cudadoctor_probe_not_thereEv"
# a method with a ref-qualifier (torch::Library::x() &), the form of the name the H200's loader stopped at first
INVENTED_REF = "_ZNR5torch7Library26cudadoctor_probe_not_thereEv"


def _cxx() -> str:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    return cxx


def _build(cxx: str, out: Path, names: list, libs: list, libdirs: list, runpath: str = "") -> Path:
    """A shared object calling each mangled name in `names` (declared by assembler name), linked to `libs`."""
    decl = "".join(f'extern "C" void f{i}(void) __asm__("{n}");\n' for i, n in enumerate(names))
    body = "".join(f"  if (x == {i}) f{i}();\n" for i in range(len(names)))
    src = out.with_suffix(".cpp")
    src.write_text(f'{decl}extern "C" int ext_entry(int x) {{\n{body}  return x + 1;\n}}\n')
    cmd = [cxx, "-shared", "-fPIC", "-O1", str(src), "-Wl,--no-as-needed"] + [f"-L{d}" for d in libdirs] + \
        [f"-l{x}" for x in libs] + ([f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"] if runpath else []) + \
        ["-o", str(out)]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    return out


def _loads(paths: list) -> dict:
    """What the loader says for each path, opened after `import torch` in a fresh interpreter: '' when it loaded."""
    code = ("import json, sys, ctypes, torch\nout = {}\nfor p in sys.argv[1:]:\n    try:\n        ctypes.CDLL(p)\n"
            "        out[p] = ''\n    except OSError as e:\n        out[p] = str(e)\nprint(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code] + [str(p) for p in paths], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch = pytest.importorskip("torch")
    cxx = _cxx()
    tmp = tmp_path_factory.mktemp("exts")
    lib = Path(torch.__file__).parent / "lib"
    c10 = elf_dynamic.exported(elf_dynamic.read_dynamic(HostSystem(), str(lib / "libc10.so")))
    present = sorted(n for n in c10 if n.startswith("_ZN3c10") and "detail" in n)[:1] or \
        sorted(n for n in c10 if n.startswith("_ZN3c10"))[:1]
    gone = NEWER if NEWER not in c10 else INVENTED
    stub = tmp / "stub"
    stub.mkdir()
    # a stand-in for a CUDA torch's libc10_cuda.so, only to link against (as a CUDA extension's build does)
    subprocess.run([cxx, "-shared", "-fPIC", "-x", "c++", "-", "-o", str(stub / "libc10_cuda.so")],
                   input=b'extern "C" int c10_cuda_stub() { return 0; }\n', check=True, timeout=120)
    site = tmp / "site"
    (site / "myext").mkdir(parents=True)
    (site / "torch" / "lib").mkdir(parents=True)
    files = {
        "ok": _build(cxx, site / "myext" / "_ok.so", present, ["c10"], [lib], runpath="$ORIGIN/../lib"),
        "gone": _build(cxx, site / "myext" / "_gone.so", present + [gone, INVENTED_REF], ["c10"], [lib]),
        "cuda": _build(cxx, site / "myext" / "_cuda.so", present, ["c10", "c10_cuda"], [lib, stub]),
        # torch's own folder: torch itself, never judged as an extension of it
        "own": _build(cxx, site / "torch" / "lib" / "libown.so", present + [gone], ["c10"], [lib]),
    }
    return torch, lib, site, files, gone, present


def test_elf_dynamic_reads_needed_runpath_and_symbols(built):
    _, _, _, files, gone, present = built
    d = elf_dynamic.read_dynamic(HostSystem(), str(files["ok"]))
    assert "libc10.so" in d.needed and d.runpath == ["$ORIGIN/../lib"] and d.elf_type == elf_dynamic.ET_DYN
    assert present[0] in elf_dynamic.required(d)
    assert "ext_entry" in elf_dynamic.exported(d) and "ext_entry" not in elf_dynamic.required(d)
    assert gone in elf_dynamic.required(elf_dynamic.read_dynamic(HostSystem(), str(files["gone"])))


def test_verdicts_agree_with_the_real_loader(built):
    torch, lib, site, files, gone, _ = built
    s = HostSystem()
    info = scan_dirs(s, [str(site)])
    linked = {Path(x.path).name: x for x in info.linked}
    assert set(linked) == {"_ok.so", "_gone.so", "_cuda.so"}  # not torch/lib/libown.so
    links = judge_links(s, info.linked, torch.__file__, [], torch.__version__, torch.version.cuda)
    by = {Path(e.path).name: e for e in links.files}
    real = {Path(p).name: err for p, err in _loads([files["ok"], files["gone"], files["cuda"]]).items()}
    for name, e in by.items():
        flagged = bool(e.missing_libs or e.missing_count)
        assert flagged == bool(real[name]), (name, e, real[name])
    assert sorted(by["_gone.so"].missing) == sorted([gone, INVENTED_REF])
    assert gone in real["_gone.so"] or INVENTED_REF in real["_gone.so"]
    for name, e in by.items():  # the name the loader stops at is one cudadoctor found missing
        if e.missing_count and not e.missing_libs and e.missing_count <= len(e.missing):
            assert any(n in real[name] for n in e.missing), (name, e.missing, real[name])
    cuda_here = (lib / "libc10_cuda.so").exists()
    assert by["_cuda.so"].missing_libs == ([] if cuda_here else ["libc10_cuda.so"])
    if not cuda_here:
        assert "libc10_cuda.so" in real["_cuda.so"]
    ctx = Context({"torch_links": Fact.found(links, "test")})
    out = check_torch_ext(ctx)
    got = {f.id: f.status for f in out.findings}
    assert got["torch.ext.undefined-symbol"] is Status.FAIL
    if not cuda_here and not torch.version.cuda:
        assert got["torch.ext.needs-cuda-torch"] is Status.FAIL
    assert "torch.ext.ok" not in got


def _link(**kw) -> ExtLink:
    base = dict(path="/venv/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so",
                package="flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so", origin="site-packages",
                root="/venv/lib/python3.12/site-packages", dist="flash_attn", version="2.8.3", install="wheel",
                torch_libs=["libc10.so", "libtorch.so"], needs=120)
    base.update(kw)
    return ExtLink(**base)


def _check(files, version="2.11.0+cu130", cuda="13.0", lib="/venv/lib/python3.12/site-packages/torch/lib", hip=None,
           driver=True):
    from cudadoctor.facts.types import GpuInfo, SmiInfo

    links = TorchLinks("/venv/bin/python", version, cuda, lib, 80000, files, torch_hip=hip)
    facts = {"torch_links": Fact.found(links, "test")}
    if driver:
        facts["nvidia_smi"] = Fact.found(SmiInfo(path="/usr/bin/nvidia-smi", driver_version="580.159.04",
                                                 cuda_version="13.0", gpus=[GpuInfo(index=0, name="NVIDIA H200")]),
                                         "test")
    out = check_torch_ext(Context(facts))
    return out, {f.id: f for f in out.findings}


def test_built_for_another_torch_fails_with_the_pinned_release_named():
    tv = _link(path="/venv/lib/python3.12/site-packages/torchvision/_C.so", package="torchvision", dist="torchvision",
               version="0.28.0", built_for="2.13.0", missing=[NEWER], missing_count=3)
    out, by = _check([tv])
    f = by["torch.ext.undefined-symbol"]
    assert f.status is Status.FAIL and "2.13.0" in f.summary and NEWER in str(f.evidence)
    cmds = " ".join(f.fix.commands)
    assert '"torch==2.11.0" torchvision --index-url https://download.pytorch.org/whl/cu130' in cmds
    assert '"torch==2.13.0" --index-url https://download.pytorch.org/whl/cu130' in cmds
    assert out.summary.startswith("1 of 1")


def test_unpinned_wheel_editable_and_jit_builds_get_their_own_rebuild():
    _, by = _check([_link(missing=[NEWER], missing_count=1)])
    assert "--no-build-isolation" in by["torch.ext.undefined-symbol"].fix.commands[0]
    assert "flash_attn==2.8.3" in by["torch.ext.undefined-symbol"].fix.commands[0]
    _, by = _check([_link(install="editable", source="/src/myop", dist="myop", missing=[NEWER], missing_count=1)])
    assert by["torch.ext.undefined-symbol"].fix.commands[0].startswith("cd /src/myop && ")
    jit = _link(path="/home/u/.cache/torch_extensions/py312_cu130/fused/fused.so", package="fused", dist="",
                version="", install="", origin="jit-cache", root="/home/u/.cache/torch_extensions/py312_cu130",
                missing=[NEWER], missing_count=1)
    _, by = _check([jit])
    f = by["torch.ext.undefined-symbol"]
    assert f.status is Status.WARN  # load() may rebuild it; loaded as it is it fails
    assert f.fix.commands == ("rm -rf /home/u/.cache/torch_extensions/py312_cu130/fused",)


def test_cuda_extension_on_cpu_torch_and_a_library_torch_does_not_ship():
    cuda_ext = _link(missing_libs=["libc10_cuda.so", "libtorch_cuda.so"])
    _, by = _check([cuda_ext], version="2.13.0+cpu", cuda=None)
    f = by["torch.ext.needs-cuda-torch"]
    assert f.status is Status.FAIL and "libc10_cuda.so" in f.summary and "CPU-only" in f.summary
    assert "--index-url https://download.pytorch.org/whl/cu" in f.fix.commands[0]  # an NVIDIA driver is here
    # (review s36) no NVIDIA driver: a CUDA torch would not help; the extension's own build for this torch instead
    _, by = _check([cuda_ext], version="2.13.0+cpu", cuda=None, driver=False)
    f = by["torch.ext.needs-cuda-torch"]
    assert "--no-binary flash_attn" in f.fix.commands[0] and "download.pytorch.org" not in " ".join(f.fix.commands)
    # (review s36) a ROCm torch is not "CPU-only", and its fix never replaces it with a CUDA torch
    _, by = _check([cuda_ext], version="2.9.1+rocm6.4", cuda=None, hip="6.4.43482")
    f = by["torch.ext.needs-cuda-torch"]
    assert "a ROCm build" in f.summary and "download.pytorch.org" not in " ".join(f.fix.commands)
    _, by = _check([_link(missing_libs=["libtorch_hip.so"])])
    assert by["torch.ext.missing-torch-library"].status is Status.FAIL


def test_fixes_that_can_work():
    # (review s36) PyG's wheels carry a local label PyPI does not have: its own index for this torch
    _, by = _check([_link(dist="torch_scatter", version="2.1.2+pt25cu124", package="torch_scatter", missing=[NEWER],
                          missing_count=1)])
    cmd = by["torch.ext.undefined-symbol"].fix.commands[0]
    assert "-f https://data.pyg.org/whl/torch-2.11.0+cu130.html" in cmd and "==2.1.2+pt25cu124" not in cmd
    # an NGC or source build of torch: no index serves it, so no torch reinstall is proposed, the extension is rebuilt
    tv = _link(dist="torchvision", package="torchvision", version="0.19.0", built_for="2.3.0", missing=[NEWER],
               missing_count=1)
    _, by = _check([tv], version="2.4.0a0+07cecf4168")
    cmds = " ".join(by["torch.ext.undefined-symbol"].fix.commands)
    assert "07cecf4168" not in cmds and "--no-binary torchvision" in cmds
    # a nightly's index is the nightly one
    _, by = _check([tv], version="2.14.0.dev20261101+cu130")
    assert "whl/nightly/cu130" in " ".join(by["torch.ext.undefined-symbol"].fix.commands)
    # the verification opens the file itself (torchvision swallows its _C.so's load error)
    assert any("ctypes.CDLL(" in c for c in by["torch.ext.undefined-symbol"].fix.commands)


def test_cxx11_abi_mismatch_is_named_as_such():
    e = _link(missing=["_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"], missing_count=1, abi_mismatch=True)
    _, by = _check([e])
    f = by["torch.ext.cxx11-abi-mismatch"]
    assert f.status is Status.FAIL and "torch.ext.undefined-symbol" not in by
    assert "--no-binary" in f.fix.commands[0]


def test_copies_python_does_not_load_are_not_failures():
    from cudadoctor.probes.torch_links import _mark_not_loaded

    sp = "/venv/lib/python3.12/site-packages"
    good = _link(path=f"{sp}/dgl/tensoradapter/pytorch/libtensoradapter_pytorch_2.11.0.so", root=sp, dist="dgl",
                 version="2.4.0")
    old = _link(path=f"{sp}/dgl/tensoradapter/pytorch/libtensoradapter_pytorch_2.10.0.so", root=sp, dist="dgl",
                version="2.4.0", missing=[NEWER], missing_count=1)
    py310 = _link(path="/src/op/myop/_C.cpython-310-x86_64-linux-gnu.so", root="/src/op", dist="", package="myop",
                  origin="editable", missing=[NEWER], missing_count=1)
    _mark_not_loaded([good, old, py310], "3.12.3")
    assert old.not_loaded and py310.not_loaded and not good.not_loaded
    out, by = _check([good, old, py310])
    assert "torch.ext.undefined-symbol" not in by and by["torch.ext.not-loaded"].status is Status.SKIP
    assert by["torch.ext.ok"].status is Status.OK
    # (review s36) a shadowed copy: the earlier one on sys.path decides; an unknown order only warns, naming the twin
    sys_site, venv_site = "/usr/lib/python3/dist-packages", "/venv/lib/python3.12/site-packages"
    first_ok = _link(path=f"{venv_site}/myext/_C.so", root=venv_site, package="myext", dist="myext")
    later_bad = _link(path=f"{sys_site}/myext/_C.so", root=sys_site, package="myext", dist="myext", missing=[NEWER],
                      missing_count=1)
    _mark_not_loaded([first_ok, later_bad], "3.12.3", [venv_site, sys_site])
    assert later_bad.not_loaded.startswith("shadowed")
    first_bad = _link(path=f"{venv_site}/myext/_C.so", root=venv_site, package="myext", dist="myext", missing=[NEWER],
                      missing_count=1)
    later_ok = _link(path=f"{sys_site}/myext/_C.so", root=sys_site, package="myext", dist="myext")
    _mark_not_loaded([first_bad, later_ok], "3.12.3", [venv_site, sys_site])
    assert not first_bad.not_loaded  # Python imports the broken one: a failure
    # (H200, session 36) a venv whose site-packages has a broken copy, and a .pth in it adding the environment whose copy
    # loads: the site folder comes first, so Python imports the broken one (a failure, not a warning)
    pth_ok = _link(path="/opt/env/myext/_C.so", root="/opt/env", origin="pth", via=f"{venv_site}/opt.pth",
                   package="myext", dist="myext")
    _mark_not_loaded([first_bad, pth_ok], "3.12.3", [venv_site])
    assert not first_bad.not_loaded and not first_bad.twin
    pth_bad = _link(path="/other/env/myext/_C.so", root="/other/env", origin="pth", via=f"{venv_site}/other.pth",
                    package="myext", dist="myext", missing=[NEWER], missing_count=1)
    _mark_not_loaded([pth_bad, first_ok], "3.12.3", [venv_site])
    assert pth_bad.not_loaded.startswith("shadowed")
    pth_bad = _link(path="/other/env/myext/_C.so", root="/other/env", origin="sys.path", package="myext", dist="myext",
                    missing=[NEWER], missing_count=1)
    _mark_not_loaded([first_ok, pth_bad], "3.12.3", [venv_site])
    assert pth_bad.twin == first_ok.path and not pth_bad.not_loaded
    _, by = _check([first_ok, pth_bad])
    assert by["torch.ext.undefined-symbol"].status is Status.WARN
    # alone, a broken build is a failure
    lone = _link(missing=[NEWER], missing_count=1)
    _mark_not_loaded([lone], "3.12.3")
    assert not lone.not_loaded


def test_saved_reports_with_nulls_do_not_crash_the_step():
    e = ExtLink(path="/x/a.so", package=None, missing=None, missing_count=3, dist=None, origin=None, root=None)
    links = TorchLinks("/venv/bin/python", None, None, None, 1, [e, None])
    out = check_torch_ext(Context({"torch_links": Fact.found(links, "test")}))
    assert out.findings


def test_healthy_none_and_not_judged():
    out, by = _check([_link(), _link(path="/x/y.so", package="y", dist="y")])
    assert by["torch.ext.ok"].status is Status.OK and out.summary == "2 torch extensions link against torch 2.11.0+cu130"
    out, by = _check([])
    assert by["torch.ext.ok"].status is Status.OK and out.summary == "no torch extensions"
    out = check_torch_ext(Context({"torch_links": Fact.not_applicable("test", "no torch to check extensions against")}))
    assert [f.id for f in out.findings] == ["torch.ext.not-judged"] and out.findings[0].status is Status.SKIP


def test_torch_names_are_only_torchs_own():
    assert is_torch_name(NEWER) and is_torch_name("_ZNK2at10TensorBase4sizeEl") and is_torch_name("THPVariableClass")
    assert is_torch_name("_ZTVN3c1010TensorImplE") and is_torch_name("aoti_torch_empty_strided")
    # a method with a ref-qualifier (&): the name torchvision 0.28's _C.so failed on under torch 2.11 (H200, session 36)
    assert is_torch_name("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3"
                         "TagESaIS8_EENS_17_RegisterOrVerifyE")
    assert is_torch_name("_ZNKO2at6Tensor3addERKS0_") and is_torch_name("_ZN3c10lsERSoNS_10DeviceTypeE")
    assert not is_torch_name("_ZNSt6vectorIiSaIiEED1Ev") and not is_torch_name("cudaLaunchKernel")
    assert not is_torch_name("_ZNKRSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE4sizeEv")


def test_torch_pin_read_from_the_distributions_metadata():
    fs = FakeSystem()
    sp = "/venv/lib/python3.12/site-packages"
    fs.add_file(f"{sp}/torchvision-0.28.0.dist-info/METADATA", "Name: torchvision\nRequires-Dist: numpy\n"
                                                               "Requires-Dist: torch (==2.13.0)\n")
    fs.add_file(f"{sp}/flash_attn-2.8.3.dist-info/METADATA", "Name: flash_attn\nRequires-Dist: torch\n")
    assert torch_pin(fs, [sp], "torchvision", "0.28.0") == "2.13.0"
    assert torch_pin(fs, [sp], "flash_attn", "2.8.3") == ""
    assert torch_pin(fs, [sp], "nothere", "1.0") == ""


def test_explain_reads_the_named_extension_on_this_machine(built):
    # explain, given the loader's own message about an extension that is on this machine, reads that file against the
    # torch the interpreter imports (the same reading as check's torch.ext) and says what it lacks
    from cudadoctor.explain import personal, rank
    from cudadoctor.facts.types import TorchInfo
    from explain_sets import SCANNER, SIGS

    torch, _, _, files, gone, _ = built
    text = f"ImportError: {files['gone']}: undefined symbol: {gone}"
    m = next(x for x in rank.matches(SIGS, SCANNER.scan_text(text)) if x.id == "undefined-symbol")
    t = TorchInfo(python=sys.executable, python_version="%d.%d.%d" % sys.version_info[:3], installed=True,
                  version=torch.__version__, cuda=torch.version.cuda, file=torch.__file__)
    out = personal.personalise(m, {"torch": Fact.found(t, "test")})
    assert any("calls 2 torch function(s)" in n for n in out.notes), out.notes
    assert any("ctypes.CDLL(" in c for c in out.commands), out.commands
    # a healthy file: the message came from elsewhere
    text = f"ImportError: {files['ok']}: undefined symbol: {gone}"
    m = next(x for x in rank.matches(SIGS, SCANNER.scan_text(text)) if x.id == "undefined-symbol")
    out = personal.personalise(m, {"torch": Fact.found(t, "test")})
    assert any("finds every torch function it calls" in n for n in out.notes), out.notes


def test_explain_names_the_environment_an_extension_belongs_to(built, tmp_path):
    # the message names a file in another environment's site folder: its own interpreter goes into the commands
    from cudadoctor.explain import personal, rank
    from cudadoctor.facts.types import TorchInfo
    from explain_sets import SCANNER, SIGS

    torch, _, _, files, gone, _ = built
    sp = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "myext"
    sp.mkdir(parents=True)
    (sp / "_gone.so").write_bytes(files["gone"].read_bytes())
    (tmp_path / "env" / "bin").mkdir()
    other = tmp_path / "env" / "bin" / "python"
    other.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    other.chmod(0o755)
    text = f"ImportError: {sp / '_gone.so'}: undefined symbol: {gone}"
    m = next(x for x in rank.matches(SIGS, SCANNER.scan_text(text)) if x.id == "undefined-symbol")
    t = TorchInfo(python=sys.executable, python_version="%d.%d.%d" % sys.version_info[:3], installed=True,
                  version=torch.__version__, cuda=torch.version.cuda, file=torch.__file__)
    out = personal.personalise(m, {"torch": Fact.found(t, "test")})
    assert any(f"belongs to the environment of {other}" in n for n in out.notes), out.notes
    assert all(str(other) in c for c in out.commands if "python" in c), out.commands


def test_explain_says_nothing_of_torch_for_a_library_that_is_not_an_extension(built, tmp_path):
    # a CUDA library's own undefined symbol (libcusparse and an older libnvJitLink): not a torch extension, so no
    # "finds every torch function it calls" note about it (the first version said so of any .so it could read)
    from cudadoctor.explain import personal, rank
    from cudadoctor.facts.types import TorchInfo
    from explain_sets import SCANNER, SIGS

    torch, _, _, _, _, _ = built
    lib = tmp_path / "libcusparse.so.12"
    subprocess.run([_cxx(), "-shared", "-fPIC", "-x", "c++", "-", "-o", str(lib)],
                   input=b'extern "C" int cusparse_stub() { return 0; }\n', check=True, timeout=120)
    text = f"ImportError: {lib}: undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12"
    m = next(x for x in rank.matches(SIGS, SCANNER.scan_text(text)) if x.id == "undefined-symbol")
    t = TorchInfo(python=sys.executable, python_version="%d.%d.%d" % sys.version_info[:3], installed=True,
                  version=torch.__version__, cuda=torch.version.cuda, file=torch.__file__)
    out = personal.personalise(m, {"torch": Fact.found(t, "test")})
    assert not any("torch function" in n for n in out.notes), out.notes
