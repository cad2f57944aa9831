"""The report as a contract: cudadoctor/schema/report-1.json validates every report cudadoctor makes
(this machine's, the FakeSystem scenarios', the recorded H200 one), rejects broken ones, and
`check --facts FILE` re-judges a saved report offline, keeping the node it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.system import FakeCmd
from helpers import check, ids, status
from scenarios import h200, nvml_answer, torch_stages

from cudadoctor.facts.registry import facts_from_dict
from cudadoctor.model import SCHEMA_ID, SCHEMA_VERSION
from cudadoctor.render.json_report import render_json
from cudadoctor.schema import REPORT_SCHEMA_FILE, report_schema

jsonschema = pytest.importorskip("jsonschema")
DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def validator():
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator, report: dict) -> list:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator.iter_errors(report)]


def scenarios() -> dict:
    no_driver = dict(smi=False, proc=False, nvml=FakeCmd('{"error": "NVML_ERROR_LIBRARY_NOT_FOUND", "message": "x"}'),
                     torch=FakeCmd(torch_stages(available=False, init_error="RuntimeError: Found no NVIDIA driver")))
    return {
        "healthy": h200(),
        "no-driver": h200(**no_driver),
        "smi-hangs": h200(smi=FakeCmd(hang=True)),
        "nvml-mismatch": h200(smi=FakeCmd("Failed to initialize NVML: Driver/library version mismatch\n"
                                          "NVML library version: 580.173\n", returncode=18),
                              nvml=FakeCmd('{"error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "message": "m"}')),
        "module-vs-library": h200(nvml=FakeCmd(nvml_answer(driver_version="580.173"))),
        "torch-missing": h200(torch=FakeCmd(torch_stages(not_installed=True))),
        "cpu-only": h200(torch=FakeCmd(torch_stages(version="2.13.0+cpu", cuda=None, available=False, arch=[]))),
        "torch-segv": h200(torch=FakeCmd(torch_stages(upto="import"), returncode=-11)),
        "hidden-devices": h200(env={"CUDA_VISIBLE_DEVICES": ""},
                               torch=FakeCmd(torch_stages(available=False, visible="", init_error=""))),
        "no-nvcc": h200(nvcc=False, env={"CUDA_HOME": None}),
        "old-nvcc": h200(nvcc=FakeCmd("Cuda compilation tools, release 12.4, V12.4.131\n")),
    }


def report_dict(report) -> dict:
    return json.loads(render_json(report, {}))


def test_schema_ships_in_the_package_and_matches_the_model():
    assert REPORT_SCHEMA_FILE.parent.parent.name == "cudadoctor"  # inside the package: in the wheel
    schema = report_schema()
    assert schema["$id"] == SCHEMA_ID
    assert schema["properties"]["schema_version"]["pattern"] == "^1\\.[0-9]+$"
    assert SCHEMA_VERSION.startswith("1.")


@pytest.mark.parametrize("name", sorted(scenarios()))
def test_every_scenario_report_validates(validator, name):
    fs = scenarios()[name]
    fs.hang_sleep = 0.0
    rep = report_dict(check(fs, timeout_smi=0.2, timeout_torch=0.5))
    assert errors(validator, rep) == []
    assert rep["node"] == fs.host and rep["host"] == fs.host


def test_node_name_comes_from_slurm_or_the_explicit_variable(validator):
    fs = h200(env={"SLURMD_NODENAME": "gpu017"})
    rep = report_dict(check(fs, only=["driver"]))
    assert rep["node"] == "gpu017" and rep["host"] == fs.host
    fs = h200(env={"SLURMD_NODENAME": "gpu017", "CUDADOCTOR_NODE_NAME": "k8s-node-3"})
    assert report_dict(check(fs, only=["driver"]))["node"] == "k8s-node-3"


def test_recorded_h200_report_validates(validator):
    rep = json.loads((DATA / "h200" / "cudadoctor_check.json").read_text())
    assert errors(validator, rep) == []


def test_real_check_json_on_this_machine_validates(validator):
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "check", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    assert errors(validator, rep) == []
    assert rep["host"] and rep["node"]


def test_schema_rejects_broken_reports(validator):
    rep = report_dict(check(h200(torch=FakeCmd(torch_stages(version="2.13.0+cpu", cuda=None, available=False,
                                                               arch=[])))))
    assert errors(validator, rep) == []
    bad = json.loads(json.dumps(rep))
    f = [f for s in bad["steps"] for f in s["findings"] if f["status"] == "fail"][0]
    f["fix"] = None  # a failure without a fix breaks the contract
    assert errors(validator, bad)
    bad = json.loads(json.dumps(rep))
    bad["steps"][0]["status"] = "broken"
    assert errors(validator, bad)
    bad = json.loads(json.dumps(rep))
    bad["facts"]["torch"]["state"] = "maybe"
    assert errors(validator, bad)
    bad = json.loads(json.dumps(rep))
    bad["schema_version"] = "2.0"
    assert errors(validator, bad)
    bad = json.loads(json.dumps(rep))
    del bad["facts"]
    assert errors(validator, bad)


# ------------------------------------------------------------------ check --facts: re-judging offline


@pytest.mark.parametrize("name", sorted(scenarios()))
def test_saved_facts_rejudge_to_the_same_verdicts(name):
    fs = scenarios()[name]
    first = check(fs, timeout_smi=0.2, timeout_torch=0.5)
    saved = report_dict(first)
    from cudadoctor.doctor import run_check
    from cudadoctor.facts.registry import Options

    again = run_check(h200(), Options(), given_facts=facts_from_dict(saved["facts"]), source="facts file x")
    assert ids(again) == ids(first)
    assert status(again) == status(first)
    assert again.exit_code == first.exit_code


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "cudadoctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, NO_COLOR="1"))


def test_check_facts_cli_rejudges_another_machines_report(tmp_path, validator):
    # the recorded healthy H200 report, re-judged on this GPU-less machine, is still healthy
    src = json.loads((DATA / "h200" / "cudadoctor_check.json").read_text())
    src["host"], src["node"] = "h200-box", "gpu042"
    path = tmp_path / "gpu042.json"
    path.write_text(json.dumps(src, indent=2))
    p = _cli("check", "--facts", str(path), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert errors(validator, rep) == []
    assert rep["source"].startswith("facts file") and rep["node"] == "gpu042" and rep["host"] == "h200-box"
    st = {s["id"]: s["status"] for s in rep["steps"]}
    assert st["driver"] == "ok" and st["torch.cuda"] == "ok" and st["torch.op"] == "ok"


def test_check_facts_without_a_primary_fact_does_not_judge_that_step(tmp_path):
    src = json.loads((DATA / "h200" / "cudadoctor_check.json").read_text())
    del src["facts"]["torch"]  # e.g. a report made with --only driver
    path = tmp_path / "r.json"
    path.write_text(json.dumps(src))
    rep = json.loads(_cli("check", "--facts", str(path), "--json").stdout)
    steps = {s["id"]: s for s in rep["steps"]}
    assert steps["driver"]["status"] == "ok"
    assert steps["torch.cuda"]["status"] == "skip"
    assert [f["id"] for f in steps["torch.cuda"]["findings"]] == ["torch.cuda.not-in-saved-report"]
    assert "torch.cuda.not-installed" not in {f["id"] for s in rep["steps"] for f in s["findings"]}


@pytest.mark.parametrize("content,needle", [
    (None, "No such file"),
    ("{", "not JSON"),
    ("[1, 2]", "not a cudadoctor report"),
    ('{"tool": "cudadoctor"}', "not a cudadoctor report"),
])
def test_check_facts_bad_file_is_a_usage_error(tmp_path, content, needle):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    p = _cli("check", "--facts", str(path), "--json")
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_check_facts_survives_hand_edited_values(tmp_path):
    src = json.loads((DATA / "h200" / "cudadoctor_check.json").read_text())
    src["facts"]["torch"]["value"] = "garbage"
    src["facts"]["nvml"]["state"] = "maybe"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(src))
    p = _cli("check", "--facts", str(path), "--json")
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    assert all(s["status"] != "error" for s in rep["steps"]), [s for s in rep["steps"] if s["status"] == "error"]
