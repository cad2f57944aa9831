"""The matrix refresh procedure (scripts/refresh_matrix.py), with no network: it replays answers the
package indexes really gave on 2026-11-30 (tests/data/matrix_refresh/recorded), plus a few answers
constructed in the indexes' documented formats where the index was unreachable from the recording
machine (tests/data/matrix_refresh/constructed; see the README there).
"""

from __future__ import annotations

import http.server
import io
import json
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import refresh_matrix  # noqa: E402
from matrix_refresh import hostcfg, index  # noqa: E402
from matrix_refresh.gather import Reader, gather  # noqa: E402
from matrix_refresh.propose import propose  # noqa: E402
from matrix_refresh.wheel import FileRanges, HttpRanges, WheelError, arch_list, read_wheel_archs  # noqa: E402
from test_fatbin import _host_elf, make_entry, make_fatbin  # noqa: E402

from cudadoctor.matrix import load  # noqa: E402
from cudadoctor.matrix.schema import validate  # noqa: E402

DATA = Path(__file__).parent / "data" / "matrix_refresh"
OLD = DATA / "tables-2026-11-29"  # matrix/*.toml as they were before this refresh (main, 2026-11-29)


def answers(tmp_path, constructed: bool = False) -> str:
    d = tmp_path / "answers"
    shutil.copytree(DATA / "recorded", d)
    if constructed:
        for f in (DATA / "constructed").iterdir():
            if f.name != "README.md":
                shutil.copy(f, d / f.name)
    return str(d)


def run(capsys, *args) -> tuple:
    rc = refresh_matrix.main([*args, "--today", "2026-11-30"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def snapshot(tmp_path, constructed=False, tables=OLD):
    m, _ = refresh_matrix.load_tables(str(tables))
    f = index.Fetcher("replay", answers(tmp_path, constructed))
    return m, gather(m, f, Reader(f), "2026-11-30")


def proposed(p, table, kind):
    return [row for k, row, _ in p.rows.get(table, []) if k == kind]


# ---------------------------------------------------------------- the whole procedure, replayed


def test_old_tables_get_this_months_rows(tmp_path, capsys):
    rc, out, _ = run(capsys, "--matrix", str(OLD), "--replay", answers(tmp_path))
    assert rc == 1
    assert "--- matrix/torch.toml\n+++ matrix/torch.toml (proposed)" in out
    assert '+torch = "2.15"\n+pypi_default = "cu132"' in out
    assert "to do: torch 2.15: only PyPI's variant (cu132)" in out  # download.pytorch.org was unreachable
    assert "the PyTorch wheel index did not answer" in out


def test_proposed_rows_match_the_hand_checked_data(tmp_path):
    m_old, snap = snapshot(tmp_path)
    p = propose(m_old, snap)
    now = load()
    # torch 2.15 cu132: the arch list read from the real wheel (476 fatbin entries per arch), PyPI's pins
    (rel,) = proposed(p, "torch", "release")
    (var,) = proposed(p, "torch", "release.variant")
    assert (rel["torch"], rel["pypi_default"]) == ("2.15", "cu132")
    mine = next(v for v in now.torch_variants("2.15") if v["cu"] == "cu132")
    assert (var["archs"], var["ptx"], var["cudnn"], var["nccl"]) == (mine["archs"], mine["ptx"], mine["cudnn"], mine["nccl"])
    assert var["confidence"] == "verified" and var["source"] == ["PYPI", "WHEEL"]
    # host compilers of 13.4 and 13.5 from their host_config.h, merged into one row
    (comp,) = proposed(p, "compilers", "toolkit")
    assert (comp["cuda_first"], comp["cuda_last"], comp["gcc_max"], comp["clang_max"]) == ("13.4", "13.5", 16, 22)
    assert comp["gcc_max"] == now.compiler_bounds("13.5")["gcc_max"]
    # CUDA toolkits 13.4.1 (GA), 13.4.2, 13.4.3, 13.5.0 (GA), drivers left to fill
    tks = proposed(p, "drivers", "toolkit")
    assert [(r["versions"][0], r["release"], r["linux"]) for r in tks] == [
        ("13.4.1", "GA", ""), ("13.4.2", "Update 1", ""), ("13.4.3", "Update 2", ""), ("13.5.0", "GA", "")]
    (cd,) = proposed(p, "cudnn", "cudnn")
    assert (cd["first"], cd["last"], cd["confidence"]) == ("9.25", "9.28", "inferred")
    assert any("driver branch" in t and "13.5" in t for t in p.todo)
    assert p.index["newest"]["torch"] == {"version": "2.15.0", "date": "2026-10-28"}


def test_applied_proposal_is_refused_until_its_blanks_are_filled(tmp_path, capsys):
    tables = tmp_path / "tables"
    shutil.copytree(OLD, tables)
    rc, _, err = run(capsys, "--matrix", str(tables), "--replay", answers(tmp_path), "--apply")
    assert rc == 1 and "fill the 'to do' values" in err
    m, _ = refresh_matrix.load_tables(str(tables))
    problems = validate(m.tables)
    assert problems and all("toolkit 13.4" in x or "toolkit 13.5" in x for x in problems), problems
    # the maintainer fills the minimum drivers from the release notes: now the tables are sound
    text = (tables / "drivers.toml").read_text()
    text = text.replace('versions = ["13.5.0"]\nlinux = ""', 'versions = ["13.5.0"]\nlinux = "620.70.06"')
    text = text.replace('linux = ""', 'linux = "615.71.09"')
    (tables / "drivers.toml").write_text(text)
    m, _ = refresh_matrix.load_tables(str(tables))
    assert validate(m.tables) == []
    assert m.torch_data_stops_at == "2.15" and m.cuda_data_stops_at == "13.5"


def test_current_tables_cover_what_the_index_knew(tmp_path, capsys):
    rc, out, _ = run(capsys, "--matrix", str(ROOT / "matrix"), "--replay", answers(tmp_path))
    assert rc == 0 and "the tables cover everything the indexes know" in out
    assert "--- matrix/" not in out  # matrix/index.toml is exactly what this refresh writes


def test_variants_from_the_pytorch_index_and_drivers_from_nvidias_redist(tmp_path):
    m_old, snap = snapshot(tmp_path, constructed=True)
    p = propose(m_old, snap)
    vs = {v["cu"]: v for v in proposed(p, "torch", "release.variant")}
    assert sorted(vs) == ["cu130", "cu132", "cu134"]  # cu126 has no 2.15 wheel; cu131/133/135 are 404
    assert (vs["cu130"]["role"], vs["cu134"]["role"]) == ("stable", "experimental")
    assert vs["cu134"]["cuda"] == "13.4" and vs["cu134"]["cudnn"] == "9.26.0.51" and "TORCHINDEX" in vs["cu134"]["source"]
    tks = {r["versions"][0]: r for r in proposed(p, "drivers", "toolkit")}
    assert tks["13.4.1"]["linux"] == "615.71.09" and tks["13.5.0"]["linux"] == "620.70.06"
    assert tks["13.4.1"]["confidence"] == "verified-secondary" and tks["13.4.2"]["linux"] == ""
    assert not [n for n in snap.notes if "PyTorch wheel index" in n]


def test_nothing_answered_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, _, err = run(capsys, "--matrix", str(OLD), "--replay", str(tmp_path / "empty"))
    assert rc == 2 and "PyPI JSON API answered nothing" in err and "Traceback" not in err
    rc, _, err = run(capsys, "--matrix", str(tmp_path / "nowhere"))
    assert rc == 2 and "has no torch.toml" in err


def test_the_script_runs_as_a_program(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "refresh_matrix.py"), "--matrix", str(ROOT / "matrix"),
                        "--replay", answers(tmp_path), "--today", "2026-11-30"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "torch                      2.15.0 (2026-10-28)" in p.stdout, p.stderr


# ---------------------------------------------------------------- the pieces


def test_pins_from_requires_dist():
    rd = json.loads((DATA / "recorded" / "pypi.org_pypi_torch_json").read_text())["info"]["requires_dist"]
    assert index.pins(rd) == {"cuda": "13.2", "cuda_full": "13.2.2", "cudnn": "9.26.0.51", "nccl": "2.30.7"}
    old_style = ["nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'", "nvidia-cudnn-cu12==9.10.2.21",
                 "nvidia-nccl-cu12>=2.27", "not a requirement ((("]
    assert index.pins(old_style) == {"cuda": "12.8", "cuda_full": "12.8.90", "cudnn": "9.10.2.21"}


def test_pypi_answers_parse_final_releases_only():
    text = json.dumps({"info": {"version": "2.16.0rc1"}, "releases": {
        "2.15.0": [{"filename": "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl", "upload_time": "2026-10-28T15:17:47",
                    "url": "../../packages/x/torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"}],
        "2.16.0rc1": [{"filename": "a.whl", "upload_time": "2026-12-01T00:00:00"}],
        "2.14.2": [{"filename": "b.whl", "upload_time": "2026-11-01T00:00:00", "yanked": True}],
        "2.14.0": [], "garbage": [{"filename": "c.whl", "upload_time": "2020-01-01"}]}})
    p = index.parse_pypi("torch", text, "https://pypi.org/pypi/torch/json")
    assert [r.version for r in p.releases] == ["2.15.0"] and p.newest().date == "2026-10-28"
    assert p.newest().files[0]["url"].startswith("https://pypi.org/packages/x/")
    assert index.parse_pypi("torch", "<html>", "u").error.startswith("not JSON")
    assert json.loads(index.trim_pypi(text))["releases"]["2.15.0"][0]["upload_time"] == "2026-10-28T15:17:47"


def test_pep503_page():
    page = (DATA / "constructed" / "download.pytorch.org_whl_cu134_torch").read_text()
    wheels = index.parse_simple(page + '<a href="/whl/cu134/numpy-2.0-cp312-none-any.whl">x</a><a href="junk">y</a>',
                                "https://download.pytorch.org/whl/cu134/torch/")
    assert {w["local"] for w in wheels} == {"cu134"} and len(wheels) == 6
    w = index.variant_wheel(wheels, "2.15", "cu134")
    assert w["filename"] == "torch-2.15.0+cu134-cp313-cp313-manylinux_2_28_x86_64.whl"
    assert w["url"] == "https://download.pytorch.org/whl/cu134/torch-2.15.0%2Bcu134-cp313-cp313-manylinux_2_28_x86_64.whl"


def test_arch_list_rule_on_real_builds():
    # torch 2.11.0+cu130 on the H200 (cuobjdump --list-elf counts, tests/data/h200/torch_cuobjdump_elf.txt)
    h200 = dict((b, int(a)) for a, b in (ln.split() for ln in
                (Path(__file__).parent / "data" / "h200" / "torch_cuobjdump_elf.txt").read_text().splitlines()
                if re.match(r"\s*\d+ sm_", ln)))
    assert arch_list(h200) == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    # torch 2.15.0 from PyPI, read by the refresh itself
    read = json.loads((DATA / "recorded" / "read-torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl.json").read_text())
    assert arch_list(read["sass_counts"]) == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert arch_list({}) == [] and arch_list({"sm_90a": 3}) == []
    # half as many entries as the most common target: in the list; fewer: a few special kernels
    assert arch_list({"sm_75": 10, "sm_80": 5, "sm_86": 3, "sm_90a": 10}) == ["7.5", "8.0"]


def test_host_config_limits():
    # the lines of CUDA 13.4.92's include/crt/host_config.h that matter (nvidia-cuda-crt wheel)
    text = """#if __GNUC__ > 16
#error -- unsupported GNU version! gcc versions later than 16 are not supported!
#if defined(__HORIZON__)
#if (__clang_major__ >= 22) || (__clang_major__ < 3)
#endif
#if (__clang_major__ >= 23) || (__clang_major__ < 3) || ((__clang_major__ == 3) &&  (__clang_minor__ < 3))
#if _MSC_VER < 1920 || _MSC_VER >= 1960
#error -- unsupported Microsoft Visual Studio version! Only the versions between 2019 and 2026 (inclusive) are supported!
"""
    assert hostcfg.limits(text) == {"gcc_max": 16, "clang_max": 22, "msvc": "2019-2026 (_MSC_VER 1920-1959)"}
    assert hostcfg.limits("#if __GNUC__ > 15\n#if (__clang_major__ >= 22)") == {"gcc_max": 15, "clang_max": 21}


# ---------------------------------------------------------------- reading a wheel over ranges


def _fake_libtorch_cuda() -> bytes:
    """A host ELF whose .nv_fatbin holds 9 containers built for sm_75/sm_80/sm_90 and one for sm_90a."""
    plain = [make_fatbin(make_entry(2, 75, b"\1" * 40), make_entry(2, 80, b"\2" * 40), make_entry(2, 90, b"\3" * 40))
             for _ in range(9)]
    special = make_fatbin(make_entry(2, 90, flags=0x100011))
    section = b"".join(c + b"\0" * ((-len(c)) % 8) for c in plain + [special])
    return _host_elf({".nv_fatbin": section, ".text": b"\x90" * 256})


def _wheel(path: Path, method: int, member="torch/lib/libtorch_cuda.so") -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torch/__init__.py", "x = 1\n", compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo(member), _fake_libtorch_cuda(), compress_type=method)
        z.writestr("torch-9.9.0.dist-info/METADATA", "Name: torch\nVersion: 9.9.0\n"
                   "Requires-Dist: nvidia-cudnn-cu13==9.99.0.1; platform_system == \"Linux\"\n",
                   compress_type=zipfile.ZIP_DEFLATED)
    return path


@pytest.mark.parametrize("method,stored", [(zipfile.ZIP_STORED, True), (zipfile.ZIP_DEFLATED, False)])
def test_wheel_archs_stored_and_deflated(tmp_path, method, stored):
    r = FileRanges(str(_wheel(tmp_path / "t.whl", method)))
    w = read_wheel_archs(r)
    assert (w.archs, w.ptx, w.extra, w.stored) == (["7.5", "8.0", "9.0"], [], ["sm_90a"], stored)
    assert w.sass_counts == {"sm_75": 9, "sm_80": 9, "sm_90": 9, "sm_90a": 1}
    from matrix_refresh.gather import requires_dist

    assert index.pins(requires_dist(r)) == {"cudnn": "9.99.0.1"}


def test_wheel_errors_are_one_line(tmp_path):
    with pytest.raises(WheelError, match="no torch/lib/libtorch_cuda.so"):
        read_wheel_archs(FileRanges(str(_wheel(tmp_path / "cpu.whl", zipfile.ZIP_DEFLATED, member="torch/lib/libc10.so"))))
    (tmp_path / "junk.whl").write_bytes(b"not a zip at all" * 100)
    with pytest.raises(WheelError, match="not a wheel"):
        read_wheel_archs(FileRanges(str(tmp_path / "junk.whl")))
    broken = bytearray((_wheel(tmp_path / "b.whl", zipfile.ZIP_DEFLATED)).read_bytes())
    start = broken.find(b"torch/lib/libtorch_cuda.so") + 200  # inside the deflated member
    broken[start:start + 64] = b"\xff" * 64
    (tmp_path / "b.whl").write_bytes(bytes(broken))
    with pytest.raises(WheelError):
        read_wheel_archs(FileRanges(str(tmp_path / "b.whl")))


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file and honours `Range: bytes=a-b` (what a package index's CDN does)."""

    data = b""
    ranges = True

    def do_GET(self):  # noqa: N802 - http.server's name
        m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if m and self.ranges:
            a, b = int(m.group(1)), min(int(m.group(2)), len(self.data) - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{len(self.data)}")
            body = self.data[a:b + 1]
        else:
            self.send_response(200)
            body = self.data
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("ranges", [True, False])
def test_wheel_over_http_ranges(tmp_path, ranges):
    data = _wheel(tmp_path / "t.whl", zipfile.ZIP_DEFLATED).read_bytes()
    handler = type("H", (_RangeHandler,), {"data": data, "ranges": ranges})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/torch-9.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"
        if not ranges:
            with pytest.raises(WheelError, match="range requests"):
                HttpRanges(url, timeout=10)
            return
        r = HttpRanges(url, timeout=10)
        w = read_wheel_archs(r)
        assert w.archs == ["7.5", "8.0", "9.0"] and r.requests < 20 and r.size == len(data)
    finally:
        srv.shutdown()


@pytest.mark.nvcc
def test_wheel_with_a_real_nvcc_library(tmp_path):
    """libtorch_cuda.so stand-in built by the real nvcc: three files for sm_75+sm_90, one also for sm_90a."""
    srcs = []
    for i in range(3):
        p = tmp_path / f"k{i}.cu"
        p.write_text(f"__global__ void k{i}(float* x) {{ x[0] = {i}; }}\n")
        srcs.append((p, ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=sm_90"]))
    p = tmp_path / "special.cu"
    p.write_text("__global__ void s(float* x) { x[0] = 9; }\n")
    srcs.append((p, ["-gencode", "arch=compute_90a,code=sm_90a"]))
    objs = []
    for src, flags in srcs:
        obj = tmp_path / (src.stem + ".o")
        subprocess.run(["nvcc", "-c", "-Xcompiler", "-fPIC", *flags, str(src), "-o", str(obj)], check=True,
                       capture_output=True, timeout=300)
        objs.append(str(obj))
    so = tmp_path / "libtorch_cuda.so"
    subprocess.run(["nvcc", "-shared", *objs, "-o", str(so)], check=True, capture_output=True, timeout=300)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.write(so, "torch/lib/libtorch_cuda.so", compress_type=zipfile.ZIP_DEFLATED)
    (tmp_path / "w.whl").write_bytes(buf.getvalue())
    w = read_wheel_archs(FileRanges(str(tmp_path / "w.whl")))
    assert (w.archs, w.extra) == (["7.5", "9.0"], ["sm_90a"])
