"""Where an interpreter loads from (probes/where.py) and who owns a binary (probes/owners.py), on the
System fakes: .pth lines, setuptools finders, egg-links, hatchling's editable .pth, RECORD, direct_url.json."""

from __future__ import annotations

import json

from cudadoctor.probes.owners import Owners
from cudadoctor.probes.scan import scan_python
from cudadoctor.probes.where import roots_from
from fakes.system import FakeCmd, FakeSystem
from test_fatbin import _host_elf, make_entry, make_fatbin

SP = "/venv/lib/python3.12/site-packages"
SO80 = _host_elf({".nv_fatbin": make_fatbin(make_entry(2, 80))})

FINDER = '''
import sys
from importlib.machinery import ModuleSpec
MAPPING: dict[str, str] = {'flatpkg': '/src/flat/flatpkg', 'topmod': '/src/flat/topmod'}
NAMESPACES: dict[str, list[str]] = {}
PATH_PLACEHOLDER = '__editable__.flat-1.0.finder' + ".__path_hook__"
'''


def _answer(**kw) -> dict:
    d = {"python": "/venv/bin/python", "version": [3, 12], "abiflags": "", "site": [SP], "user_site": "",
         "stdlib": ["/usr/lib/python3.12"], "path": ["/usr/lib/python3.12", "/usr/lib/python3.12/lib-dynload",
                                                     "/usr/lib/python312.zip", SP],
         "pythonpath": "", "torch_extensions_dir": None, "cache_home": "/home/u/.cache", "torch": []}
    d.update(kw)
    return d


def _fs(env=None) -> FakeSystem:
    fs = FakeSystem(env=env or {"PATH": "/usr/bin"})
    fs.add_file("/usr/lib/python3.12/os.py", "")
    fs.add_file(f"{SP}/torch/lib/libtorch_cuda.so", SO80)
    fs.add_file(f"{SP}/torch-2.11.0+cu130.dist-info/RECORD",
                "torch/lib/libtorch_cuda.so,sha256=x,10\ntorch/__init__.py,sha256=y,3\n")
    # a finder-mode editable install (flat layout) with a package and a top-level extension module
    fs.add_file(f"{SP}/__editable__.flat-1.0.pth", "import __editable___flat_1_0_finder; "
                                                    "__editable___flat_1_0_finder.install()\n")
    fs.add_file(f"{SP}/__editable___flat_1_0_finder.py", FINDER)
    fs.add_file(f"{SP}/flat-1.0.dist-info/RECORD", "__editable__.flat-1.0.pth,,\n__editable___flat_1_0_finder.py,,\n")
    fs.add_file(f"{SP}/flat-1.0.dist-info/direct_url.json",
                json.dumps({"url": "file:///src/flat", "dir_info": {"editable": True}}))
    fs.add_file("/src/flat/flatpkg/_C.cpython-312-x86_64-linux-gnu.so", SO80)
    fs.add_file("/src/flat/topmod.cpython-312-x86_64-linux-gnu.so", SO80)
    fs.add_file("/src/flat/unrelated/other.so", SO80)  # not mapped: not importable through the finder
    # hatchling's editable .pth (not named __editable__), owned by a dist whose direct_url says editable
    fs.add_file(f"{SP}/_editable_impl_hatchy.pth", "/src/hatchy\n")
    fs.add_file(f"{SP}/hatchy-0.2.dist-info/RECORD", "_editable_impl_hatchy.pth,,\n")
    fs.add_file(f"{SP}/hatchy-0.2.dist-info/direct_url.json",
                json.dumps({"url": "file:///src/hatchy", "dir_info": {"editable": True}}))
    fs.add_file("/src/hatchy/hatchy/_k.so", SO80)
    fs.add_file("/src/hatchy/build/lib.linux-x86_64-cpython-312/hatchy/_k.so", SO80)  # stale copy: not importable
    fs.add_file("/src/hatchy/.git/objects/x.so", SO80)
    # a plain .pth folder and setuptools develop
    fs.add_file(f"{SP}/extra.pth", "# comment\n../../../../opt/kernels\nimport os\n")
    fs.add_file("/opt/kernels/fast.so", SO80)
    fs.add_file(f"{SP}/eggy.egg-link", "/src/eggy\n.\n")
    fs.add_file(f"{SP}/easy-install.pth", "/src/eggy\n")
    fs.add_file("/src/eggy/eggy/_e.so", SO80)
    fs.add_file("/src/eggy/eggy.egg-info/PKG-INFO", "Name: eggy\nVersion: 4.5\n")
    return fs


def test_roots_name_every_origin():
    fs = _fs({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib::/nope", "LD_PRELOAD": "/opt/pre/libp.so libq.so"})
    fs.add_file("/opt/lib/libl.so", SO80)
    fs.add_file("/opt/pre/libp.so", SO80)
    fs.add_file("/pp/mod/_m.so", SO80)
    fs.add_file("/extra/by/sitecustomize/x.py", "")
    w = roots_from(fs, _answer(pythonpath="/pp", path=[SP, "/pp", "/extra/by/sitecustomize", "/usr/lib/python312.zip"]))
    assert ("sys.path", "/extra/by/sitecustomize") in {(r.origin, r.path) for r in w.roots}
    by = {(r.origin, r.path or tuple(r.files)) for r in w.roots}
    assert ("editable", "/src/flat/flatpkg") in by
    assert ("editable", "/src/eggy") in by
    assert ("pth", "/opt/kernels") in by and ("pth", "/src/hatchy") in by  # relabelled by the scan (owners)
    assert ("PYTHONPATH", "/pp") in by and ("site-packages", SP) in by
    assert ("LD_LIBRARY_PATH", "/opt/lib") in by
    assert ("LD_PRELOAD", ("/opt/pre/libp.so",)) in by
    top = next(r for r in w.roots if r.files and r.origin == "editable")
    assert top.files == ["/src/flat/topmod.cpython-312-x86_64-linux-gnu.so"]
    assert not any(r.path.startswith("/usr/lib/python3.12") for r in w.roots)  # the stdlib is never walked
    assert any("libq.so" in s for s in w.skipped) and any("python312.zip" in s for s in w.skipped)


def test_scan_python_owners_and_pruning():
    fs = _fs()
    fs.add_exe("/venv/bin/python", FakeCmd(stdout=json.dumps(_answer())))
    info, err = scan_python(fs, "/venv/bin/python", cc=(9, 0))
    assert err == ""
    by = {f.path: f for f in info.files}
    assert by[f"{SP}/torch/lib/libtorch_cuda.so"].dist == "torch"
    assert by[f"{SP}/torch/lib/libtorch_cuda.so"].version == "2.11.0+cu130"
    flat = by["/src/flat/flatpkg/_C.cpython-312-x86_64-linux-gnu.so"]
    assert (flat.origin, flat.dist, flat.install, flat.source) == ("editable", "flat", "editable", "/src/flat")
    assert by["/src/flat/topmod.cpython-312-x86_64-linux-gnu.so"].dist == "flat"
    assert "/src/flat/unrelated/other.so" not in by
    hat = by["/src/hatchy/hatchy/_k.so"]
    assert (hat.origin, hat.dist, hat.version) == ("editable", "hatchy", "0.2")
    assert not any("/build/lib." in p or "/.git/" in p for p in by)  # not importable: never judged
    egg = by["/src/eggy/eggy/_e.so"]
    assert (egg.dist, egg.version, egg.install) == ("eggy", "4.5", "develop")
    assert by["/opt/kernels/fast.so"].origin == "pth" and by["/opt/kernels/fast.so"].dist == ""


def test_jit_cache_folder_from_torch_version_file():
    fs = _fs()
    fs.add_file(f"{SP}/torch/version.py", "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n")
    fs.add_file("/home/u/.cache/torch_extensions/py312_cu130/ext/ext.so", SO80)
    fs.add_file("/home/u/.cache/torch_extensions/py312_cu126/old/old.so", SO80)  # another torch: not loaded
    w = roots_from(fs, _answer(torch=[f"{SP}/torch"]))
    assert [r.path for r in w.roots if r.origin == "jit-cache"] == ["/home/u/.cache/torch_extensions/py312_cu130"]
    w = roots_from(fs, _answer(torch_extensions_dir="/scratch/ext"))
    assert [r.path for r in w.roots if r.origin == "jit-cache"] == []  # set but missing: nothing to scan
    fs.add_file("/scratch/ext/a/a.so", SO80)
    w = roots_from(fs, _answer(torch_extensions_dir="/scratch/ext"))
    assert [r.path for r in w.roots if r.origin == "jit-cache"] == ["/scratch/ext"]


def test_owners_record_and_editable_source():
    fs = _fs()
    o = Owners(fs, [SP])
    assert o.owner(f"{SP}/torch/lib/libtorch_cuda.so").dist == "torch"
    assert o.owner("/src/flat/anything/x.so").kind == "editable"
    assert o.owner("/elsewhere/x.so").dist == ""
    assert o.installed_by(f"{SP}/_editable_impl_hatchy.pth").dist == "hatchy"


def test_walk_tree_on_the_fake_ends_a_symlink_loop():
    fs = FakeSystem(files={"/t/a/f.so": b"x", "/t/b/g.so": b"y"}, symlinks={"/t/a/up": "/t"})
    got = list(fs.walk_tree("/t"))
    assert ("/t/a/f.so", "") in got and ("/t/b/g.so", "") in got and ("/t/a/up", "loop") in got
    assert list(fs.walk_tree("/t", max_files=1))[-1] == ("/t/b", "cut")


def test_scan_fact_survives_a_saved_report():
    """`check --facts FILE` re-judges offline: modules come back as ModuleArchs and judge the same."""
    from cudadoctor.compat import ModuleArchs
    from cudadoctor.model import from_jsonable, to_jsonable
    from cudadoctor.probes.scan import ScanInfo, judge

    fs = _fs()
    fs.add_exe("/venv/bin/python", FakeCmd(stdout=json.dumps(_answer())))
    info, _ = scan_python(fs, "/venv/bin/python", cc=(9, 0))
    back = from_jsonable(ScanInfo, json.loads(json.dumps(to_jsonable(info))))
    assert all(isinstance(m, ModuleArchs) for f in back.files for m in f.modules)
    assert [(j.file.path, j.verdict) for j in judge(back, (9, 0))] == [(j.file.path, j.verdict)
                                                                      for j in judge(info, (9, 0))]
    assert {r.origin for r in back.roots} >= {"editable", "site-packages", "pth"}
