"""Hostile input to the commands that read files or text: explain, archs, scan, fleet summarize, matrix.

Documented exit codes: explain 0 recognised / 1 not recognised / 2 bad input; archs and scan 0 all run /
1 something cannot run / 2 bad input; fleet summarize 2 when no report can be read.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess

import pytest
from faultkit import need_command

NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device"


# ---------------------------------------------------------------- explain

@pytest.fixture
def explain(faults):
    need_command("explain")
    return faults


@pytest.mark.slow
def test_explain_50_mb_log_with_the_error_in_the_middle(explain, tmp_path):
    f = tmp_path / "train.log"
    line = b"step 123456 loss 0.12345 lr 1e-4 tokens/s 98765 some noisy log line here\n"
    half = line * (25_000_000 // len(line) + 1)
    f.write_bytes(half + NO_KERNEL.encode() + b"\n" + half)
    assert f.stat().st_size > 50_000_000
    r = explain.run("explain", "--file", f, "--json", "--offline", limit=20, codes=(0,))
    m = r.report()["matches"]
    assert m and m[0]["id"] == "no-kernel-image"
    assert len(r.out) < 200_000  # the evidence quotes the line, not the log
    with open(f, "rb") as stdin:
        r = explain.run("explain", "-", "--offline", stdin=stdin, limit=20, codes=(0,))
    assert "no-kernel-image" in r.out or "no kernel image" in r.out.lower()


@pytest.mark.slow
def test_explain_50_mb_single_line_and_binary(explain, tmp_path):
    one = tmp_path / "oneline.txt"
    one.write_bytes(b"a" * 50_000_000)
    r = explain.run("explain", "--file", one, "--json", "--offline", limit=20, codes=(1,))
    assert r.report()["matches"] == []
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(random.Random(5).randbytes(20_000_000) if hasattr(random.Random, "randbytes")
                    else os.urandom(20_000_000))
    r = explain.run("explain", "--file", rnd, "--json", "--offline", limit=20, codes=(0, 1))
    r.report()


@pytest.mark.parametrize("content", [b"", b"\n\n   \n", b"\x00" * 100])
def test_explain_empty_input(explain, tmp_path, content):
    f = tmp_path / "empty.log"
    f.write_bytes(content)
    r = explain.run("explain", "--file", f, "--offline", codes=(1, 2))
    if r.rc == 2:
        assert r.out == "" and r.err.startswith("cudadoctor") and len(r.err.strip().splitlines()) == 1
    with open(f, "rb") as stdin:
        explain.run("explain", "-", "--offline", stdin=stdin, codes=(1, 2))
    explain.run("explain", "", "--offline", codes=(1, 2))


def test_explain_invalid_utf8(explain, tmp_path):
    f = tmp_path / "latin1.log"
    f.write_bytes(b"caf\xe9 \xff\xfe " + NO_KERNEL.encode() + b" \xc3\x28\n")
    r = explain.run("explain", "--file", f, "--json", "--offline", codes=(0,))
    assert r.report()["matches"][0]["id"] == "no-kernel-image"
    with open(f, "rb") as stdin:
        r = explain.run("explain", "-", "--json", "--offline", stdin=stdin, codes=(0,))
    assert r.report()["matches"][0]["id"] == "no-kernel-image"


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_explain_unreadable_file(explain, tmp_path, what):
    p = tmp_path / "x.log"
    if what == "directory":
        p.mkdir()
    r = explain.run("explain", "--file", p, "--offline", codes=(2,))
    assert r.out == "" and "x.log" in r.err


def test_explain_file_is_a_pipe(explain, tmp_path):
    """`cudadoctor explain --file <(python train.py 2>&1)`: the file is a pipe, read as a stream. (A FIFO with
    no writer blocks on open, as with cat: that is the user's pipe, not a fault to refuse.)"""
    import threading

    p = tmp_path / "log.fifo"
    os.mkfifo(p)

    def writer():
        with open(p, "wb") as f:
            for _ in range(2000):
                f.write(b"noise line\n")
            f.write(NO_KERNEL.encode() + b"\n")

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    r = explain.run("explain", "--file", p, "--json", "--offline", codes=(0,))
    assert r.report()["matches"][0]["id"] == "no-kernel-image"


# ---------------------------------------------------------------- archs: corrupted and truncated binaries

@pytest.fixture(scope="module")
def cuda_binaries(tmp_path_factory):
    """A real executable and a fatbin built by nvcc (sm_80 SASS + compute_90 PTX)."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else "")
    if not nvcc:
        pytest.skip("needs nvcc to build real CUDA binaries to corrupt")
    d = tmp_path_factory.mktemp("cudabin")
    (d / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\nint main() { return 0; }\n")
    gen = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90"]
    subprocess.run([nvcc, *gen, "-o", str(d / "k.out"), str(d / "k.cu")], check=True, capture_output=True,
                   timeout=300)
    subprocess.run([nvcc, "-fatbin", *gen, "-o", str(d / "k.fatbin"), str(d / "k.cu")], check=True,
                   capture_output=True, timeout=300)
    return d


def mutants(src: dict, out) -> list:
    """Truncations, lying size fields and random byte flips of a real ELF and fatbin."""
    fb, elf = src["fatbin"], src["elf"]
    made = []

    def w(name, data):
        p = out / name
        p.write_bytes(data)
        made.append(p)

    for cut in (0, 4, 8, 15, 16, 40, 64, 200, len(fb) // 2, len(fb) - 1):
        w(f"fb_trunc_{cut}.fatbin", fb[:cut])
    for off, fmt, val, name in ((8, "<Q", 2**63 - 1, "size"), (6, "<H", 0xFFFF, "hdr"), (20, "<I", 0, "entryhdr"),
                                (24, "<Q", 2**64 - 1, "entrysize")):
        b = bytearray(fb)
        b[off:off + struct.calcsize(fmt)] = struct.pack(fmt, val)
        w(f"fb_{name}.fatbin", bytes(b))
    rnd = random.Random(7)
    for i in range(25):
        b = bytearray(fb)
        for _ in range(8):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        w(f"fb_flip_{i}.fatbin", bytes(b))
    for cut in (4, 16, 52, 64, 1000, len(elf) // 2, len(elf) - 100):
        w(f"elf_trunc_{cut}.so", elf[:cut])
    for off, fmt, val, name in ((0x28, "<Q", 2**62, "shoff"), (0x3C, "<H", 0xFFFF, "shnum"),
                                (0x3E, "<H", 0xFFFE, "shstrndx")):
        b = bytearray(elf)
        b[off:off + struct.calcsize(fmt)] = struct.pack(fmt, val)
        w(f"elf_{name}.so", bytes(b))
    i = elf.find(bytes.fromhex("50ed55ba"))  # the fatbin container inside .nv_fatbin
    assert i > 0
    b = bytearray(elf)
    b[i + 8:i + 16] = struct.pack("<Q", 2**40)
    w("elf_fatbin_size.so", bytes(b))
    b = bytearray(elf)
    b[i:i + 2000] = bytes(rnd.randrange(256) for _ in range(2000))
    w("elf_fatbin_noise.so", bytes(b))
    w("elf32_header.so", b"\x7fELF\x01\x01\x01" + b"\0" * 9 + bytes(rnd.randrange(256) for _ in range(100)))
    w("bad.ptx", b"\xff\xfe//garbage\n.version 99.9\n.target sm_999\n")
    return made


def test_archs_corrupted_and_truncated(faults, cuda_binaries, tmp_path):
    need_command("archs")
    src = {"fatbin": (cuda_binaries / "k.fatbin").read_bytes(), "elf": (cuda_binaries / "k.out").read_bytes()}
    files = mutants(src, tmp_path)
    r = faults.run("archs", "--cc", "9.0", "--json", *files, codes=(2,), limit=15)
    rows = {os.path.basename(f["path"]): f for f in r.report()["files"]}
    assert len(rows) == len(files)
    for name in ("fb_trunc_16.fatbin", "fb_trunc_1764.fatbin", "elf_trunc_1000.so", "elf_shoff.so",
                 "elf_fatbin_size.so", "fb_entrysize.fatbin"):
        assert "truncated" in rows[name]["error"] or "corrupt" in rows[name]["error"], rows[name]
    assert "too short" in rows["fb_trunc_0.fatbin"]["error"]
    # every bad file is named on stderr, one line each
    bad = [n for n, f in rows.items() if f.get("error")]
    err_lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(err_lines) == len(bad) and all(ln.startswith("cudadoctor: ") for ln in err_lines)


@pytest.mark.parametrize("case", ["truncated-elf", "truncated-fatbin", "fifo", "dev-zero", "directory", "missing"])
def test_archs_one_bad_file(faults, cuda_binaries, tmp_path, case):
    need_command("archs")
    p = tmp_path / "bad.so"
    if case == "truncated-elf":
        p.write_bytes((cuda_binaries / "k.out").read_bytes()[:5000])
    elif case == "truncated-fatbin":
        p.write_bytes((cuda_binaries / "k.fatbin").read_bytes()[:100])
    elif case == "fifo":
        os.mkfifo(p)  # opening a FIFO blocks until a writer comes: it must be refused, not waited on
    elif case == "dev-zero":
        p = "/dev/zero"
    elif case == "directory":
        p.mkdir()
    r = faults.run("archs", "--cc", "9.0", p, codes=(2,))
    assert str(p) in r.err and "Traceback" not in r.err
    r = faults.run("archs", "--cc", "9.0", "--json", cuda_binaries / "k.fatbin", p, codes=(2,))
    files = r.report()["files"]
    assert files[0]["verdict"] == "ptx-jit" and files[1]["error"]


# ---------------------------------------------------------------- scan: a huge and hostile site-packages

@pytest.fixture
def hostile_tree(tmp_path, cuda_binaries):
    root = tmp_path / "site-packages"
    elf = (cuda_binaries / "k.out").read_bytes()
    for i in range(400):  # 40,000 small files in 400 folders
        d = root / "bigpkg" / f"m{i // 40}" / f"sub{i}"
        d.mkdir(parents=True)
        for j in range(100):
            (d / f"f{j}.py").write_bytes(b"x = 1\n")
    deep = root / "deep"
    for _ in range(120):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "libdeep.so").write_bytes(elf)
    pkg = root / "pkg"
    pkg.mkdir()
    os.mkfifo(pkg / "libfifo.so")
    (pkg / "libzero.so").symlink_to("/dev/zero")
    (pkg / "loop").symlink_to("loop")
    (pkg / "up").symlink_to("..")
    (pkg / "libdangling.so").symlink_to("/nonexistent/libx.so")
    (pkg / "libtrunc.so").write_bytes(elf[:5000])
    (pkg / "libgood.so").write_bytes(elf)
    (pkg / "lib\u2603.so").write_bytes(b"\x7fELF" + b"\x00" * 60)
    odd = os.fsencode(str(pkg)) + b"/caf\xe9"
    os.makedirs(odd)
    with open(odd + b"/lib\xff.so", "wb") as f:
        f.write((cuda_binaries / "k.fatbin").read_bytes())
    return root


@pytest.mark.slow
def test_scan_huge_hostile_tree(faults, hostile_tree):
    need_command("scan")
    r = faults.run("scan", "--path", hostile_tree, "--cc", "9.0", "--json", "--all", codes=(0, 1), limit=30)
    rep = r.report()
    by = {os.path.basename(f["path"]): f for f in rep["files"]}
    assert by["libgood.so"]["verdict"] == "ptx-jit" and by["libdeep.so"]["verdict"] == "ptx-jit"
    assert by["libtrunc.so"]["error"] and "truncated" in by["libtrunc.so"]["error"]
    # a run that judges for an arch the sm_80/compute_90 binaries cannot serve names them
    r = faults.run("scan", "--path", hostile_tree, "--cc", "7.5", "--json", codes=(1,), limit=30)
    assert any(os.path.basename(p) == "libgood.so" for p in _paths(r.report()["cannot_run"]))


def _paths(items) -> list:
    return [i if isinstance(i, str) else i.get("path", "") for i in items]


def test_scan_bad_arguments(faults, tmp_path):
    need_command("scan")
    for args in (["--path", tmp_path / "missing"], ["--path", tmp_path, "--cc", "banana"],
                 ["--python", tmp_path / "nope"]):
        r = faults.run("scan", *args, codes=(2,))
        assert r.out == "" or r.out.strip().startswith("{"), r.out
        assert r.err.strip(), "a usage error says what is wrong"


@pytest.mark.slow
def test_scan_target_interpreter_hangs(faults, tmp_path):
    """scan asks the target interpreter for its site-packages: it must not wait forever on it."""
    need_command("scan")
    from faultkit import write_tool

    py = write_tool(tmp_path / "target", "python", "exec sleep 1000\n")
    r = faults.run("scan", "--python", py, "--cc", "9.0", "--json", codes=(1, 2), limit=35)
    assert r.err.strip() or r.out.strip()


# ---------------------------------------------------------------- fleet summarize: garbage reports

def test_fleet_summarize_garbage_reports(faults, tmp_path):
    need_command("fleet")
    d = tmp_path / "reports"
    d.mkdir()
    (d / "a.json").write_bytes(b'{"facts": 1}')
    (d / "b.json").write_bytes(bytes(random.Random(3).randrange(256) for _ in range(3000)))
    (d / "c.json").write_bytes(b"")
    (d / "d.json").write_bytes(b"[1, 2]")
    (d / "e.json").write_bytes(b'{"tool": "cudadoctor", "schema_version": "1.0", "steps": "x", "facts": []}')
    os.mkfifo(d / "f.json")
    r = faults.run("fleet", "summarize", d, codes=(2,))
    assert r.out == "" and "no cudadoctor report could be read" in r.err
    good = faults.run("check", "--json", "--only", "toolkit.nvcc", codes=(0, 1))
    (d / "node1.json").write_text(good.out)
    r = faults.run("fleet", "summarize", d, "--json", codes=(0, 1))
    rep = json.loads(r.out)
    assert rep  # the readable report is summarised, the others listed as skipped
    assert "f.json" in r.out + r.err and "b.json" in r.out + r.err


# ---------------------------------------------------------------- matrix: odd arguments

@pytest.mark.parametrize("args", [["arch", "sm_999"], ["torch", "../../etc/passwd"], ["driver", "--cuda", "banana"],
                                  ["cuda", "--driver", "1e999"], ["compiler", "--cuda", "13.0;id"],
                                  ["arch", "\udcff"]])
def test_matrix_odd_arguments(faults, args):
    need_command("matrix")
    r = faults.run("matrix", *args, codes=(1, 2))
    assert r.err.strip()


# ---------------------------------------------------------------- fleet slurm: a broken Slurm

def _slurm_tools(faults, sinfo: str, srun: str) -> None:
    faults.tool("sinfo", sinfo)
    faults.tool("srun", srun)
    for t in ("scontrol", "squeue", "salloc"):
        faults.tool(t, "exit 1\n")


def test_fleet_slurm_srun_prints_garbage(faults):
    need_command("fleet")
    _slurm_tools(faults, "printf 'node1 idle gpu*\\nnode2 idle gpu*\\n\\377garbage\\n'\n",
                 "printf '0: \\377junk\\n1: {\"tool\": \"cudadoctor\", broken\\n'\nexit 1\n")
    r = faults.run("fleet", "slurm", "--time-limit", "5", "--alloc-wait", "0", "--json", codes=(1, 2))
    assert "srun" in r.err and len(r.err.strip().splitlines()) <= 3


@pytest.mark.slow
def test_fleet_slurm_sinfo_hangs(faults):
    """sinfo has a fixed 30 s limit (cudadoctor/fleet/slurm.py)."""
    need_command("fleet")
    _slurm_tools(faults, "exec sleep 1000\n", "exec sleep 1000\n")
    r = faults.run("fleet", "slurm", "--time-limit", "5", "--alloc-wait", "0", codes=(2,), limit=32)
    assert "sinfo" in r.err and "no answer" in r.err


def test_fleet_slurm_interrupted_while_srun_hangs(faults):
    """Ctrl-C while srun waits: cudadoctor stops at once and srun (its own session) is killed with it."""
    import signal
    import time

    from faultkit import PY

    need_command("fleet")
    pid = faults.pidfile()
    _slurm_tools(faults, "printf 'node1 idle gpu*\\n'\n", f'echo $$ >> "{pid}"\nexec sleep 1000\n')
    p = subprocess.Popen([PY, "-m", "cudadoctor", "fleet", "slurm", "--time-limit", "5", "--alloc-wait", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=faults.env, cwd=str(faults.tmp))
    deadline = time.monotonic() + 30
    while not (pid.exists() and pid.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid.exists(), "the fake srun never started"
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("fleet slurm did not stop within 10 s of Ctrl-C")
    assert p.returncode == 130 and b"Traceback" not in err, err[-1500:]
    time.sleep(0.3)
    srun = int(pid.read_text().split()[0])
    try:
        with open(f"/proc/{srun}/stat") as f:
            state = f.read().split(") ")[-1][:1]
    except OSError:
        state = "gone"
    assert state in ("gone", "Z", "X"), "srun was left running"
