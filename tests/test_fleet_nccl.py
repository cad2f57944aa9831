"""`fleet nccl` pieces on FakeSystems: the rank task's srun-safe lines and environment, reading the tasks'
lines back into one run, naming the silent or slow node with pairs, the srun command line.
(tests/test_fleet_slurm.py runs it on a real 3-node Slurm with the gloo backend.)"""

from __future__ import annotations

import json

from fakes.system import FakeCmd, FakeSystem
from multigpu_scenarios import rank_records, rec

from cudadoctor.fleet import nccl as fn
from cudadoctor.fleet.render import render_nccl
from cudadoctor.probes.nccl_run import MARK, RANK_SCRIPT, NcclRun

PY = "/usr/bin/python3"


def rank_stdout(rank: int, node: str, ok: bool = True, upto=("rendezvous", "init", "collective", "measure")) -> str:
    recs = [r for r in rank_records(rank, f"0000:0{rank}:00.0", upto) if r["stage"] != "start"]
    recs.insert(0, rec(rank, "start", host=node, python=PY, backend="gloo", error="x" * 5000))
    if ok:
        recs.append(rec(rank, "measure", coll="all_reduce", bytes=1 << 20, time_us=900.0, algbw=1.1, busbw=1.4))
        recs.append(rec(rank, "done", ok=True))
    lines = [f"{MARK} {json.dumps({k: v for k, v in r.items() if k != 'rank'})}" for r in recs]
    lines.insert(2, f"{node}:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0")
    return "\n".join(lines) + "\n"


def task(node: str, rank: int, world: int = 3, answer: FakeCmd = None, limit: float = 60) -> tuple:
    s = FakeSystem(env={"PATH": "/usr/bin", "SLURMD_NODENAME": node, "SLURM_PROCID": str(rank),
                        "SLURM_NTASKS": str(world), "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "gpu[1-3]"},
                   python=PY)
    s.add_exe("/usr/bin/scontrol")
    s.on(["scontrol", "show", "hostnames", "gpu[1-3]"], FakeCmd("gpu1\ngpu2\ngpu3\n"))
    s.on(["scontrol", "show", "node", "gpu1", "-o"], FakeCmd("NodeName=gpu1 Arch=x86_64 NodeAddr=10.0.0.1 "
                                                             "NodeHostName=node-a State=IDLE\n"))
    argv = [PY, RANK_SCRIPT, "--backend", "gloo", "--mode", "check", "--bytes", str(1 << 20), "--timeout",
            f"{limit + 30:g}"]
    s.on(argv, answer or FakeCmd(rank_stdout(rank, node)))
    lines: list = []
    rc = fn.run_rank(s, lines.append, "gloo", limit, 29511, nbytes=1 << 20)
    return lines, rc, s.envs.get(tuple(argv), {})


def test_the_rank_task_relays_short_lines_with_the_first_node_as_master():
    lines, rc, env = task("gpu2", 1)
    assert rc == 0 and lines[0] == "cudadoctor-nccl start gpu2 1 3 10.0.0.1"
    assert all(len(ln.encode()) < 1000 for ln in lines)
    assert any(ln.startswith("cudadoctor-nccl log gpu2 1 ") and "NET/Socket" in ln for ln in lines)
    assert lines[-1].startswith("cudadoctor-nccl exit gpu2 1 0 0")
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == "10.0.0.1"
    assert env["MASTER_PORT"] == "29511" and env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] is None


def test_a_rank_that_hangs_is_stopped_by_its_node():
    lines, rc, _ = task("gpu3", 2, answer=FakeCmd(hang=True), limit=30)
    assert rc == 1 and lines[-1].startswith("cudadoctor-nccl exit gpu3 2 None 1")


def _srun(tasks: dict, stderr: str = "", rc: int = 0) -> FakeSystem:
    """A login node whose srun prints the given tasks' lines (labelled) and `stderr`."""
    out = []
    for r, lines in tasks.items():
        out += [f"{r}: {ln}" for ln in lines]
    s = FakeSystem(env={"PATH": "/usr/bin"}, python=PY)
    s.add_exe("/usr/bin/srun", FakeCmd("\n".join(out) + "\n", stderr=stderr, returncode=rc))
    s.add_exe("/usr/bin/scontrol")
    s.add_exe("/usr/bin/sinfo")
    s.on(["sinfo", "-h", "-N", "-o", "%N %t %P", "--partition=debug"],
         FakeCmd("gpu1 idle debug\ngpu2 idle debug\ngpu3 idle debug\ngpu4 drain debug\n"))
    return s


def test_plan_one_task_per_gpu_block_distribution():
    s = _srun({})
    p = fn.plan(s, partition="debug", per_node=8, time_limit=90, backend="nccl", python="/v/bin/python",
                extra=("--gres=gpu:8",), port=29555)
    a = p.argv
    assert p.nodes == 3 and p.expected == ["gpu1", "gpu2", "gpu3"] and p.unavailable == [("gpu4", "drain")]
    assert "--ntasks=24" in a and "--ntasks-per-node=8" in a and "--distribution=block" in a
    assert "--kill-on-bad-exit=1" in a and "--gres=gpu:8" in a and "--partition=debug" in a
    assert a[a.index("--gres=gpu:8") + 1:] == ["cudadoctor", "fleet", "nccl-rank", "--backend", "nccl",
                                               "--time-limit", "90", "--port", "29555", "--bytes", str(64 << 20),
                                               "--python", "/v/bin/python"]
    pair = fn.plan(s, nodelist=["gpu3", "gpu1"], time_limit=30, port=1)
    assert "--nodelist=gpu3,gpu1" in pair.argv and "--nodes=2" in pair.argv and pair.expected == ["gpu3", "gpu1"]


def test_collect_reads_the_whole_run_back():
    tasks = {r: task(f"gpu{r + 1}", r)[0] for r in range(3)}
    s = _srun(tasks)
    run = fn.collect(s, fn.plan(s, partition="debug", time_limit=60, backend="gloo"))
    assert run.ok and run.run.outcome == "ok" and run.run.world == 3
    assert run.run.busbw == 1.4 and run.run.transports == ["NET/Socket/0"] and run.silent == []
    assert run.node_of == {0: "gpu1", 1: "gpu2", 2: "gpu3"}


def test_a_silent_node_is_named_from_srun_s_words():
    tasks = {r: task(f"gpu{r + 1}", r, answer=FakeCmd(rank_stdout(r, f"gpu{r + 1}", ok=False, upto=())))[0][:4]
             for r in range(2)}  # gpu1 and gpu2 began the rendezvous, then srun killed them
    stderr = "2: cudadoctor: command not found\nsrun: error: gpu3: task 2: Exited with exit code 127\n"
    s = _srun(tasks, stderr, rc=1)
    run = fn.collect(s, fn.plan(s, partition="debug", time_limit=60, backend="gloo"))
    assert not run.ok and run.silent[0][0] == "gpu3" and "127" in run.silent[0][1]
    assert [x.rank for x in run.run.laggards] == [2] and run.node_of[2] == "gpu3"


def _fleet_run(nodes, busbw=None, outcome="ok") -> fn.FleetRun:
    return fn.FleetRun(list(nodes), NcclRun(outcome=outcome, busbw=busbw, stage="" if outcome == "ok" else "rendezvous",
                                            error="" if outcome == "ok" else "no progress within 30 s"), {}, [])


def test_pairs_name_the_node_that_fails_with_a_good_partner(monkeypatch):
    answers = {("gpu1", "gpu2"): _fleet_run(("gpu1", "gpu2"), 20.0), ("gpu3", "gpu1"): _fleet_run(("gpu3", "gpu1"),
                                                                                                 outcome="hang")}
    seen = []

    def collect(system, p):
        seen.append(tuple(p))
        return answers[tuple(p)]

    monkeypatch.setattr(fn, "collect", collect)
    results, culprits = fn.name_culprits(None, lambda pair: pair, ["gpu1", "gpu2", "gpu3"])
    assert seen == [("gpu1", "gpu2"), ("gpu3", "gpu1")]  # gpu3 failed next to a good node: no third run
    assert [c[0] for c in culprits] == ["gpu3"] and "hang in rendezvous" in culprits[0][1]


def test_pairs_name_a_slow_node(monkeypatch):
    bw = {("gpu1", "gpu2"): 20.0, ("gpu3", "gpu4"): 4.0, ("gpu3", "gpu1"): 19.0, ("gpu4", "gpu2"): 5.0}
    monkeypatch.setattr(fn, "collect", lambda system, p: _fleet_run(p, bw[tuple(p)]))
    results, culprits = fn.name_culprits(None, lambda pair: tuple(pair), ["gpu1", "gpu2", "gpu3", "gpu4"])
    assert [c[0] for c in culprits] == ["gpu4"] and "under 0.5x" in culprits[0][1]


def test_every_pair_failing_blames_no_single_node(monkeypatch):
    monkeypatch.setattr(fn, "collect", lambda system, p: _fleet_run(p, outcome="error"))
    _, culprits = fn.name_culprits(None, lambda pair: tuple(pair), ["gpu1", "gpu2", "gpu3"])
    assert culprits[0][0] == "*" and "every pair failed" in culprits[0][1]


def test_console_form(capsys):
    whole = fn.FleetRun(["gpu1", "gpu2", "gpu3"], NcclRun(outcome="error", stage="start", world=3, backend="gloo",
                                                          error="rank 2 exited"), {}, [("gpu3", "did not answer")])
    res = fn.FleetNcclResult(whole, [fn.PairRun(("gpu1", "gpu2"), _fleet_run(("gpu1", "gpu2"), 2.0))],
                             [("gpu3", "did not answer")])
    render_nccl(res)
    out = capsys.readouterr().out
    assert "pair gpu1 + gpu2: ok" in out and "✗ gpu3: did not answer" in out and res.exit_code == 1
    assert res.to_dict()["culprits"] == [{"node": "gpu3", "reason": "did not answer"}]
