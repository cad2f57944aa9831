"""Run a collective on this machine's GPUs, one process per GPU, and read what happened.

Parent side: the launcher (child/nccl_launch.py, cudadoctor's own interpreter) runs through the
System port with a timeout; it starts one rank (child/nccl_rank.py in the TARGET interpreter) per
GPU and relays their records and NCCL_DEBUG lines. `build_run` turns that into an NcclRun: outcome
(ok, error, hang, wrong-result, not-started), the stage it stopped in, each rank's progress, the
transports NCCL chose, the variables NCCL says it read, and the figures.

The ranks inherit the user's environment. Only NCCL's logging is changed, so the transport lines
appear: NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,NET and no NCCL_DEBUG_FILE (NCCL
would otherwise write the log into the user's file).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.child.records import parse_marked
from cudadoctor.system.base import System

MARK = "@@CUDADOCTOR-NCCL@@"
RANK_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "child", "nccl_rank.py")
LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,ENV,NET", "NCCL_DEBUG_FILE": None}
STAGES = ("start", "import", "device", "rendezvous", "init", "collective", "measure", "done")
LAUNCH_GRACE_S = 20.0  # the parent's timeout past the launcher's own deadline (a backstop)
RE_VIA = re.compile(r"\bvia\s+(\S+(?:\s+pointer)?(?:/\S+)*)")
RE_VERSION = re.compile(r"NCCL version\s+(\S+)")
RE_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to\s+(.*?)\.?\s*$")
RE_NETWORK = re.compile(r"Using network\s+(\S+)")


@dataclass
class NcclRank:
    rank: int = 0
    device: Optional[int] = None  # CUDA ordinal (LOCAL_RANK)
    bus: str = ""
    name: str = ""
    host: str = ""
    progress: int = 0  # stages finished, in STAGES order (start counts when the rank reported)
    current: str = ""  # the stage it was in when it stopped ("" between stages or when done)
    error: str = ""  # the failing stage's error, verbatim
    error_stage: str = ""
    rc: Optional[int] = None
    killed: bool = False
    tail: list = field(default_factory=list)

    @property
    def next_stage(self) -> str:
        """The first stage it did not finish."""
        return STAGES[min(self.progress, len(STAGES) - 1)]


@dataclass
class NcclRun:
    backend: str = "nccl"
    world: int = 0
    python: str = ""
    torch: str = ""
    nccl_version: str = ""
    outcome: str = ""  # ok, error, hang, wrong-result, not-started
    stage: str = ""  # where it stopped: rendezvous, init, collective, measure, import, ...
    ranks: list[NcclRank] = field(default_factory=list)
    transports: list = field(default_factory=list)  # distinct "P2P/CUMEM", "SHM/direct/direct", "NET/Socket/0"
    network: str = ""  # NCCL's network plugin: Socket, IB
    env_read: dict = field(default_factory=dict)  # NCCL_* -> value, as NCCL says it read them
    warnings: list = field(default_factory=list)  # NCCL WARN lines
    size_bytes: Optional[int] = None
    time_us: Optional[float] = None
    algbw: Optional[float] = None
    busbw: Optional[float] = None
    check_ok: Optional[bool] = None
    bench: list = field(default_factory=list)  # rows of the bench sweep
    libnccl: list = field(default_factory=list)
    nvlink_before: Optional[dict] = None
    nvlink_after: Optional[dict] = None
    deadline_s: Optional[float] = None
    seconds: Optional[float] = None
    error: str = ""  # one line: what went wrong
    log_env: dict = field(default_factory=dict)  # what cudadoctor changed in the ranks' environment

    @property
    def transport_kinds(self) -> list:
        return sorted({transport_kind(t) for t in self.transports})

    @property
    def laggards(self) -> list:
        """Ranks behind the others when it stopped (the ones the others waited for); [] when all are level."""
        def step(r: NcclRank) -> int:  # a stage begun counts half: in the collective > before it
            return 2 * r.progress + (1 if r.current else 0)

        if not self.ranks:
            return []
        lo = min(step(r) for r in self.ranks)
        if all(step(r) == lo for r in self.ranks):
            return []
        return [r for r in self.ranks if step(r) == lo]


def transport_kind(t: str) -> str:
    """'P2P/CUMEM' -> p2p, 'SHM/direct/direct' -> shm, 'NET/Socket/0' -> net-socket, 'NET/IB/0' -> net-ib."""
    head = t.split("/")
    if head[0] == "NET" and len(head) > 1:
        return {"socket": "net-socket", "ib": "net-ib"}.get(head[1].lower(), "net")
    return head[0].lower()


def read_log(run: NcclRun, line: str) -> None:
    """Take what matters from one NCCL_DEBUG line."""
    m = RE_VIA.search(line)
    if m and " NCCL INFO " in line:
        t = m.group(1).strip()
        if t not in run.transports:
            run.transports.append(t)
        return
    if " NCCL WARN " in line:
        text = line.split(" NCCL WARN ", 1)[1].strip()
        if text not in run.warnings and len(run.warnings) < 20:
            run.warnings.append(text)
        return
    m = RE_VERSION.search(line)
    if m:
        run.nccl_version = run.nccl_version or m.group(1)
    m = RE_ENV.search(line)
    if m:
        run.env_read[m.group(1)] = m.group(2).strip()
    m = RE_NETWORK.search(line)
    if m:
        run.network = m.group(1)


def _rank(run: NcclRun, r: int) -> NcclRank:
    while len(run.ranks) <= r:
        run.ranks.append(NcclRank(rank=len(run.ranks)))
    return run.ranks[r]


def _finish(rk: NcclRank, what: str) -> None:
    if what in STAGES:
        rk.progress = max(rk.progress, STAGES.index(what) + 1)
    if rk.current == what:
        rk.current = ""


def build_run(records: list, world: int = 0, deadline_s: Optional[float] = None, timed_out: bool = False,
              fail_text: str = "") -> NcclRun:
    run = NcclRun(world=world, deadline_s=deadline_s)
    for _ in range(world):
        _rank(run, len(run.ranks))
    ended = how = ""
    for rec in records:
        st, r = rec.get("stage"), rec.get("rank")
        if st == "launcher":
            ev = rec.get("event")
            if ev == "exit" and isinstance(r, int):
                rk = _rank(run, r)
                rk.rc, rk.killed, rk.tail = rec.get("rc"), bool(rec.get("killed")), list(rec.get("tail") or [])[-12:]
            elif ev == "end":
                ended, how = "end", rec.get("how", "")
                run.seconds = rec.get("seconds")
            elif ev in ("bad-plan", "not-started"):
                run.outcome, run.error = "not-started", f"the launcher could not start the ranks: {rec.get('error', '')}"
            elif ev == "deadline":
                how = "deadline"
            continue
        if not isinstance(r, int):
            continue
        rk = _rank(run, r)
        if st == "nccl-log":
            read_log(run, str(rec.get("line", "")))
        elif st == "start":
            rk.host = rec.get("host", "")
            run.python = run.python or rec.get("python", "")
            run.backend = rec.get("backend", run.backend)
            _finish(rk, "start")
        elif st == "import":
            if rec.get("ok"):
                run.torch = run.torch or rec.get("torch", "")
                run.nccl_version = run.nccl_version or rec.get("nccl", "")
                _finish(rk, "import")
            else:
                rk.error, rk.error_stage = rec.get("error", ""), "import"
        elif st == "device":
            rk.device, rk.bus, rk.name = rec.get("ordinal"), rec.get("bus", ""), rec.get("name", "")
            _finish(rk, "device")
        elif st == "begin":
            rk.current = rec.get("what", "")
        elif st == "end":
            _finish(rk, rec.get("what", ""))
        elif st == "error":
            rk.error, rk.error_stage = rec.get("error", ""), rec.get("what", "")
        elif st == "crash":
            rk.error, rk.error_stage = rec.get("error", ""), rk.current or rk.next_stage
        elif st == "check":
            run.check_ok = bool(rec.get("ok")) and run.check_ok is not False
            if not rec.get("ok"):
                rk.error = rk.error or f"wrong all-reduce result: expected {rec.get('expected')}, got " \
                                       f"{rec.get('got_min')}..{rec.get('got_max')}"
        elif st == "measure" and r == 0:
            run.size_bytes, run.time_us = rec.get("bytes"), rec.get("time_us")
            run.algbw, run.busbw = rec.get("algbw"), rec.get("busbw")
        elif st == "bench":
            run.bench.append({k: v for k, v in rec.items() if k != "stage"})
        elif st == "nvlink" and r == 0:
            run.nvlink_before, run.nvlink_after = rec.get("before"), rec.get("after")
        elif st == "libs":
            run.libnccl.extend(p for p in rec.get("libnccl") or [] if p not in run.libnccl)
        elif st == "done":
            _finish(rk, "done")
    _judge(run, ended, how, timed_out, fail_text)
    return run


def _judge(run: NcclRun, ended: str, how: str, timed_out: bool, fail_text: str) -> None:
    if run.outcome == "not-started":
        return
    if not any(rk.progress for rk in run.ranks) and not any(rk.error for rk in run.ranks):
        run.outcome = "not-started"
        tails = [t for rk in run.ranks for t in rk.tail[-2:]]
        run.error = fail_text or ("no rank reported: " + " | ".join(tails[-3:]) if tails else "no rank reported")
        run.stage = "start"
        return
    failed = [rk for rk in run.ranks if rk.error]
    if run.check_ok is False:
        run.outcome, run.stage = "wrong-result", "collective"
        run.error = next((rk.error for rk in failed if rk.error.startswith("wrong")), "wrong all-reduce result")
    elif failed and how != "deadline":
        first = min(failed, key=lambda rk: (STAGES.index(rk.error_stage) if rk.error_stage in STAGES else 99, rk.rank))
        run.outcome, run.stage = "error", first.error_stage or first.next_stage
        run.error = f"rank {first.rank}: {first.error}"
    elif how == "deadline" or timed_out or ended != "end":
        run.outcome = "hang"
        run.stage = min((rk.next_stage for rk in run.ranks), key=STAGES.index, default="start")
        run.error = f"no progress within {run.deadline_s:g} s" if run.deadline_s else "stopped before the end"
    elif all(rk.progress >= len(STAGES) for rk in run.ranks):
        run.outcome = "ok"
    else:
        bad = [rk for rk in run.ranks if rk.progress < len(STAGES)]
        run.outcome, run.stage = "error", min((rk.next_stage for rk in bad), key=STAGES.index)
        rk = bad[0]
        run.error = f"rank {rk.rank} exited with code {rk.rc} in {rk.next_stage}" + (
            f": {rk.tail[-1]}" if rk.tail else "")


def run_collective(system: System, python: str, world: int, args: list, deadline_s: float,
                   extra_env: Optional[dict] = None) -> NcclRun:
    """One rank per GPU (world ranks) of child/nccl_rank.py in `python`, through the launcher."""
    env = dict(LOG_ENV)
    env.update(extra_env or {})
    plan = {"python": python, "script": RANK_SCRIPT, "world": world, "args": list(args),
            "env": env, "deadline_s": deadline_s, "grace_s": 3}
    res = system.run([system.own_python(), "-m", "cudadoctor.child.nccl_launch"], timeout=deadline_s + LAUNCH_GRACE_S,
                     input_bytes=json.dumps(plan).encode())
    fail = ""
    if res.not_found or res.error:
        fail = f"the launcher could not start: {res.describe()}"
    run = build_run(parse_marked(res.stdout, MARK), world, deadline_s, res.timed_out, fail)
    run.log_env = {k: v for k, v in LOG_ENV.items()}
    return run
