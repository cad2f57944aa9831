"""A non-editable install carries matrix/ and probe_kernels/ and finds them from the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"cannot build a wheel here (no network for hatchling?): {p.stderr[-300:]}")
    return next(out.glob("cudadoctor-*.whl"))


@pytest.mark.slow
def test_wheel_carries_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for toml in (ROOT / "matrix").glob("*.toml"):
        assert f"cudadoctor/_data/matrix/{toml.name}" in names
    for cu in (ROOT / "probe_kernels").glob("*.cu"):
        assert f"cudadoctor/_data/probe_kernels/{cu.name}" in names
    assert "cudadoctor/child/torch_probe.py" in names
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.slow
def test_installed_wheel_finds_its_data(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = ("from cudadoctor.paths import data_dir; from cudadoctor.matrix import load; "
            "print(data_dir('matrix')); print(data_dir('probe_kernels')); print(load().arch_name((9, 0)))")
    env = dict(os.environ, PYTHONPATH=str(target))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0].startswith(str(target)) and lines[1].startswith(str(target))
    assert lines[-1] == "Hopper"


@pytest.mark.slow
def test_installed_wheel_runs_health_and_its_launch_child(wheel, tmp_path):
    """As on the GPU machine (pip install --target /tmp/site, PYTHONPATH): `python -m cudadoctor health`
    dispatches without typer, and the launch child, started `-I -S` (no PYTHONPATH, no site), still finds
    cudadoctor's driver-API binding next to itself and the PTX in the wheel's data."""
    assert "cudadoctor/_data/probe_kernels/health.ptx" in zipfile.ZipFile(wheel).namelist()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=str(target))
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "health", "--quiet"], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path), timeout=120)
    assert p.returncode in (0, 1, 2) and p.stdout.split(":")[0] in ("healthy", "unhealthy", "cannot tell"), p.stderr
    code = "from cudadoctor.facts.health_launch import launch_argv; import json, sys; print(json.dumps(launch_argv(sys.executable)))"
    argv = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                     cwd=str(tmp_path), timeout=60).stdout)
    assert argv[3].startswith(str(target)) and argv[4].startswith(str(target)) and argv[4].endswith("health.ptx")
    child = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                           env={"LD_LIBRARY_PATH": str(tmp_path / "nothing")})
    assert '"stage": "init"' in child.stdout and "Traceback" not in child.stderr, child.stderr
