"""Reports saved by cudadoctor 0.1.0 (schema 1.0; real ones from the 2x H200 machine, tests/data/h200x2)
stay readable: `check --facts` and `fleet summarize` judge them again with today's checks, and a fact an
old report lacks is "not in saved report", never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudadoctor
from cudadoctor.doctor import run_check
from cudadoctor.facts.registry import Options
from cudadoctor.facts.saved import NOT_SAVED, facts_from_report
from cudadoctor.fleet.load import load_reports
from cudadoctor.system.host import HostSystem

DATA = Path(__file__).parent / "data"
RECON = DATA / "h200x2"


def saved(name: str) -> dict:
    return json.loads((RECON / name).read_text())


def rejudged(raw: dict):
    from fakes.system import FakeSystem

    return run_check(FakeSystem(), Options(), given_facts=facts_from_report(raw), source="facts file x")


def by_id(report) -> dict:
    return {f.id: f for s in report.steps for f in s.findings}


def step_status(report) -> dict:
    return {s.id: s.status.value for s in report.steps}


def test_the_reports_are_0_1_0s():
    for name in ("healthy_check.json", "c13_alloc_check.json", "c13_cudnn_check.json", "c13_oom_check.json"):
        raw = saved(name)
        assert (raw["tool_version"], raw["schema_version"]) == ("0.1.0", "1.0"), name


def test_old_alloc_report_attributes_the_death_to_the_op():
    raw = saved("c13_alloc_check.json")
    assert raw["facts"]["torch"]["state"] == "failed"  # 0.1.0's view: the whole probe failed
    r = rejudged(raw)
    st = step_status(r)
    assert st["torch.cuda"] == "ok" and st["device.capability"] == "ok" and st["torch.op"] == "fail"
    f = by_id(r)
    assert "torch.cuda.probe-crashed" not in f and "device.capability.unknown" not in f
    crash = f["torch.op.crashed"]
    assert "SIGSEGV" in crash.summary and crash.evidence["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:maybe"
    assert [s for s in r.steps if s.id == "device.capability"][0].summary.startswith("2× NVIDIA H200")


def test_old_cudnn_report_fails_the_shadow():
    r = rejudged(saved("c13_cudnn_check.json"))
    f = by_id(r)
    assert f["libs.shadows-older"].status.value == "fail"
    assert "cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0)" in f["libs.shadows-older"].summary
    assert f["matrix.cudnn.older-than-torch"].status.value == "fail"
    assert "matrix.cudnn.not-loaded" not in f
    assert r.exit_code == 1


def test_old_oom_report_names_the_holder_without_a_process_table():
    r = rejudged(saved("c13_oom_check.json"))
    f = by_id(r)
    oom = f["torch.op.out-of-memory"]
    assert "PID 2662" in oom.summary and NOT_SAVED in oom.summary
    assert any(c.startswith("ps -o pid,user,comm -p 2662") for c in oom.fix.commands)
    assert f["health.gpu-memory-full"].status.value == "warn"


def test_old_healthy_report_stays_green():
    r = rejudged(saved("healthy_check.json"))
    assert r.exit_code == 0, [(f.id, f.status.value) for s in r.steps for f in s.findings if f.status.value != "ok"]
    assert r.facts["gpu_processes"].error == NOT_SAVED


def test_a_report_without_the_torch_fact_is_not_misjudged():
    raw = saved("healthy_check.json")
    del raw["facts"]["torch"]
    p = cli("check", "--facts", write(raw), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    found = {f["id"]: f["status"] for s in json.loads(p.stdout)["steps"] for f in s["findings"]}
    assert found["torch.cuda.not-in-saved-report"] == "skip" and found["torch.op.not-in-saved-report"] == "skip"
    assert found["driver.ok"] == "ok"


def write(raw: dict, name: str = "r.json") -> str:
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(raw, f, indent=2)
    return path


def cli(*args):
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "cudadoctor", *args], capture_output=True, text=True, env=env,
                          timeout=180)


@pytest.mark.parametrize("name,code,fail", [
    ("c13_alloc_check.json", 1, "torch.op.crashed"),
    ("c13_cudnn_check.json", 1, "libs.shadows-older"),
    ("c13_oom_check.json", 1, "torch.op.out-of-memory"),
    ("healthy_check.json", 0, ""),
])
def test_check_facts_on_0_1_0_reports(name, code, fail):
    p = cli("check", "--facts", str(RECON / name), "--json")
    assert p.returncode == code, p.stderr
    rep = json.loads(p.stdout)
    assert rep["schema_version"] == "1.1"
    problems = {f["id"] for s in rep["steps"] for f in s["findings"] if f["status"] == "fail"}
    assert (fail in problems) if fail else not problems
    assert "Traceback" not in p.stderr


def test_fleet_summarize_judges_old_reports_again(tmp_path, monkeypatch):
    for n, name in enumerate(("healthy_check.json", "c13_alloc_check.json", "c13_cudnn_check.json")):
        raw = saved(name)
        raw["node"] = f"gpu{n}"
        (tmp_path / f"gpu{n}.json").write_text(json.dumps(raw, indent=2))
    records, bad = load_reports(HostSystem(), [str(tmp_path)], jobs=1)
    assert not bad
    rec = {r.node: r for r in records}
    assert all(r.rejudged_from == "0.1.0" for r in records)
    problems = {n: {p["id"] for p in r.problems if p["status"] == "fail"} for n, r in rec.items()}
    assert problems["gpu0"] == set()
    assert "torch.op.crashed" in problems["gpu1"] and "torch.cuda.probe-crashed" not in problems["gpu1"]
    assert "libs.shadows-older" in problems["gpu2"]
    assert rec["gpu2"].values["cudnn"] == "none"  # 0.1.0 recorded no cuDNN version for the shadowed node


def test_a_report_of_this_version_keeps_its_verdicts(tmp_path, monkeypatch):
    raw = saved("c13_alloc_check.json")
    raw["schema_version"] = "1.1"
    (tmp_path / "a.json").write_text(json.dumps(raw, indent=2))
    records, _ = load_reports(HostSystem(), [str(tmp_path)], jobs=1)
    assert records[0].rejudged_from == ""
    assert "torch.cuda.probe-crashed" in {p["id"] for p in records[0].problems}
    monkeypatch.setattr(cudadoctor, "__version__", "9.9.9")  # a newer cudadoctor reading a 0.1.0 report
    records, _ = load_reports(HostSystem(), [str(tmp_path)], jobs=1)
    assert records[0].rejudged_from == "0.1.0"
    assert "torch.cuda.probe-crashed" not in {p["id"] for p in records[0].problems}


def test_fleet_console_says_reports_were_judged_again(tmp_path):
    (tmp_path / "n.json").write_text((RECON / "c13_oom_check.json").read_text())
    p = cli("fleet", "summarize", str(tmp_path))
    assert "judged again" in p.stdout and "torch.op.out-of-memory" in p.stdout, p.stdout + p.stderr


def test_fleet_cudnn_column_falls_back_to_the_loaded_cudnn():
    from cudadoctor.fleet.node import from_report

    raw = saved("c13_cudnn_check.json")
    raw["facts"]["torch"]["value"]["cudnn"] = {"available": True, "compiled": "9.19.0", "runtime": "9.14.0",
                                               "version": None, "version_error": "RuntimeError: cuDNN version ..."}
    assert from_report(raw).values["cudnn"] == "9.14.0"
    assert from_report(saved("healthy_check.json")).values["cudnn"] == "9.19.0"
