"""`cudadoctor check` on broken machines: hung, failing, garbage-printing and missing tools.

Exit codes (README / `cudadoctor check --help`): 0 nothing failed, 1 a check failed, 2 usage error or a
check crashed. This machine has no GPU, so a full `check` always fails the driver step (exit 1); cases
about one layer use `--only` so the exit code reflects that layer.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from faultkit import (KILL_GRACE, PY, T_NVML, T_SMI, T_TOOL, T_TORCH, fake_torch, need_command, target_python,
                      write_py_tool, write_tool)
import fakelibs
from proc_support import alive

NO_DRIVER_MSG = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                 "Make sure that the latest NVIDIA driver is installed and running.")


# ---------------------------------------------------------------- nvidia-smi

def test_smi_hangs(faults):
    faults.tool("nvidia-smi", "exec sleep 1000\n")
    r = faults.run("check", "--json", "--only", "driver", limit=T_SMI + KILL_GRACE, codes=(1,))
    f = r.finding("driver.smi-hang")
    assert f["status"] == "fail" and "no answer within 2 s" in f["summary"]
    assert r.fact("nvidia_smi")["state"] == "timeout"


def test_smi_hangs_ignoring_sigterm_and_leaving_a_daemon_on_its_pipes(faults):
    """A wedged tool that ignores SIGTERM and leaves a process in another session holding its stdout."""
    pid = faults.pidfile()
    faults.tool("nvidia-smi", f"""
        trap '' TERM INT HUP
        setsid sh -c 'echo $$ >> "{pid}"; exec sleep 300' &
        while :; do sleep 1; done
        """)
    r = faults.run("check", "--json", "--only", "driver", limit=T_SMI + 2 * KILL_GRACE, codes=(1,))
    assert r.findings()["driver.smi-hang"] == "fail"


def test_smi_cannot_reach_driver_exit_9(faults):
    faults.tool("nvidia-smi", f"echo \"{NO_DRIVER_MSG}\"\nexit 9\n")
    r = faults.run("check", "--json", "--only", "driver", codes=(1,))
    f = r.finding("driver.not-loaded")
    assert f["status"] == "fail" and f["fix"]["commands"]
    assert "couldn't communicate" in r.fact("nvidia_smi")["error"]


@pytest.mark.parametrize("garbage", [
    "printf '\\377\\376\\000garbage \\033[31m\\n%.0s' 1 2 3\n",                   # binary junk, exit 0
    "echo 'Segmentation fault (core dumped)' >&2\nexit 139\n",                 # a crashed tool, no banner
    "echo 'Driver Version: banana'\necho 'CUDA Version: ERR!'\n",             # a banner that parses to nothing
])
def test_smi_prints_garbage(faults, garbage):
    faults.tool("nvidia-smi", garbage)
    r = faults.run("check", "--json", "--only", "driver", codes=(1,))
    assert r.findings().get("driver.smi-error") == "fail", r.findings()
    assert r.fact("nvidia_smi")["state"] == "failed"


def test_smi_spews_50_mb(faults):
    """Output is capped; cudadoctor does not take 50 MB into memory or into its report."""
    faults.tool("nvidia-smi", "exec head -c 50000000 /dev/zero | tr '\\000' 'x'\n")
    r = faults.run("check", "--json", "--only", "driver", codes=(1,), limit=10)
    assert r.findings().get("driver.smi-error") == "fail"
    assert len(r.out) < 200_000


def test_smi_is_not_a_runnable_program(faults):
    """Executable bit set but not a program (a truncated download): exec format error."""
    faults.tool("nvidia-smi", b"\x7fELF\x02\x01\x01\x00truncated", mode=0o755)
    r = faults.run("check", "--json", "--only", "driver", codes=(1,))
    f = r.finding("driver.smi-error")
    assert f["status"] == "fail" and "could not start" in f["summary"]


def test_smi_without_execute_permission(faults):
    """nvidia-smi on PATH without its execute bit: the shell says 'Permission denied'."""
    faults.tool("nvidia-smi", f"echo \"{NO_DRIVER_MSG}\"\n", mode=0o644)
    r = faults.run("check", "--json", "--only", "driver", codes=(1,))
    steps = r.steps()
    assert steps["driver"] == "fail"
    # it is never run; the doctor must still end on a driver finding, and say where nvidia-smi is
    assert set(r.findings()) & {"driver.none", "driver.smi-error", "driver.smi-not-executable"}


@pytest.mark.parametrize("fmt", [["-v"], ["--markdown"], ["--json"]])
def test_smi_output_cannot_drive_the_terminal(faults, fmt):
    """Escape sequences in a tool's output (clear screen, set the window title, colours, a C1 CSI) are quoted
    as evidence, never passed to the user's terminal."""
    write_py_tool(faults.bin, "nvidia-smi", f"""
        import sys
        sys.stdout.buffer.write(b"\\x1b[2J\\x1b]0;owned\\x07\\xc2\\x9b999D" + {NO_DRIVER_MSG.encode()!r}
                                + b"\\x1b[31m\\r\\n")
        sys.exit(9)
        """)
    r = faults.run("check", *fmt, "--only", "driver", codes=(1,))
    for bad in ("\x1b", "\x07", "\x9b"):
        assert bad not in r.out, f"{bad!r} reached the output"
    assert "owned" in r.out  # still quoted, visibly


# ---------------------------------------------------------------- NVML (a fake libnvidia-ml.so.1)

@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    if not fakelibs.compiler():
        pytest.skip("no C compiler to build a fake libnvidia-ml.so.1")
    d = tmp_path_factory.mktemp("fakenvml")
    fakelibs.build(d, "libnvidia-ml.so.1", fakelibs.NVML_C)
    return d


def test_nvml_hangs(faults, fake_nvml):
    r = faults.run("check", "--json", "--only", "driver", limit=T_NVML + KILL_GRACE, codes=(1,),
                   env={"LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML": "hang"})
    assert r.fact("nvml")["state"] == "timeout"
    # the hang is named, not hidden behind "no driver" / "cannot communicate"
    assert r.findings() == {"driver.nvml-hang": "fail"}
    assert "no answer within 3 s" in r.finding("driver.nvml-hang")["summary"]


def test_nvml_segfaults(faults, fake_nvml):
    r = faults.run("check", "--json", "--only", "driver", codes=(1,),
                   env={"LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML": "segv"})
    assert r.fact("nvml")["state"] == "failed" and "SIGSEGV" in r.fact("nvml")["error"]
    assert r.steps()["driver"] == "fail"


def test_nvml_driver_not_loaded(faults, fake_nvml):
    r = faults.run("check", "--json", "--only", "driver", codes=(1,),
                   env={"LD_LIBRARY_PATH": str(fake_nvml), "FAKE_NVML": "9"})
    assert r.findings().get("driver.not-loaded") == "fail", r.findings()


# ---------------------------------------------------------------- nvcc, ldconfig, ldd

def test_nvcc_hangs(faults):
    faults.tool("nvcc", "exec sleep 1000\n")
    r = faults.run("check", "--json", "--only", "toolkit.nvcc", limit=T_TOOL + KILL_GRACE, codes=(0,))
    f = r.finding("toolkit.nvcc.unreadable")
    assert f["status"] == "warn" and "no answer within 2 s" in f["summary"]
    r = faults.run("check", "--json", "--only", "toolkit.nvcc", "--strict", limit=T_TOOL + KILL_GRACE, codes=(1,))


def test_nvcc_unknown_version_format(faults):
    faults.tool("nvcc", "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, rel 99 beta'\n")
    r = faults.run("check", "--json", "--only", "toolkit.nvcc", codes=(0,))
    f = r.finding("toolkit.nvcc.unreadable")
    assert f["status"] == "warn" and "unrecognised" in f["summary"]


def test_nvcc_crashes(faults):
    faults.tool("nvcc", "kill -SEGV $$\n")
    r = faults.run("check", "--json", "--only", "toolkit.nvcc", codes=(0,))
    assert r.findings()["toolkit.nvcc.unreadable"] == "warn"


def test_ldconfig_hangs(faults):
    faults.tool("ldconfig", "exec sleep 1000\n")
    r = faults.run("check", "--json", "--only", "driver", "--only", "libraries", limit=T_TOOL + KILL_GRACE,
                   codes=(1,))
    assert r.fact("ldconfig")["state"] == "failed" and "no answer" in r.fact("ldconfig")["error"]
    assert r.steps()["libraries"] in ("ok", "warn", "fail", "skip")


@pytest.fixture
def broken_torch_target(faults):
    """A target interpreter whose torch import fails on a missing CUDA library (so libs falls back to ldd)."""
    root = fake_torch(faults.tmp / "brokentorch", """
        raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")
        """)
    return target_python(faults.tmp / "target", pythonpath=root)


def test_ldd_missing(faults, broken_torch_target):
    # PATH without /usr/bin: no ldd (cudadoctor and the target are started by absolute path)
    r = faults.run("check", "--json", "--python", broken_torch_target, "--only", "torch.cuda", "--only", "libraries",
                   env={"PATH": f"{faults.bin}:/usr/local/cuda/bin"}, codes=(1,))
    assert r.findings()["torch.cuda.import-failed"] == "fail"
    assert r.findings().get("libs.missing") == "fail"
    assert "libcudart.so.13" in r.finding("libs.missing")["summary"]


def test_ldd_hangs(faults, broken_torch_target):
    faults.tool("ldd", "exec sleep 1000\n")
    r = faults.run("check", "--json", "--python", broken_torch_target, "--only", "torch.cuda", "--only", "libraries",
                   limit=2 * (T_TOOL + KILL_GRACE), codes=(1,))
    assert r.findings()["torch.cuda.import-failed"] == "fail"
    libs = r.fact("libs")
    assert any("no answer" in e for e in (libs.get("value") or {}).get("errors", [])), libs


# ---------------------------------------------------------------- the target interpreter (--python)

def test_target_hangs_on_import_torch(faults):
    root = fake_torch(faults.tmp / "hangtorch", "import time\nwhile True:\n    time.sleep(1)\n")
    py = target_python(faults.tmp / "target", pythonpath=root)
    r = faults.run("check", "--json", "--python", py, "--timeout", T_TORCH, "--only", "torch.cuda",
                   limit=T_TORCH + KILL_GRACE, codes=(1,))
    f = r.finding("torch.cuda.probe-hung")
    assert f["status"] == "fail" and "import torch" in f["summary"]


def test_target_segfaults_in_torch(faults):
    root = fake_torch(faults.tmp / "segvtorch", "import os\nos.kill(os.getpid(), 11)\n")
    py = target_python(faults.tmp / "target", pythonpath=root)
    r = faults.run("check", "--json", "--python", py, "--only", "torch.cuda", codes=(1,))
    f = r.finding("torch.cuda.probe-crashed")
    assert f["status"] == "fail" and "SIGSEGV" in f["summary"] and "import torch" in f["summary"]


def test_target_prints_junk_before_its_json(faults):
    """Junk from a shell profile, a sitecustomize and torch itself, including a forged marker line."""
    py = target_python(faults.tmp / "target", before=(
        "echo 'Welcome to the cluster!'; printf '\\377\\000binary\\n'; "
        "echo '@@CUDADOCTOR@@ {not json'; echo '@@CUDADOCTOR@@ [1, 2]'"))
    r = faults.run("check", "--json", "--python", py, "--only", "torch.cuda", codes=(1,))
    # the real CPU-only torch of this venv is still recognised behind the junk
    assert r.findings() == {"torch.cuda.cpu-only": "fail"}


def test_target_dies_without_a_word(faults):
    py = write_tool(faults.tmp / "target", "python", "exit 3\n")
    r = faults.run("check", "--json", "--python", py, "--only", "torch.cuda", codes=(1,))
    f = r.finding("torch.cuda.python-unusable")  # it never reported a stage: the interpreter, not CUDA
    assert "exit code 3" in f["summary"]


def test_target_is_python2(faults):
    """An old interpreter that cannot even parse the probe (python2): named, with its own words."""
    py = write_tool(faults.tmp / "target", "python", """
        echo "  File \\"$1\\", line 12" >&2
        echo "    print \\"x\\"" >&2
        echo "SyntaxError: invalid syntax" >&2
        exit 1
        """)
    r = faults.run("check", "--json", "--python", py, "--only", "torch.cuda", codes=(1,))
    f = r.finding("torch.cuda.python-unusable")
    assert "SyntaxError" in f["summary"] and "exit code 1" in f["summary"]


def test_target_is_not_a_program(faults):
    py = write_tool(faults.tmp / "target", "python", b"\x00\x01not an interpreter", mode=0o755)
    r = faults.run("check", "--json", "--python", py, "--only", "torch.cuda", codes=(1,))
    assert r.findings() == {"torch.cuda.python-missing": "fail"}


@pytest.mark.parametrize("where", ["missing", "directory", "dangling-link", "not-executable"])
def test_target_does_not_exist(faults, where):
    p = faults.tmp / "nope" / "python"
    if where == "directory":
        p.mkdir(parents=True)
    elif where == "dangling-link":
        p.parent.mkdir()
        p.symlink_to(faults.tmp / "gone")
    elif where == "not-executable":
        write_tool(p.parent, "python", "exit 0\n", mode=0o644)
    r = faults.run("check", "--json", "--python", p, codes=(2,))
    assert r.out == "" and "--python" in r.err and len(r.err.strip().splitlines()) == 1


def test_target_leaves_a_child_holding_its_stdout(faults):
    """torch's import forks a process that keeps the probe's stdout open after the probe exits."""
    pid = faults.pidfile()
    root = fake_torch(faults.tmp / "forktorch", f"""
        import os, subprocess
        p = subprocess.Popen(["sleep", "300"], start_new_session=True)
        open({str(pid)!r}, "w").write(str(p.pid))
        raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or directory")
        """)
    py = target_python(faults.tmp / "target", pythonpath=root)
    r = faults.run("check", "--json", "--python", py, "--timeout", T_TORCH, "--only", "torch.cuda",
                   limit=T_TORCH + KILL_GRACE, codes=(1,))
    assert r.findings() == {"torch.cuda.import-failed": "fail"}


# ---------------------------------------------------------------- the environment itself

def test_hostile_environment_values(faults):
    """Huge, odd and empty environment values; no HOME; a tiny terminal."""
    env = {
        "LD_LIBRARY_PATH": ":".join(f"/nonexistent/{i}" for i in range(3000)),
        "CUDA_VISIBLE_DEVICES": "GPU-\u2603,-1,;rm -rf /",
        "CUDA_HOME": "/dev/null/cuda",
        "PYTHONWARNINGS": "error",
        "COLUMNS": "3",
        "TERM": "dumb",
    }
    r = faults.run("check", env=env, drop_env=("HOME",), codes=(1,), limit=10)
    assert "driver" in r.out
    r = faults.run("check", "--json", env=env, drop_env=("HOME",), codes=(1,), limit=10)
    assert r.report()["exit_code"] == 1


def test_non_utf8_path_entries(faults):
    """Bytes in PATH that are not UTF-8 (a Latin-1 folder name)."""
    odd = os.fsencode(str(faults.tmp)) + b"/caf\xe9/bin"
    os.makedirs(odd, exist_ok=True)
    write_tool(faults.tmp / os.fsdecode(b"caf\xe9") / "bin", "nvcc", "exec sleep 1000\n")
    env = {"PATH": os.fsdecode(odd) + os.pathsep + faults.env["PATH"]}
    r = faults.run("check", "--json", "--only", "toolkit.nvcc", env=env, limit=T_TOOL + KILL_GRACE, codes=(0,))
    assert r.findings()["toolkit.nvcc.unreadable"] == "warn"
    r = faults.run("check", "--markdown", "--only", "toolkit.nvcc", env=env, limit=T_TOOL + KILL_GRACE, codes=(0,))
    assert "<details>" in r.out


@pytest.mark.parametrize("content", [
    b'{"facts": {"torch": {"state": "found", "value": "not an object"}, "nvidia_smi": 7}}',
    b'{"facts": {"torch": {"state": "bogus"}, "toolkit": {"state": "found", "value": {"installs": [1, null]}}}}',
    b'{"facts": []}',
    b'[]',
    b'\xff\xfe\x00garbage',
    b'',
])
def test_facts_file_hostile(faults, content):
    f = faults.tmp / "report.json"
    f.write_bytes(content)
    # a step that trips over a hand-made fact is contained (exit 2, an `error` finding whose --json evidence
    # keeps the traceback for the bug report); nothing escapes to stderr
    r = faults.run("check", "--json", "--facts", f, codes=(0, 1, 2), traceback_ok=True)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    if r.rc == 2 and not r.out:
        assert r.err.startswith("cudadoctor: --facts") and len(r.err.strip().splitlines()) == 1
    else:
        rep = r.report()
        assert rep["exit_code"] == r.rc
        crashed = {k for k, v in r.findings().items() if v == "error"}
        assert all(k.endswith(".crashed") for k in crashed) and (r.rc == 2) == bool(crashed)


# ---------------------------------------------------------------- output to a closed pipe / Ctrl-C

CLOSED_PIPE_CASES = [["check", "--json"], ["check"], ["check", "--markdown"], ["checks", "--json"], ["--help"],
                     ["env", "--json"], ["libs", "--json"], ["wsl", "--json"],
                     ["scan", "--cc", "9.0", "--json", "--all"],
                     ["explain", "--json", "--offline", "CUDA error: out of memory"], ["explain", "--list"],
                     ["archs", "--cc", "9.0", "--json", "/bin/true"], ["matrix", "arch", "9.0"],
                     ["matrix", "torch", "2.8.0"]]


@pytest.mark.parametrize("args", CLOSED_PIPE_CASES, ids=[" ".join(a[:2]) for a in CLOSED_PIPE_CASES])
def test_output_to_a_closed_pipe(faults, args):
    from faultkit import command_names

    if args[0] not in command_names() and not args[0].startswith("-"):
        pytest.skip(f"`cudadoctor {args[0]}` has not landed yet")
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # the reader is gone before anything is written (`cudadoctor check --json | true`)
    try:
        r = faults.run(*args, stdout=w_fd, codes=(0, 1, 2))
    finally:
        os.close(w_fd)
    assert "BrokenPipeError" not in r.err and "Broken pipe" not in r.err


def test_output_to_a_pipe_closed_after_one_line(faults):
    """`cudadoctor check --json | head -1`: the reader leaves after the first line."""
    import subprocess

    e = dict(faults.env)
    p = subprocess.Popen([PY, "-m", "cudadoctor", "check", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=e, cwd=str(faults.tmp))
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode("utf-8", "replace")
    rc = p.wait(timeout=60)
    assert first.startswith(b"{")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert rc in (0, 1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_while_a_tool_hangs(faults, sig):
    """Ctrl-C (or `timeout`'s SIGTERM) during a hung nvidia-smi: cudadoctor stops at once (exit 128+signal)
    and leaves no child behind (children run in their own sessions and never see the terminal's signal)."""
    import subprocess

    pid = faults.pidfile()
    faults.tool("nvidia-smi", f'echo $$ >> "{pid}"\nexec sleep 1000\n')
    e = dict(faults.env, CUDADOCTOR_TIMEOUT_SMI="60")
    p = subprocess.Popen([PY, "-m", "cudadoctor", "check", "--json", "--only", "driver"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=str(faults.tmp))
    deadline = time.monotonic() + 30
    while not pid.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid.exists(), "the fake nvidia-smi never started"
    time.sleep(0.3)
    t0 = time.monotonic()
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("cudadoctor did not stop within 15 s of Ctrl-C")
    took = time.monotonic() - t0
    err = err.decode("utf-8", "replace")
    assert p.returncode == 128 + sig and "Traceback" not in err, (p.returncode, err[-2000:])
    assert "interrupted" in err
    assert took < 5, f"took {took:.1f} s to stop after Ctrl-C"
    time.sleep(0.2)
    children = [int(x) for x in pid.read_text().split()]
    assert children and not [c for c in children if alive(c)], "a hung nvidia-smi was left running"



# ---------------------------------------------------------------- other commands that run the target's torch

def _hung_target(faults):
    root = fake_torch(faults.tmp / "hangtorch", "import time\nwhile True:\n    time.sleep(1)\n")
    return target_python(faults.tmp / "target", pythonpath=root)


def test_env_with_a_hung_target(faults):
    need_command("env")
    r = faults.run("env", "--json", "--python", _hung_target(faults), "--timeout", T_TORCH,
                   limit=T_TORCH + KILL_GRACE, codes=(0, 1))
    r.report()


def test_bench_with_a_hung_target(faults):
    need_command("bench")
    r = faults.run("bench", "--quick", "--json", "--python", _hung_target(faults), "--timeout", T_TORCH,
                   limit=3 * (T_TORCH + KILL_GRACE), codes=(1,))
    assert r.report()["status"] == "fail"


def test_bench_names_a_hung_torch_child(faults):
    need_command("bench")
    r = faults.run("bench", "--quick", "--json", "--python", _hung_target(faults), "--timeout", T_TORCH,
                   limit=3 * (T_TORCH + KILL_GRACE), codes=(1,))
    rep = r.report()
    said = " ".join([str(rep.get("stop_reason") or "")] + [str(n) for n in rep.get("notes") or []])
    assert "no answer" in said or "timed out" in said or "hung" in said, said


def test_libs_with_a_hung_target_still_answers(faults):
    need_command("libs")
    r = faults.run("libs", "--json", "--python", _hung_target(faults), "--timeout", T_TORCH,
                   limit=T_TORCH + KILL_GRACE, codes=(0, 1))
    r.report()


def test_libs_names_a_hung_torch_probe(faults):
    need_command("libs")
    r = faults.run("libs", "--json", "--python", _hung_target(faults), "--timeout", T_TORCH,
                   limit=T_TORCH + KILL_GRACE, codes=(0, 1))
    assert "no answer within" in r.out and r.report()["status"] != "ok"
