"""health's outputs: Prometheus text (read back with prometheus_client's own parser), the JSON report
(against the report schema), the text, the one-line reason; and the real CLI on this machine."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from fakes import nvml_health
from health_scenarios import h200x2, xid_line

from cudadoctor.facts.health_types import HealthExpect
from cudadoctor.health import run_health
from cudadoctor.render.health_text import health_dict, render_health_text
from cudadoctor.render.prometheus import render_prometheus

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is in the test extra")


def samples(text: str) -> dict:
    """(name, frozenset of labels) -> value, through prometheus_client's parser."""
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def gpu_labels(i: int, **more) -> frozenset:
    return frozenset({"gpu": str(i), "uuid": nvml_health.UUIDS[i], "model": "NVIDIA H200", **more}.items())


def test_prometheus_for_the_healthy_pair_parses_and_labels_each_gpu():
    run = run_health(h200x2(), HealthExpect(gpus=2))
    s = samples(render_prometheus(run, now=1_800_000_000.0))
    assert s[("cudadoctor_health_status", frozenset())] == 0
    assert s[("cudadoctor_health_gpus", frozenset())] == 2 and s[("cudadoctor_health_expected_gpus", frozenset())] == 2
    assert s[("cudadoctor_health_last_run_timestamp_seconds", frozenset())] == 1_800_000_000.0
    assert s[("cudadoctor_health_check_status", frozenset({"check": "launch"}.items()))] == 0
    assert s[("cudadoctor_health_gpu_temperature_celsius", gpu_labels(1))] == 39
    assert s[("cudadoctor_health_gpu_slowdown_temperature_celsius", gpu_labels(0))] == 89
    assert s[("cudadoctor_health_gpu_ecc_uncorrected_errors", gpu_labels(0, counter="volatile"))] == 0
    assert s[("cudadoctor_health_gpu_nvlinks_active", gpu_labels(0))] == 18
    assert s[("cudadoctor_health_gpu_launch_ok", gpu_labels(1))] == 1
    assert s[("cudadoctor_health_gpu_launch_seconds", gpu_labels(0))] == pytest.approx(0.00004)
    assert s[("cudadoctor_health_gpu_clock_event_active", gpu_labels(0, reason="gpu_idle"))] == 1
    assert s[("cudadoctor_health_gpu_clock_event_active", gpu_labels(0, reason="hw_slowdown"))] == 0
    assert s[("cudadoctor_health_gpu_xid_events", gpu_labels(0))] == 0
    for check in ("driver", "memory", "xid", "clocks", "nvlink", "launch"):
        assert s[("cudadoctor_health_gpu_check_status", gpu_labels(1, check=check))] == 0


def test_prometheus_for_a_faulty_gpu():
    gs = nvml_health.dump_gpus()
    gs[1].update(ecc_UNCORRECTED_VOLATILE_ECC=3, remapped_rows=[0, 2, 1, 0], throttle=0x1 | 0x8 | 0x80)
    run = run_health(h200x2(gs, dmesg=xid_line(79, "0000:00:07") * 2 + xid_line(13, "0000:00:07")), HealthExpect())
    s = samples(render_prometheus(run))
    assert s[("cudadoctor_health_status", frozenset())] == 1
    assert s[("cudadoctor_health_check_status", frozenset({"check": "xid"}.items()))] == 2
    assert s[("cudadoctor_health_gpu_check_status", gpu_labels(1, check="xid"))] == 2
    assert s[("cudadoctor_health_gpu_check_status", gpu_labels(0, check="xid"))] == 0  # GPU 0 had none
    assert s[("cudadoctor_health_gpu_check_status", gpu_labels(1, check="memory"))] == 1
    assert s[("cudadoctor_health_gpu_xid_events", gpu_labels(1))] == 3
    assert s[("cudadoctor_health_gpu_xid_events_by_code", gpu_labels(1, xid="79"))] == 2
    assert s[("cudadoctor_health_gpu_ecc_uncorrected_errors", gpu_labels(1, counter="volatile"))] == 3
    assert s[("cudadoctor_health_gpu_remapped_rows_pending", gpu_labels(1))] == 1
    assert s[("cudadoctor_health_gpu_clock_event_active", gpu_labels(1, reason="hw_power_brake_slowdown"))] == 1


def test_prometheus_label_values_are_escaped():
    gs = nvml_health.dump_gpus()
    gs[0]["name"] = 'NVIDIA "H200"\\ new\nline'
    text = render_prometheus(run_health(h200x2(gs), HealthExpect()))
    s = samples(text)
    assert s[("cudadoctor_health_gpu_temperature_celsius", frozenset(
        {"gpu": "0", "uuid": nvml_health.UUIDS[0], "model": 'NVIDIA "H200"\\ new\nline'}.items()))] == 38


def test_prometheus_with_a_wedged_nvml_still_parses():
    from fakes.system import FakeCmd

    run = run_health(h200x2(nvml=FakeCmd(hang=True)), HealthExpect(), timeout=2)
    s = samples(render_prometheus(run))
    assert s[("cudadoctor_health_status", frozenset())] == 1
    assert s[("cudadoctor_health_check_status", frozenset({"check": "memory"}.items()))] == -1


def test_the_json_report_follows_the_report_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from cudadoctor.schema import report_schema

    run = run_health(h200x2(dmesg=xid_line(95)), HealthExpect(gpus=2))
    d = json.loads(json.dumps(health_dict(run)))
    jsonschema.Draft202012Validator(report_schema()).validate(d)
    assert d["command"] == "health" and d["exit_code"] == 1 and d["reason"] == "unhealthy: health.xid 95 on GPU 0"
    assert d["node"] == "gpu7" and {"health_nvml", "health_launch", "xid", "kernel_module"} <= set(d["facts"])


def test_text_output_names_each_problem_with_its_fix(capsys):
    run = run_health(h200x2(dmesg=xid_line(119)), HealthExpect())
    render_health_text(run, {})
    out = capsys.readouterr().out
    assert "✗ 6 Xid events: Xid 119 (GSP_RPC_TIMEOUT) on GPU 0 (1×)" in out and "(health.xid)" in out
    assert "sudo nvidia-smi -r -i 0" in out
    assert out.rstrip().endswith("exit 1]") and "unhealthy: health.xid 119 on GPU 0" in out


# ------------------------------------------------------------------ the real CLI, on this machine


def cli(*args, env=None, timeout=120):
    e = dict(os.environ, NO_COLOR="1")
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "health", *args], capture_output=True, text=True,
                       timeout=timeout, env=e)
    return p, time.monotonic() - t0


def test_cli_on_this_machine_gives_a_verdict_and_never_a_traceback():
    p, _ = cli("--json")
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr
    d = json.loads(p.stdout)
    assert d["command"] == "health" and d["exit_code"] == p.returncode
    q, _ = cli("--quiet")
    assert q.returncode == p.returncode and len(q.stdout.strip().splitlines()) == 1
    assert q.stdout.split(":")[0] in ("healthy", "unhealthy", "cannot tell")


def test_cli_writes_prometheus_and_json_files_atomically_for_other_readers(tmp_path):
    prom, saved = tmp_path / "textfile" / "cudadoctor.prom", tmp_path / "health.json"
    prom.parent.mkdir()  # node_exporter's --collector.textfile.directory exists already
    p, _ = cli("--quiet", "--prometheus", str(prom), "--save", str(saved))
    assert p.returncode in (0, 1, 2), p.stderr
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644  # node_exporter reads it as another user
    assert samples(prom.read_text())[("cudadoctor_health_status", frozenset())] == p.returncode
    assert json.loads(saved.read_text())["exit_code"] == p.returncode
    assert sorted(os.listdir(prom.parent)) == ["cudadoctor.prom"]  # no temporary file left behind
    s, _ = cli("--prometheus")
    assert s.stdout.startswith("# HELP cudadoctor_health_status")


@pytest.mark.parametrize("args,text", [
    (["--expect-gpus", "two"], "not a GPU count"),
    (["--timeout", "0"], "more than 0 seconds"),
    (["--json", "--quiet"], "not allowed with"),
    (["--json", "--prometheus"], "cannot go with --json"),
    (["--bogus"], "unrecognized arguments"),
])
def test_cli_usage_errors_exit_2_with_one_line(args, text):
    p, _ = cli(*args)
    assert p.returncode == 2 and text in p.stderr and "Traceback" not in p.stderr and p.stdout == ""


def test_cli_cannot_write_the_prometheus_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    p, _ = cli("--quiet", "--prometheus", str(target / "x.prom"))
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr


def test_health_imports_nothing_heavy():
    """health runs before every job: no torch, pynvml (the NVML child has it), typer, click or rich."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "cudadoctor", "health", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1, 2), p.stderr[-2000:]
    mods = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    heavy = {m for m in mods if m.split(".")[0] in ("torch", "pynvml", "numpy", "typer", "click", "rich")}
    assert not heavy, heavy


def test_help_lists_health_and_its_options():
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "--help"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, NO_COLOR="1", COLUMNS="200"))
    assert "health" in p.stdout
    h, _ = cli("--help")
    assert h.returncode == 0 and "--expect-gpus" in h.stdout and "--prometheus" in h.stdout


def test_cli_creates_no_folder_for_its_output(tmp_path):
    # cudadoctor writes only where it is told, and creates nothing else outside its cache: a missing folder
    # is an error (it made /nonexistent/dir once, 2026-11-30)
    prom = tmp_path / "no" / "such" / "x.prom"
    p, _ = cli("--quiet", "--prometheus", str(prom))
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "no").exists()
