"""`cudadoctor check --json` on every node of a Slurm allocation through srun, one task per node.

The task on each node is `cudadoctor fleet node`: it prints a start line at once (so a node that
was reached but then hangs is told apart from one that never ran anything), runs `cudadoctor check
--json` as a child with the time limit, and prints the outcome, compressed, in lines shorter than
srun's 1024-byte line buffer (srun --label cuts longer lines, and without --label it interleaves
the tasks' output mid-line):

    cudadoctor-fleet start NODE TASK STEP_NODELIST
    cudadoctor-fleet data NODE I/N BASE64(ZLIB(JSON{node, host, rc, timed_out, error, stderr, report}))

The caller reassembles each node's lines, and every node of the step that sent no complete report
is listed with the reason (srun's own error for it, or "did not finish within S s").
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from cudadoctor.fleet.node import from_report, natural_key, not_answered
from cudadoctor.system.base import System
from cudadoctor.system.proc import user_env_overrides

TAG = "cudadoctor-fleet"
CHUNK = 900  # characters of base64 per line: with the tag and node name, well under 1024 bytes
LABEL = re.compile(r"^\s*\d+: ")
SRUN_TASK_ERROR = re.compile(r"srun: error: (?P<node>[^\s:]+): tasks? (?P<tasks>[0-9,\-]+): (?P<msg>.+)")
# sinfo's compact states; a trailing *~#!%$@^- marks not responding, powered down, etc.
USABLE_STATES = {"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing", "plnd", "planned"}
SLURM_GRACE_S = 60  # Slurm's --time is the backstop: the node task enforces the time limit itself


class SlurmError(Exception):
    """srun could not be used at all (not installed, no nodes, no task started)."""


# ------------------------------------------------------------------ the task on each node


def node_lines(system: System, time_limit: float, python: Optional[str] = None, strict: bool = False,
               torch_timeout: Optional[float] = None) -> Iterator[str]:
    """The lines `cudadoctor fleet node` prints (the first before the check runs)."""
    env = system.env
    host = system.hostname()
    node = (env.get("SLURMD_NODENAME") or host or "unknown").strip()
    task = env.get("SLURM_PROCID") or "-"
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "-"
    yield f"{TAG} start {node} {task} {nodelist}"
    if torch_timeout is None:
        # leave room to report a hung torch probe as a finding rather than as a silent node
        torch_timeout = max(5.0, min(120.0, time_limit * 0.75))
    argv = [system.own_python(), "-m", "cudadoctor", "check", "--json", "--timeout", f"{torch_timeout:g}"]
    if python:
        argv += ["--python", python]
    if strict:
        argv.append("--strict")
    # the check must judge this node's own environment, not the one cudadoctor gives its children
    res = system.run(argv, timeout=time_limit, env=user_env_overrides(system.env))
    out = res.stdout.strip()
    payload = {
        "node": node, "host": host, "rc": res.returncode, "timed_out": res.timed_out,
        "error": "" if res.returncode in (0, 1) else res.describe(),
        "stderr": (res.stderr.strip() or ("" if out.startswith("{") else out))[-2000:],
        "report": out if out.startswith("{") else None,
    }
    blob = base64.b64encode(zlib.compress(json.dumps(payload).encode("utf-8"), 6)).decode("ascii")
    chunks = [blob[i:i + CHUNK] for i in range(0, len(blob), CHUNK)]
    for i, c in enumerate(chunks, 1):
        yield f"{TAG} data {node} {i}/{len(chunks)} {c}"


# ------------------------------------------------------------------ the caller


@dataclass
class Plan:
    argv: list
    nodes: int
    expected: list  # node names known in advance ([] when srun picks them)
    unavailable: list  # [(node, state)] of the partition, not usable (drained, down, ...)
    timeout: float
    time_limit: float


def _base_state(state: str) -> str:
    return state.strip().rstrip("*~#!%$@^-+").lower()


def partition_nodes(system: System, partition: Optional[str]) -> tuple:
    """([usable node], [(unusable node, state)]) of the partition (default: Slurm's default one)."""
    argv = ["sinfo", "-h", "-N", "-o", "%N %t %P"] + ([f"--partition={partition}"] if partition else [])
    res = system.run(argv, timeout=30)
    if not res.ok:
        raise SlurmError(f"sinfo failed: {res.describe()}: {res.output[-300:]}")
    usable, unusable, seen = [], [], set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        name, state, part = parts[0], parts[1], parts[2]
        if not partition and not part.endswith("*"):
            continue  # only the default partition, as srun without --partition uses
        if name in seen:
            continue
        seen.add(name)
        (usable.append(name) if _base_state(state) in USABLE_STATES and not state.endswith("*")
         else unusable.append((name, state)))
    return usable, unusable


def expand_hostlist(system: System, hostlist: str) -> list:
    """gpu[1-3] -> [gpu1, gpu2, gpu3], by Slurm's own `scontrol show hostnames`; [] when it fails."""
    if not hostlist or hostlist == "-":
        return []
    res = system.run(["scontrol", "show", "hostnames", hostlist], timeout=30)
    return res.stdout.split() if res.ok else []


def choose_nodes(system: System, partition: Optional[str], nodes: Optional[int]) -> tuple:
    """(node count, [expected node], [(unusable node, state)]): `nodes` as given (no names known), else
    the current allocation's nodes (inside one, with no --partition), else every usable node of the partition."""
    env = system.env
    expected: list = []
    unavailable: list = []
    in_alloc = bool(env.get("SLURM_JOB_ID")) and not partition
    if nodes is None:
        if in_alloc and env.get("SLURM_JOB_NUM_NODES", "").isdigit():
            nodes = int(env["SLURM_JOB_NUM_NODES"])
            expected = expand_hostlist(system, env.get("SLURM_JOB_NODELIST", ""))
        else:
            usable, unavailable = partition_nodes(system, partition)
            if not usable:
                where = f"partition {partition}" if partition else "the default partition"
                states = ", ".join(f"{n} {s}" for n, s in unavailable[:10])
                raise SlurmError(f"no usable node in {where}" + (f" ({states})" if states else ""))
            nodes, expected = len(usable), usable
    return nodes, expected, unavailable


def plan(system: System, partition: Optional[str] = None, nodes: Optional[int] = None, time_limit: float = 300,
         extra: tuple = (), cudadoctor: str = "cudadoctor", python: Optional[str] = None, strict: bool = False,
         alloc_wait: float = 300) -> Plan:
    if system.which("srun") is None:
        raise SlurmError("srun is not on PATH: run `cudadoctor fleet slurm` where Slurm's commands are "
                         "(a login node), or use `cudadoctor fleet summarize` on saved reports")
    nodes, expected, unavailable = choose_nodes(system, partition, nodes)
    minutes = max(1, math.ceil((time_limit + SLURM_GRACE_S) / 60))
    argv = ["srun", "--job-name=cudadoctor-fleet", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            "--label", "--no-kill", "--kill-on-bad-exit=0", f"--time={minutes}"]
    if partition:
        argv.append(f"--partition={partition}")
    argv += list(extra)
    argv += [cudadoctor, "fleet", "node", "--time-limit", f"{time_limit:g}"]
    if python:
        argv += ["--python", python]
    if strict:
        argv.append("--strict")
    return Plan(argv, nodes, expected, unavailable, timeout=alloc_wait + minutes * 60 + 30, time_limit=time_limit)


@dataclass
class Collector:
    """Reassembles each node's lines from srun's labelled output as they arrive."""

    started: dict = field(default_factory=dict)  # node -> (task, step nodelist)
    chunks: dict = field(default_factory=dict)  # node -> {i: text}
    total: dict = field(default_factory=dict)  # node -> n
    other: list = field(default_factory=list)  # lines that are not ours (kept, capped)
    on_node: Optional[Callable[[str], None]] = None

    def __call__(self, line: str) -> None:
        line = LABEL.sub("", line, count=1)
        if not line.startswith(TAG + " "):
            if line.strip() and len(self.other) < 200:
                self.other.append(line[:500])
            return
        parts = line.split(" ", 5)
        kind = parts[1] if len(parts) > 1 else ""
        if kind == "start" and len(parts) >= 5:
            self.started[parts[2]] = (parts[3], parts[4])
        elif kind == "data" and len(parts) >= 5:
            node, pos = parts[2], parts[3]
            text = parts[4] if len(parts) == 5 else parts[4] + " " + parts[5]
            try:
                i, n = (int(x) for x in pos.split("/"))
            except ValueError:
                return
            self.chunks.setdefault(node, {})[i] = text.strip()
            self.total[node] = n
            if len(self.chunks[node]) == n and self.on_node is not None:
                self.on_node(node)

    def payload(self, node: str) -> Optional[dict]:
        got, n = self.chunks.get(node, {}), self.total.get(node)
        if not n or len(got) != n:
            return None
        try:
            raw = zlib.decompress(base64.b64decode("".join(got[i] for i in range(1, n + 1))))
            data = json.loads(raw)
        except (ValueError, zlib.error, KeyError):
            return {"garbled": True}
        return data if isinstance(data, dict) else {"garbled": True}


def srun_errors(stderr: str) -> dict:
    """node -> what srun said about its task, with the last thing the task itself wrote on stderr
    (srun --label prefixes a task's stderr lines with its number; srun's error names node and task)."""
    by_task: dict = {}
    for line in stderr.splitlines():
        m = LABEL.match(line)
        if m:
            by_task[m.group(0).strip().rstrip(":")] = line[m.end():].strip()[:300]
    out: dict = {}
    for m in SRUN_TASK_ERROR.finditer(stderr):
        msg = m.group("msg").strip()
        said = [by_task[t] for t in m.group("tasks").split(",") if by_task.get(t)]
        out.setdefault(m.group("node"), []).append(msg + (f" ({said[-1]})" if said else ""))
    return out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def collect(system: System, p: Plan, on_node: Optional[Callable[[str], None]] = None) -> tuple:
    """Run the plan's srun. ([NodeRecord], {node: report dict}, meta)."""
    col = Collector(on_node=on_node)
    # srun carries this environment to the nodes' cudadoctor, which must see the user's own
    res = system.run_lines(p.argv, p.timeout, col, env=user_env_overrides(system.env))
    if res.not_found or res.error:
        raise SlurmError(f"could not run srun: {res.describe()}")
    if not col.started and not col.chunks:
        tail = " | ".join(ln for ln in (res.stderr.strip().splitlines()[-4:] + col.other[-2:]) if ln)
        how = f"no answer within {p.timeout:g} s" if res.timed_out else f"exit code {res.returncode}"
        raise SlurmError(f"srun ran no cudadoctor task ({how})" + (f": {tail}" if tail else ""))
    errors = srun_errors(res.stderr)
    expected = list(p.expected)
    if not expected:  # srun picked the nodes: the step's node list, as any task saw it
        for nodelist in sorted({nl for _task, nl in col.started.values()}):
            expected.extend(expand_hostlist(system, nodelist))
    known = set(expected)
    for n in list(col.started) + list(col.chunks) + list(errors):
        if n not in known:
            known.add(n)
            expected.append(n)
    records: list = []
    reports: dict = {}
    for node in sorted(expected, key=natural_key):
        data = col.payload(node)
        said = "; ".join(errors.get(node, []))
        if data is not None and not data.get("garbled"):
            rep = None
            if data.get("report"):
                try:
                    rep = json.loads(data["report"])
                except ValueError:
                    rep = None
            if isinstance(rep, dict) and rep.get("tool") == "cudadoctor":
                reports[node] = rep
                records.append(from_report(rep, source=f"srun:{node}", name=node))
            elif data.get("timed_out"):
                records.append(not_answered(node, f"cudadoctor check did not finish within {p.time_limit:g} s "
                                                  "(stopped on the node)", "srun"))
            else:
                why = data.get("error") or f"exit code {data.get('rc')}"
                detail = _last_line(data.get("stderr", ""))
                records.append(not_answered(node, f"cudadoctor check gave no report: {why}"
                                            + (f": {detail}" if detail else ""), "srun"))
        elif data is not None:
            records.append(not_answered(node, "its output came back garbled", "srun"))
        elif node in col.started:
            why = (f"srun stopped after {p.timeout:g} s" if res.timed_out else "it stopped") + " before its report came back"
            records.append(not_answered(node, f"started, but {why}" + (f" ({said})" if said else ""), "srun"))
        else:
            records.append(not_answered(node, "did not answer" + (f": {said}" if said else (
                f" (srun stopped after {p.timeout:g} s)" if res.timed_out else "")), "srun"))
    if p.expected:
        for node, state in p.unavailable:
            records.append(not_answered(node, f"not checked: Slurm state {state}", "sinfo"))
    meta = {"srun": p.argv, "srun_exit_code": res.returncode, "srun_timed_out": res.timed_out,
            "elapsed_s": round(res.elapsed_s, 2), "nodes_requested": p.nodes,
            "srun_stderr_tail": res.stderr.strip().splitlines()[-10:]}
    return records, reports, meta
