"""`cudadoctor explain` end to end through the CLI (offline or with facts stubbed)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudadoctor.cli import app
from cudadoctor.explain import personal

RUNNER = CliRunner()
ARCH_LOG = ("loading model\nNVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
            "PyTorch installation.\nRuntimeError: CUDA error: no kernel image is available for execution on the device\n")


@pytest.fixture
def no_machine(monkeypatch):
    asked = []

    def fake_gather(names, system=None, opts=None):
        asked.append(list(names))
        return {}

    monkeypatch.setattr(personal, "gather", fake_gather)
    return asked


def run(*args, stdin=None):
    return RUNNER.invoke(app, ["explain", *args], input=stdin)


def test_text_json_best_first(no_machine):
    r = run("--json", ARCH_LOG)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [m["id"] for m in d["matches"]] == ["torch-arch-unsupported", "no-kernel-image"]
    top = d["matches"][0]
    assert {"id", "title", "confidence", "meaning", "causes", "confirm", "fixes", "docs"} <= set(top)
    assert top["confidence"] >= 0.9 and top["captures"]["sm"] == "sm_120"
    assert "torch" in no_machine[0]


def test_offline_gathers_nothing(no_machine):
    r = run("--offline", "--json", ARCH_LOG)
    assert r.exit_code == 0 and no_machine == []
    assert json.loads(r.stdout)["offline"] is True


def test_oom_does_not_ask_for_torch(no_machine):
    r = run("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")
    assert r.exit_code == 0
    assert no_machine and "torch" not in no_machine[0]


def test_stdin_and_file(no_machine, tmp_path):
    r = run("--offline", "--json", "-", stdin="noise\nFailed to initialize NVML: Driver/library version mismatch\n")
    assert r.exit_code == 0 and json.loads(r.stdout)["matches"][0]["id"] == "nvml-driver-mismatch"
    log = tmp_path / "train.log"
    log.write_bytes(b"\xff\xfe junk\n" * 1000 + b"ERR_NVGPUCTRPERM - The user does not have permission\n")
    r = run("--offline", "--json", "--file", str(log))
    assert r.exit_code == 0 and json.loads(r.stdout)["matches"][0]["id"] == "profiler-permission"


def test_not_recognised_exit_1_with_closest(no_machine):
    r = run("--offline", "--json", "my cuda kernel image looks odd")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["matches"] == [] and d["closest"][0]["id"] == "no-kernel-image"
    r = run("--offline", "nothing to see here")
    assert r.exit_code == 1


@pytest.mark.parametrize("args,stdin", [((), None), (("   ",), None), (("-",), ""), (("-",), "\n \n")])
def test_empty_input_is_usage_error(no_machine, args, stdin):
    r = run(*args, stdin=stdin)
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_bad_file_and_conflicting_args(no_machine, tmp_path):
    assert run("--file", str(tmp_path / "missing.log")).exit_code == 2
    f = tmp_path / "a.log"
    f.write_text("x")
    assert run("--file", str(f), "also text").exit_code == 2


def test_list(no_machine):
    r = run("--list", "--json")
    assert r.exit_code == 0
    ids = [s["id"] for s in json.loads(r.stdout)["signatures"]]
    assert len(ids) >= 29 and "driver-install" in ids
    r = run("--list")
    assert r.exit_code == 0 and "nvml-unknown-error" in r.stdout


def test_human_output_lists_every_match(no_machine):
    r = run("--offline", ARCH_LOG)
    assert r.exit_code == 0
    assert "[torch-arch-unsupported," in r.stdout and "[no-kernel-image," in r.stdout
    assert r.stdout.index("torch-arch-unsupported") < r.stdout.index("[no-kernel-image")


def test_startup_imports_nothing_heavy():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "cudadoctor", "explain", "--offline",
                        "no kernel image is available"], capture_output=True, timeout=60, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    mods = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    heavy = {m for m in mods if m.split(".")[0] in ("torch", "pynvml", "numpy", "pydantic")
             or m in ("rich.console", "rich.table")}
    assert not heavy, heavy
