"""`fleet slurm` pieces on a FakeSystem: the node task's srun-safe lines, reassembly of interleaved
output, nodes that do not answer, the srun command line. (tests/test_fleet_slurm.py runs a real Slurm.)"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from fakes.system import FakeCmd, FakeSystem
from helpers import check
from scenarios import h200, nvml_answer

from cudadoctor.fleet import slurm as fs
from cudadoctor.fleet.summary import summarize
from cudadoctor.render.json_report import render_json

PY = "/usr/bin/python3"


def report_text(node: str, **kw) -> str:
    return render_json(check(h200(env={"SLURMD_NODENAME": node}, **kw)), {})


def node_system(node: str, answer: FakeCmd, time_limit: float = 60) -> FakeSystem:
    sysm = FakeSystem(env={"PATH": "/usr/bin", "SLURMD_NODENAME": node, "SLURM_PROCID": node[-1],
                           "SLURM_STEP_NODELIST": "gpu[1-3]"}, python=PY, host=f"host-{node}")
    sysm.on([PY, "-m", "cudadoctor", "check", "--json", "--timeout", f"{max(5.0, min(120.0, time_limit * 0.75)):g}"],
            answer)
    return sysm


def task_output(node: str, answer: FakeCmd, time_limit: float = 60) -> list:
    return list(fs.node_lines(node_system(node, answer, time_limit), time_limit))


def test_node_lines_are_short_and_carry_the_whole_report():
    text = report_text("gpu2")
    lines = task_output("gpu2", FakeCmd(text, returncode=0))
    assert lines[0] == "cudadoctor-fleet start gpu2 2 gpu[1-3]"
    assert all(len(ln.encode()) < 1000 for ln in lines)  # srun --label cuts lines at 1024 bytes
    col = fs.Collector()
    for ln in lines:
        col(f"1: {ln}")
    data = col.payload("gpu2")
    assert data["rc"] == 0 and json.loads(data["report"]) == json.loads(text) and data["host"] == "host-gpu2"


def _fake_srun(task_lines: dict, stderr: str = "", shuffle: bool = True, partition_nodes=None) -> FakeSystem:
    out = []
    for task, (_node, lines) in enumerate(task_lines.items()):
        out += [(i, f"{task}: {ln}") for i, ln in enumerate(lines)]
    if shuffle:  # the tasks' lines arrive interleaved, each task's in order
        random.Random(4).shuffle(out)
        out.sort(key=lambda x: x[0])
    caller = FakeSystem(env={"PATH": "/usr/bin"}, python=PY)
    caller.add_exe("/usr/bin/srun", FakeCmd("\n".join(ln for _, ln in out) + "\n", stderr=stderr,
                                            returncode=0 if not stderr else 1))
    caller.on(["scontrol", "show", "hostnames", "gpu[1-3]"], FakeCmd("gpu1\ngpu2\ngpu3\n"))
    caller.add_exe("/usr/bin/scontrol")
    if partition_nodes is not None:
        caller.on(["sinfo", "-h", "-N", "-o", "%N %t %P", "--partition=debug"], FakeCmd(partition_nodes))
        caller.add_exe("/usr/bin/sinfo")
    return caller


def test_collect_reassembles_interleaved_nodes_and_names_silent_ones():
    lines = {
        "gpu1": task_output("gpu1", FakeCmd(report_text("gpu1"))),
        "gpu2": task_output("gpu2", FakeCmd(report_text("gpu2", nvml=FakeCmd(nvml_answer(driver_version="580.173"))),
                                            returncode=1)),
    }
    stderr = "2: cudadoctor: command not found\nsrun: error: gpu3: task 2: Exited with exit code 127\n"
    caller = _fake_srun(lines, stderr)
    p = fs.plan(caller, nodes=3, time_limit=60)
    records, reports, meta = fs.collect(caller, p)
    by = {r.node: r for r in records}
    assert sorted(by) == ["gpu1", "gpu2", "gpu3"]
    assert by["gpu1"].answered and by["gpu2"].answered and sorted(reports) == ["gpu1", "gpu2"]
    assert by["gpu2"].values["driver"] == "580.173"
    assert not by["gpu3"].answered
    assert by["gpu3"].reason == "did not answer: Exited with exit code 127 (cudadoctor: command not found)"
    s = summarize(records, source="slurm", meta=meta)
    assert [r.node for r in s.silent] == ["gpu3"] and s.exit_code == 1


def test_check_that_hangs_on_a_node_is_reported_as_not_finishing():
    lines = {"gpu1": task_output("gpu1", FakeCmd(report_text("gpu1"))),
             "gpu2": task_output("gpu2", FakeCmd(hang=True), time_limit=30),
             "gpu3": task_output("gpu3", FakeCmd("Traceback ...\nImportError: no module named typer\n",
                                                 returncode=1))}
    caller = _fake_srun(lines)
    records, _, _ = fs.collect(caller, fs.plan(caller, nodes=3, time_limit=30))
    by = {r.node: r for r in records}
    assert by["gpu1"].answered
    assert not by["gpu2"].answered and "did not finish within 30 s" in by["gpu2"].reason
    assert not by["gpu3"].answered and "gave no report" in by["gpu3"].reason and "ImportError" in by["gpu3"].reason


def test_started_but_cut_off_and_garbled_nodes():
    full = task_output("gpu1", FakeCmd(report_text("gpu1")))
    cut = task_output("gpu2", FakeCmd(report_text("gpu2")))[:2]  # start and one chunk of several
    bad = task_output("gpu3", FakeCmd(report_text("gpu3")))
    bad = bad[:1] + ["cudadoctor-fleet data gpu3 1/1 bm90IHpsaWI="]
    caller = _fake_srun({"gpu1": full, "gpu2": cut, "gpu3": bad})
    records, _, _ = fs.collect(caller, fs.plan(caller, nodes=3, time_limit=60))
    by = {r.node: r for r in records}
    assert by["gpu1"].answered
    assert by["gpu2"].reason.startswith("started, but")
    assert by["gpu3"].reason == "its output came back garbled"


def test_no_task_started_is_an_error_with_srun_s_words():
    caller = _fake_srun({}, stderr="srun: error: Unable to allocate resources: Invalid partition name specified\n")
    with pytest.raises(fs.SlurmError, match="Invalid partition name"):
        fs.collect(caller, fs.plan(caller, nodes=2, time_limit=60))


def test_plan_uses_every_usable_node_of_the_partition_and_lists_the_others():
    sinfo = "gpu1 idle debug\ngpu2 mix debug\ngpu3 drain debug\ngpu4 down* debug\ngpu5 idle* debug\n"
    caller = _fake_srun({}, partition_nodes=sinfo)
    p = fs.plan(caller, partition="debug", time_limit=100, extra=("--account=ops",), python="/opt/venv/bin/python")
    assert p.nodes == 2 and p.expected == ["gpu1", "gpu2"]
    assert p.unavailable == [("gpu3", "drain"), ("gpu4", "down*"), ("gpu5", "idle*")]
    a = p.argv
    assert a[0] == "srun" and "--nodes=2" in a and "--ntasks-per-node=1" in a and "--label" in a
    assert "--time=3" in a and "--partition=debug" in a and "--account=ops" in a
    assert a[a.index("--account=ops") + 1:] == ["cudadoctor", "fleet", "node", "--time-limit", "100",
                                                "--python", "/opt/venv/bin/python"]


def test_plan_inside_an_allocation_uses_its_nodes():
    caller = _fake_srun({})
    caller.env.update({"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "gpu[1-3]"})
    p = fs.plan(caller, time_limit=60)
    assert p.nodes == 3 and p.expected == ["gpu1", "gpu2", "gpu3"] and not any(x.startswith("--partition") for x in p.argv)


def test_plan_without_srun_says_where_to_run():
    with pytest.raises(fs.SlurmError, match="srun is not on PATH"):
        fs.plan(FakeSystem(env={"PATH": "/usr/bin"}), nodes=2)


def test_cli_without_slurm_is_a_usage_error():
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "fleet", "slurm", "--nodes", "2"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PATH="/nonexistent"))
    assert p.returncode == 2 and "srun is not on PATH" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "cudadoctor", "fleet", "slurm", "stray"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PATH="/nonexistent"))
    assert p.returncode == 2 and "after `--`" in p.stderr
