"""`scan` and `probe.scan` where a real interpreter loads from: a real venv with real editable installs
(setuptools' path .pth and its import-hook finder, built by real nvcc), an egg-link, PYTHONPATH, torch's
JIT extension cache, LD_LIBRARY_PATH, LD_PRELOAD, a symlink loop and a huge source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from cudadoctor.checks.probe_scan import check_probe_scan
from cudadoctor.compat import NO_IMAGE, PTX_JIT, PTX_TOO_NEW
from cudadoctor.model import Status
from cudadoctor.probes.scan import judge, scan_python
from cudadoctor.system.host import HostSystem
from test_fatbin import _nvcc
from test_probe_scan import _ctx, _ids

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

SETUP = '''
import os, subprocess
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class NvccExt(build_ext):
    """Each extension is a CUDA shared object built by real nvcc."""

    def build_extension(self, ext):
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        subprocess.check_call([{nvcc!r}, "-shared", "-Xcompiler", "-fPIC", *ext.extra_compile_args, "-o", out,
                               *ext.sources])


setup(name={name!r}, version="0.1", packages=[{name!r}], package_dir={pkgdir!r},
      ext_modules=[Extension({name!r} + "._k", [{src!r}], extra_compile_args=["-gencode", "arch=compute_80,code=sm_80"])],
      cmdclass={{"build_ext": NvccExt}})
'''


def _kernel(name: str) -> str:
    return f'extern "C" __global__ void k_{name}(int *o) {{ o[0] = 1; }}\n'


def _project(top: str, name: str, layout: str) -> str:
    proj = os.path.join(top, name)
    pkg = os.path.join(proj, "src", name) if layout == "src" else os.path.join(proj, name)
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "k.cu"), "w") as f:
        f.write(_kernel(name))
    src = f"src/{name}/k.cu" if layout == "src" else f"{name}/k.cu"
    with open(os.path.join(proj, "setup.py"), "w") as f:
        f.write(SETUP.format(nvcc=_nvcc(), name=name, pkgdir={"": "src"} if layout == "src" else {}, src=src))
    return proj


def _pip(py: str, *args) -> None:
    r = subprocess.run([py, "-m", "pip", "-q", *args], capture_output=True, text=True, timeout=300)
    if r.returncode:
        pytest.skip(f"pip {' '.join(args)} failed here: {r.stderr[-400:]}")


def _so(top: str, name: str, gencode: str) -> str:
    cu = os.path.join(top, name + ".cu")
    with open(cu, "w") as f:
        f.write(_kernel(name))
    out = os.path.join(top, name + ".so")
    subprocess.run([_nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode", gencode, "-o", out, cu], check=True,
                   capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv (no system site-packages) with two editable installs of real nvcc builds and an egg-link."""
    top = str(tmp_path_factory.mktemp("venv"))
    env_dir = os.path.join(top, "venv")
    subprocess.run([sys.executable, "-m", "venv", env_dir], check=True, capture_output=True, timeout=300)
    py = os.path.join(env_dir, "bin", "python")
    _pip(py, "install", "setuptools>=70")  # PEP 660 editable installs with bdist_wheel built in
    srcs = os.path.join(top, "src")
    os.makedirs(srcs)
    path_proj = _project(srcs, "pathpkg", "src")  # src layout: a path .pth
    finder_proj = _project(srcs, "finderpkg", "flat")  # flat layout: the __editable___*_finder MAPPING
    for proj in (path_proj, finder_proj):
        _pip(py, "install", "--no-build-isolation", "--no-deps", "-e", proj)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    # setuptools `develop` (pip < 21.3, setup.py develop): an egg-link and easy-install.pth, laid by hand
    egg = os.path.join(srcs, "eggpkg")
    os.makedirs(os.path.join(egg, "eggpkg"))
    os.makedirs(os.path.join(egg, "eggpkg.egg-info"))
    with open(os.path.join(egg, "eggpkg.egg-info", "PKG-INFO"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: eggpkg\nVersion: 0.3\n")
    shutil.copy(_so(top, "eggk", "arch=compute_80,code=sm_80"), os.path.join(egg, "eggpkg", "_k.so"))
    with open(os.path.join(site, "eggpkg.egg-link"), "w") as f:
        f.write(egg + "\n.\n")
    with open(os.path.join(site, "easy-install.pth"), "w") as f:
        f.write(egg + "\n")
    return {"py": py, "site": site, "top": top, "path_proj": path_proj, "finder_proj": finder_proj, "egg": egg,
            "sm80": _so(top, "plain80", "arch=compute_80,code=sm_80"),
            "ptx80": _so(top, "ptx80", "arch=compute_80,code=compute_80")}


def _by_dist(info) -> dict:
    return {f.dist: f for f in info.files if f.dist}


def test_editable_installs_of_both_kinds_and_an_egg_link(venv):
    info, err = scan_python(HostSystem(), venv["py"], cc=(9, 0))
    assert err == ""
    by = _by_dist(info)
    assert set(by) >= {"pathpkg", "finderpkg", "eggpkg"}
    assert by["pathpkg"].origin == "editable" and by["pathpkg"].install == "editable"
    assert by["pathpkg"].source == os.path.realpath(venv["path_proj"])
    assert by["finderpkg"].origin == "editable" and "__editable___finderpkg" in by["finderpkg"].via
    assert by["eggpkg"].install == "develop" and by["eggpkg"].version == "0.3"
    verdicts = {j.file.dist: j for j in judge(info, (9, 0)) if j.file.dist}
    assert {verdicts[d].verdict for d in ("pathpkg", "finderpkg", "eggpkg")} == {NO_IMAGE}
    assert verdicts["finderpkg"].worst.module.kernels == ["k_finderpkg"]
    out = check_probe_scan(_ctx(info))
    bad = {f.affects: f for f in out.findings if f.id == "probe.scan.no-kernel-image"}
    assert bad["pathpkg"].status == Status.FAIL
    cmd = bad["pathpkg"].fix.commands[0]
    assert cmd.startswith(f"cd {os.path.realpath(venv['path_proj'])} && TORCH_CUDA_ARCH_LIST=\"9.0\" ")
    assert "-m pip install -e . --no-build-isolation --no-deps" in cmd
    info80, _ = scan_python(HostSystem(), venv["py"], cc=(8, 0))
    assert _ids(check_probe_scan(_ctx(info80, cc="8.0"))).get("probe.scan.ok") == Status.OK


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD", "TORCH_EXTENSIONS_DIR")}
    env.update(kw)
    return env


def test_pythonpath_ptx_only_jit_cache_ld_library_path_and_ld_preload(venv, tmp_path):
    pp = tmp_path / "pp"
    (pp / "mykern").mkdir(parents=True)
    shutil.copy(venv["sm80"], pp / "mykern" / "_old.so")
    shutil.copy(venv["ptx80"], pp / "ptxonly.so")
    jit = tmp_path / "jit"
    (jit / "myext").mkdir(parents=True)
    shutil.copy(venv["sm80"], jit / "myext" / "myext.so")
    lib = tmp_path / "lib"
    (lib / "deeper").mkdir(parents=True)
    shutil.copy(venv["sm80"], lib / "libmine.so")
    shutil.copy(venv["sm80"], lib / "deeper" / "libnotloaded.so")  # the loader never looks in sub-folders
    pre = tmp_path / "libpre.so"
    shutil.copy(venv["sm80"], pre)
    sys_ = HostSystem(_env(PYTHONPATH=str(pp), TORCH_EXTENSIONS_DIR=str(jit), LD_LIBRARY_PATH=str(lib),
                           LD_PRELOAD=str(pre)))
    info, err = scan_python(sys_, venv["py"], cc=(9, 0))
    assert err == ""
    by = {os.path.basename(f.path): f for f in info.files}
    assert by["_old.so"].origin == "PYTHONPATH" and by["ptxonly.so"].origin == "PYTHONPATH"
    assert by["myext.so"].origin == "jit-cache"
    assert by["libmine.so"].origin == "LD_LIBRARY_PATH" and "libnotloaded.so" not in by
    assert by["libpre.so"].origin == "LD_PRELOAD"
    v = {os.path.basename(j.file.path): j.verdict for j in judge(info, (9, 0), "13.0")}
    assert v["ptxonly.so"] == PTX_JIT and v["_old.so"] == v["myext.so"] == v["libmine.so"] == NO_IMAGE
    assert {os.path.basename(j.file.path): j.verdict for j in judge(info, (9, 0), "12.8")}["ptxonly.so"] == PTX_TOO_NEW
    out = check_probe_scan(_ctx(info))
    ids = _ids(out)
    assert ids["probe.scan.ptx-jit-only"] == Status.WARN and ids["probe.scan.no-kernel-image"] == Status.FAIL
    jit_f = next(f for f in out.findings if f.id == "probe.scan.no-kernel-image" and "JIT" in f.affects)
    assert jit_f.fix.commands[0] == f"rm -rf {jit / 'myext'}"
    pre_f = next(f for f in out.findings if f.id == "probe.scan.no-kernel-image" and "LD_PRELOAD" in f.affects)
    assert pre_f.fix.commands[0] == "unset LD_PRELOAD"


def test_torch_default_jit_cache_layout(venv, tmp_path):
    """No TORCH_EXTENSIONS_DIR: $XDG_CACHE_HOME/torch_extensions/py<maj><min>_<accelerator>/<ext>; with no torch
    in the venv every py<maj><min>_* folder of this Python counts, another Python's does not."""
    ver = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    base = tmp_path / "cache" / "torch_extensions"
    (base / f"{ver}_cu130" / "fused").mkdir(parents=True)
    (base / "py27_cu130" / "ancient").mkdir(parents=True)
    shutil.copy(venv["sm80"], base / f"{ver}_cu130" / "fused" / "fused.so")
    shutil.copy(venv["sm80"], base / "py27_cu130" / "ancient" / "ancient.so")
    info, _ = scan_python(HostSystem(_env(XDG_CACHE_HOME=str(tmp_path / "cache"))), venv["py"], cc=(9, 0))
    jit = [f for f in info.files if f.origin == "jit-cache"]
    assert [os.path.basename(f.path) for f in jit] == ["fused.so"]


def test_symlink_loop_and_a_huge_source_tree_end_within_budget(venv, tmp_path):
    tree = tmp_path / "huge"
    (tree / "aaa" / "sub").mkdir(parents=True)
    os.symlink("../..", tree / "aaa" / "sub" / "loop")  # back to huge/: entered once, never again
    shutil.copy(venv["sm80"], tree / "_a.so")  # a folder's own files come before its sub-folders
    for i in range(100):
        d = tree / "data" / f"d{i:03d}"
        d.mkdir(parents=True)
        for j in range(1000):
            (d / f"f{j}.py").touch()
    t0 = time.monotonic()
    info, _ = scan_python(HostSystem(_env(PYTHONPATH=str(tree))), venv["py"], cc=(9, 0))
    took = time.monotonic() - t0
    root = next(r for r in info.roots if r.origin == "PYTHONPATH")
    assert root.loops and root.cut.startswith("stopped after 50,000 files")
    assert took < 20
    assert any(os.path.basename(f.path) == "_a.so" for f in info.files)
    ids = _ids(check_probe_scan(_ctx(info)))
    assert ids["probe.scan.cut"] == Status.WARN
