"""`cudadoctor fleet nccl`: the nccl step's all-reduce across nodes, through srun: one task per GPU, the
rendezvous on the first node of the step. When the whole run fails (or with --pairs), pairs of nodes run
it again to name the slow or silent node.

Each task is `cudadoctor fleet nccl-rank` on its node. It finds the first node's address (Slurm's
NodeAddr for the first host of SLURM_STEP_NODELIST; block distribution puts rank 0 there), then runs
child/nccl_rank.py in the target interpreter with RANK/WORLD_SIZE/LOCAL_RANK from SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID and its own time limit, and relays what the rank prints in short lines
(srun --label cuts lines past 1024 bytes):

    cudadoctor-nccl start NODE RANK WORLD MASTER_ADDR
    cudadoctor-nccl rec NODE RANK {json record of the rank}
    cudadoctor-nccl log NODE RANK <an NCCL_DEBUG line>
    cudadoctor-nccl exit NODE RANK RC TIMED_OUT

The caller reads them back into the same NcclRun the single-node step uses (probes/nccl_run.py).
The backend is NCCL on GPU nodes; `--backend gloo` runs the same plumbing on CPUs (CI's Slurm).
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from cudadoctor.child.nccl_launch import Reader
from cudadoctor.fleet.node import natural_key
from cudadoctor.fleet.slurm import LABEL, SLURM_GRACE_S, SlurmError, choose_nodes, expand_hostlist, srun_errors
from cudadoctor.probes.nccl_run import LOG_ENV, RANK_SCRIPT, NcclRun, build_run
from cudadoctor.system.base import System

TAG = "cudadoctor-nccl"
FIELD_MAX = 500  # characters kept of a long string in a relayed record (one line stays under 1024 bytes)
SLOW = 0.5  # a pair under half the median pair's busbw is slow
STOPPED_BY_SRUN = re.compile(r"^(Terminated|Killed|Force Terminated|CANCELLED)", re.I)


# ------------------------------------------------------------------ the task on each node


def master_address(system: System, nodelist: str) -> str:
    """The address of the step's first node, where rank 0 (block distribution) holds the rendezvous."""
    names = expand_hostlist(system, nodelist)
    if not names:
        return "127.0.0.1"
    res = system.run(["scontrol", "show", "node", names[0], "-o"], timeout=30)
    m = re.search(r"\bNodeAddr=(\S+)", res.stdout) if res.ok else None
    return m.group(1) if m else names[0]


def _short(rec: dict) -> dict:
    return {k: (v[:FIELD_MAX] if isinstance(v, str) else v) for k, v in rec.items()}


def run_rank(system: System, say: Callable[[str], None], backend: str, time_limit: float, port: int,
             python: Optional[str] = None, nbytes: int = 64 << 20) -> int:
    """The task on one node: run one rank, relay its records and NCCL lines as TAG lines. Returns its exit code."""
    env = system.env
    rank, world = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NTASKS", "1"))
    local = env.get("SLURM_LOCALID", "0")
    node = (env.get("SLURMD_NODENAME") or system.hostname() or "unknown").strip()
    addr = master_address(system, env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
    say(f"{TAG} start {node} {rank} {world} {addr}")
    lock = threading.Lock()
    reader = Reader(rank, iter(()), lock)

    def relay(rec: dict) -> None:
        if rec.get("stage") == "nccl-log":
            say(f"{TAG} log {node} {rank} {rec['line']}")
        else:
            rec.pop("rank", None)
            say(f"{TAG} rec {node} {rank} {json.dumps(_short(rec))}")

    reader.relay = relay

    over = dict(LOG_ENV, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=local, MASTER_ADDR=addr,
                MASTER_PORT=str(port))
    argv = [python or system.own_python(), RANK_SCRIPT, "--backend", backend, "--mode", "check",
            "--bytes", str(nbytes), "--timeout", f"{time_limit + 30:g}"]
    res = system.run_lines(argv, time_limit, reader.feed, env=over)
    tail = [ln[-300:] for ln in res.stderr.strip().splitlines()[-3:]]
    say(f"{TAG} exit {node} {rank} {res.returncode} {int(res.timed_out)} {json.dumps(tail)}")
    return 0 if res.returncode == 0 else 1


# ------------------------------------------------------------------ the caller


@dataclass
class NcclPlan:
    argv: list
    nodes: int
    per_node: int
    expected: list
    unavailable: list
    timeout: float
    time_limit: float
    backend: str = "nccl"


def plan(system: System, partition: Optional[str] = None, nodes: Optional[int] = None, per_node: int = 1,
         time_limit: float = 120, extra: tuple = (), cudadoctor: str = "cudadoctor", python: Optional[str] = None,
         backend: str = "nccl", nbytes: int = 64 << 20, nodelist: Optional[list] = None, port: Optional[int] = None,
         alloc_wait: float = 300) -> NcclPlan:
    if system.which("srun") is None:
        raise SlurmError("srun is not on PATH: run `cudadoctor fleet nccl` where Slurm's commands are (a login node)")
    if nodelist:
        expected, unavailable = list(nodelist), []
    else:
        nodes, expected, unavailable = choose_nodes(system, partition, nodes)
    n = len(expected) if nodelist else (nodes or len(expected))
    if n < 1:
        raise SlurmError("no node to run on")
    minutes = max(1, math.ceil((time_limit + SLURM_GRACE_S) / 60))
    argv = ["srun", "--job-name=cudadoctor-nccl", f"--nodes={n}", f"--ntasks={n * per_node}",
            f"--ntasks-per-node={per_node}", "--distribution=block", "--label", "--kill-on-bad-exit=1",
            f"--time={minutes}"]
    if nodelist:
        argv.append(f"--nodelist={','.join(nodelist)}")
    if partition:
        argv.append(f"--partition={partition}")
    argv += list(extra)
    argv += [cudadoctor, "fleet", "nccl-rank", "--backend", backend, "--time-limit", f"{time_limit:g}",
             "--port", str(port or random.randint(20000, 39999)), "--bytes", str(nbytes)]
    if python:
        argv += ["--python", python]
    return NcclPlan(argv, n, per_node, expected, unavailable, alloc_wait + minutes * 60 + 30, time_limit, backend)


@dataclass
class Collector:
    """Turns the tasks' TAG lines back into the records probes/nccl_run.build_run reads."""

    records: list = field(default_factory=list)
    node_of: dict = field(default_factory=dict)  # rank -> node
    started: set = field(default_factory=set)  # nodes that ran a task
    timed_out: set = field(default_factory=set)  # ranks stopped by their node's time limit
    other: list = field(default_factory=list)

    def __call__(self, line: str) -> None:
        line = LABEL.sub("", line, count=1)
        if not line.startswith(TAG + " "):
            if line.strip() and len(self.other) < 50:
                self.other.append(line[:300])
            return
        parts = line.split(" ", 4)
        if len(parts) < 4 or not parts[3].lstrip("-").isdigit():
            return
        kind, node, rank = parts[1], parts[2], int(parts[3])
        rest = parts[4] if len(parts) > 4 else ""
        if kind == "start":
            self.node_of[rank] = node
            self.started.add(node)
        elif kind == "rec":
            try:
                rec = json.loads(rest)
            except ValueError:
                return
            if isinstance(rec, dict):
                rec["rank"] = rank
                self.records.append(rec)
        elif kind == "log":
            self.records.append({"rank": rank, "stage": "nccl-log", "line": rest})
        elif kind == "exit":
            f = rest.split(" ", 2)
            rc = int(f[0]) if f and f[0].lstrip("-").isdigit() else None
            timed = len(f) > 1 and f[1] == "1"
            if timed:
                self.timed_out.add(rank)
            try:
                tail = json.loads(f[2]) if len(f) > 2 else []
            except ValueError:
                tail = []
            self.records.append({"stage": "launcher", "event": "exit", "rank": rank, "rc": rc, "killed": timed,
                                 "tail": tail})


@dataclass
class FleetRun:
    nodes: list
    run: NcclRun
    node_of: dict  # rank -> node
    silent: list  # [(node, why)]

    @property
    def ok(self) -> bool:
        return self.run.outcome == "ok" and not self.silent

    def to_dict(self) -> dict:
        r = self.run
        return {"nodes": self.nodes, "outcome": r.outcome, "stage": r.stage, "error": r.error, "busbw": r.busbw,
                "algbw": r.algbw, "bytes": r.size_bytes, "transports": r.transports, "network": r.network,
                "backend": r.backend, "world": r.world, "silent": [{"node": n, "reason": w} for n, w in self.silent],
                "late_ranks": [{"rank": x.rank, "node": self.node_of.get(x.rank, ""), "stage": x.next_stage}
                               for x in r.laggards]}


def collect(system: System, p: NcclPlan) -> FleetRun:
    """Run the plan's srun; the tasks' lines back into an NcclRun, and the nodes that never answered."""
    col = Collector()
    res = system.run_lines(p.argv, p.timeout, col)
    if res.not_found or res.error:
        raise SlurmError(f"could not run srun: {res.describe()}")
    world = p.nodes * p.per_node
    how = "deadline" if (res.timed_out or col.timed_out) else "finished"
    records = col.records + [{"stage": "launcher", "event": "end", "how": how}]
    run = build_run(records, world, p.time_limit, res.timed_out)
    run.backend = p.backend
    expected = list(p.expected)
    for node in sorted(col.started, key=natural_key):
        if node not in expected:
            expected.append(node)
    for r in range(world):  # block distribution: rank r runs on the (r // per_node)-th node
        if r not in col.node_of and r // p.per_node < len(expected):
            col.node_of[r] = expected[r // p.per_node]
    said = srun_errors(res.stderr)
    if not col.started and not col.records and not said:
        tail = " | ".join((res.stderr.strip().splitlines() or [""])[-3:] + col.other[-2:])
        raise SlurmError(f"srun ran no cudadoctor task (exit code {res.returncode})" + (f": {tail}" if tail else ""))
    # a task srun itself stopped (--kill-on-bad-exit, after another task failed) says nothing about its node
    silent = [(n, "did not answer" + (f": {'; '.join(said[n])}" if n in said else "")) for n in expected
              if n not in col.started and not all(STOPPED_BY_SRUN.search(m) for m in said.get(n, ["?"]))]
    return FleetRun(expected[:p.nodes] if p.expected else expected, run, col.node_of, silent)


# ------------------------------------------------------------------ naming the node


@dataclass
class PairRun:
    nodes: tuple
    run: FleetRun

    def to_dict(self) -> dict:
        return {"nodes": list(self.nodes), **{k: v for k, v in self.run.to_dict().items() if k != "nodes"}}


def pairs_round(nodes: list) -> list:
    """Disjoint pairs (waves of pairs that can run at once); an odd node out pairs with the first node."""
    waves = [[(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]]
    if len(nodes) % 2 and len(nodes) > 1:
        waves.append([(nodes[-1], nodes[0])])
    return waves


def run_pairs(system: System, make_plan: Callable[[list], NcclPlan], waves: list) -> list:
    out = []
    for wave in waves:
        plans = [(pair, make_plan(list(pair))) for pair in wave]  # here: each gets its own port
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(plans)))) as pool:
            futs = [(pair, pool.submit(collect, system, pl)) for pair, pl in plans]
            for pair, fut in futs:
                try:
                    out.append(PairRun(pair, fut.result()))
                except SlurmError as e:
                    out.append(PairRun(pair, FleetRun(list(pair), NcclRun(outcome="error", error=str(e)), {}, [])))
    return out


def judge_pairs(results: list) -> tuple:
    """(good nodes, suspect pairs): a pair is suspect when it failed or ran at under SLOW x the median."""
    ok = [p for p in results if p.run.ok]
    med = statistics.median([p.run.run.busbw for p in ok if p.run.run.busbw]) if ok else None
    slow = [p for p in ok if med and p.run.run.busbw is not None and p.run.run.busbw < SLOW * med]
    good = {n for p in ok if p not in slow for n in p.nodes}
    return good, [p for p in results if p not in ok or p in slow]


def name_culprits(system: System, make_plan: Callable[[list], NcclPlan], nodes: list) -> tuple:
    """Pairwise runs: round 1 disjoint pairs; round 2 each node of a failed or slow pair with a good node.
    Returns ([PairRun], [(node, why)])."""
    first = run_pairs(system, make_plan, pairs_round(nodes))
    good, suspect = judge_pairs(first)
    culprits: list = []
    if not suspect:
        return first, culprits
    if not good:
        return first, [("*", "every pair failed: the cause is common to all nodes (network, configuration)")]
    partners = sorted(good, key=natural_key)
    waves, blamed = [], {}
    for p in suspect:
        for n in p.nodes:
            other = p.nodes[1] if n == p.nodes[0] else p.nodes[0]
            if n in good or n in blamed or any(w[0][0] == n for w in waves):
                continue
            if other in good:  # already seen failing next to a good node
                blamed[n] = p
            else:
                waves.append([(n, partners[len(waves) % len(partners)])])
    second = run_pairs(system, make_plan, waves)
    _, s2 = judge_pairs(first + second)
    blamed.update({p.nodes[0]: p for p in second if p in s2})
    for node, p in sorted(blamed.items(), key=lambda kv: natural_key(kv[0])):
        r = p.run.run
        partner = p.nodes[1] if p.nodes[0] == node else p.nodes[0]
        silent = dict(p.run.silent).get(node)
        how = (silent if silent else f"{r.outcome} in {r.stage}" + (f": {r.error[:200]}" if r.error else "")
               if r.outcome != "ok" else f"busbw {r.busbw:g} GB/s, under {SLOW:g}x the other pairs'")
        culprits.append((node, f"fails with a good partner ({partner}): {how}"))
    return first + second, culprits


@dataclass
class FleetNcclResult:
    whole: FleetRun
    pairs: list = field(default_factory=list)
    culprits: list = field(default_factory=list)  # [(node, why)]
    unavailable: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.whole.ok and not self.culprits else 1

    def to_dict(self) -> dict:
        return {"tool": "cudadoctor", "command": "fleet nccl", "exit_code": self.exit_code,
                "whole": self.whole.to_dict(), "pairs": [p.to_dict() for p in self.pairs],
                "culprits": [{"node": n, "reason": w} for n, w in self.culprits],
                "not_checked": [{"node": n, "state": s} for n, s in self.unavailable]}


def fleet_nccl(system: System, force_pairs: bool = False, **kw) -> FleetNcclResult:
    p = plan(system, **kw)
    whole = collect(system, p)
    result = FleetNcclResult(whole, unavailable=list(p.unavailable))
    names = sorted(whole.nodes, key=natural_key)
    if (not whole.ok or force_pairs) and len(names) >= 2:
        base = {k: v for k, v in kw.items() if k not in ("nodes", "nodelist", "port")}
        ports = iter(range(random.randint(20000, 30000), 40000))

        def make(pair: list) -> NcclPlan:
            return plan(system, nodelist=pair, port=next(ports), **base)

        result.pairs, result.culprits = name_culprits(system, make, names)
    for n, why in reversed(whole.silent):  # a node that never answered is named with srun's words first
        known = next((i for i, c in enumerate(result.culprits) if c[0] == n), None)
        if known is None:
            result.culprits.insert(0, (n, why))
        elif why not in result.culprits[known][1]:
            result.culprits[known] = (n, f"{why}; {result.culprits[known][1]}")
    return result
