"""`cudadoctor health`, the real CLI, against a hung NVML and a hung cuInit (fake driver libraries built here):
it ends at its own --timeout with a verdict, never a traceback, and leaves no child behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import fakelibs
import pytest
from faultkit import KILL_GRACE, PY
from fakes import libcuda_health

T = 3.0  # health --timeout in these cases


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    if not fakelibs.compiler():
        pytest.skip("no C compiler to build fake driver libraries")
    d = tmp_path_factory.mktemp("fakedriver")
    fakelibs.build(d, "libnvidia-ml.so.1", fakelibs.NVML_C)
    libcuda_health.build_libcuda(d)
    return d


def test_nvml_and_cuinit_both_hang(faults, fake_driver):
    env = {"LD_LIBRARY_PATH": str(fake_driver), "FAKE_NVML": "hang", "FAKE_CUINIT": "hang"}
    # both children run at once: the whole run takes one timeout, not two
    r = faults.run("health", "--json", "--timeout", str(T), limit=T + KILL_GRACE, codes=(1,), env=env)
    assert r.findings()["driver.nvml-hang"] == "fail"
    assert r.fact("health_nvml")["state"] == "timeout"
    launch = r.fact("health_launch")["value"]
    assert launch["timed_out"] and "initialising CUDA (cuInit)" in launch["stopped"]
    assert r.report()["reason"].startswith("unhealthy: driver.nvml-hang")


def test_quiet_verdict_of_a_hung_nvml(faults, fake_driver):
    r = faults.run("health", "--quiet", "--timeout", str(T), limit=T + KILL_GRACE, codes=(1,),
                   env={"LD_LIBRARY_PATH": str(fake_driver), "FAKE_NVML": "hang"})
    assert r.out.startswith("unhealthy: driver.nvml-hang: NVML gave no answer within 3 s") and r.out.count("\n") == 1


def test_sigterm_stops_health_and_its_children(faults, fake_driver):
    env = dict(faults.env, LD_LIBRARY_PATH=str(fake_driver), FAKE_NVML="hang", FAKE_CUINIT="hang")
    p = subprocess.Popen([PY, "-m", "cudadoctor", "health", "--timeout", "60"], env=env, cwd=str(faults.tmp),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGTERM and time.monotonic() - t0 < 5, err
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"health_launch.py|nvml_health.*{faults.tmp}"], capture_output=True,
                          text=True).stdout.split()
    mine = [pid for pid in left if _env_of(pid).get("CUDADOCTOR_CACHE_DIR") == str(faults.cache)]
    for pid in mine:
        os.kill(int(pid), signal.SIGKILL)
    assert not mine, f"children left behind: {mine}"


def _env_of(pid: str) -> dict:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return {}
    return dict(x.decode(errors="replace").split("=", 1) for x in raw if b"=" in x)
