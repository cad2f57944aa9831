"""`cudadoctor bench --collectives`: all_reduce, all_gather, reduce_scatter and sendrecv over sizes from
8 B to 1 GiB across every visible GPU (one process per GPU, the target's torch.distributed with NCCL,
nccl-tests' algbw/busbw definitions), and the GPU-to-GPU copy bandwidth matrix; the all-reduce at
64 MiB is judged against what the slowest GPU pair should give (matrix/links.toml).

The sweep keeps to --max-bytes of GPU memory per GPU (1 GiB by default): the in-place collectives
need one buffer of the size, sendrecv two, so sendrecv stops at half the budget.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.child.records import parse_marked
from cudadoctor.model import Status
from cudadoctor.probes.nccl_run import NcclRun, run_collective
from cudadoctor.system.base import System

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
GIB = 1 << 30
PEER_SCRIPT = os.path.join(os.path.dirname(__file__), "peer_copy.py")
PEER_MARK = "@@CUDADOCTOR-PEERCOPY@@"


def sizes(max_bytes: int = GIB) -> list:
    """8 B x 4 up to the budget (nccl-tests -b 8 -f 4), plus 64 MiB (the judged size) and the budget itself."""
    out, s = {max_bytes}, 8
    while s <= max_bytes:
        out.add(s)
        s *= 4
    if 64 << 20 <= max_bytes:
        out.add(64 << 20)
    return sorted(out)


@dataclass
class CollectivesResult:
    python: str = ""
    gpus: int = 0
    run: Optional[NcclRun] = None
    copies: list = field(default_factory=list)  # {src, dst, gbps, peer, ok, label}
    copy_error: str = ""
    judged: dict = field(default_factory=dict)  # the 64 MiB all_reduce against the links table
    status: Status = Status.OK
    notes: list = field(default_factory=list)
    elapsed_s: float = 0.0
    max_bytes: int = GIB

    def to_dict(self) -> dict:
        r = self.run
        return {"tool": "cudadoctor", "command": "bench --collectives", "status": self.status.value,
                "python": self.python, "gpus": self.gpus, "max_bytes_per_gpu": self.max_bytes,
                "nccl": None if r is None else r.nccl_version, "torch": None if r is None else r.torch,
                "transports": [] if r is None else r.transports, "outcome": None if r is None else r.outcome,
                "error": "" if r is None else r.error,
                "definitions": "nccl-tests doc/PERFORMANCE.md: algbw = bytes/time; busbw = algbw x 2(n-1)/n "
                               "(all_reduce), (n-1)/n (all_gather, reduce_scatter), 1 (sendrecv)",
                "rows": [] if r is None else r.bench, "copies": self.copies, "copy_error": self.copy_error,
                "judged": self.judged, "notes": self.notes, "elapsed_s": round(self.elapsed_s, 2)}


def row(run: NcclRun, coll: str, nbytes: int) -> Optional[dict]:
    return next((x for x in run.bench if x.get("coll") == coll and x.get("bytes") == nbytes and "busbw" in x), None)


def run_copies(system: System, python: str, timeout: float) -> tuple:
    res = system.run([python, PEER_SCRIPT], timeout=timeout)
    recs = parse_marked(res.stdout, PEER_MARK, key="stage")
    copies = [{k: v for k, v in r.items() if k != "stage"} for r in recs if r.get("stage") == "copy"]
    crash = next((r.get("error", "") for r in recs if r.get("stage") == "crash"), "")
    if res.timed_out:
        return copies, f"the copy matrix gave no answer within {timeout:g} s (killed)"
    if crash or not any(r.get("stage") == "done" for r in recs):
        return copies, crash or f"the copy child ended without a report: {res.describe()} {res.stderr[-300:]}".strip()
    return copies, ""


def run_collectives(system: System, python: Optional[str] = None, max_bytes: int = GIB,
                    timeout: float = 600.0) -> CollectivesResult:
    """Facts (links, peers), the sweep, the copy matrix, the judgement."""
    from cudadoctor.checks.gpu_pairs import slowest
    from cudadoctor.facts.gpu_links import pairs
    from cudadoctor.facts.host_links import norm_bus
    from cudadoctor.facts.registry import Options, gather
    from cudadoctor.matrix.links import check_size, warn_below

    t0 = time.monotonic()
    py = python or system.own_python()
    out = CollectivesResult(python=py, max_bytes=max_bytes)
    facts = gather(system, ["gpu_links", "gpu_peers"], Options(python=python))
    peers, links = facts.get("gpu_peers"), facts.get("gpu_links")
    out.gpus = len(peers.value.devices) if peers is not None and peers.ok else 0
    if out.gpus < 2:
        why = peers.error if peers is not None and peers.error else f"{out.gpus} GPU(s) visible to CUDA"
        out.notes.append(f"collectives need two or more GPUs: {why}")
        out.status, out.elapsed_s = Status.FAIL, time.monotonic() - t0
        return out
    args = ["--mode", "bench", "--backend", "nccl", "--colls", ",".join(COLLS),
            "--sizes", ",".join(str(s) for s in sizes(max_bytes)), "--max-bytes", str(max_bytes),
            "--timeout", f"{timeout + 30:g}"]
    out.run = run_collective(system, py, out.gpus, args, timeout)
    out.copies, out.copy_error = run_copies(system, py, min(timeout, 300.0))
    plist = pairs(links.value, peers.value) if links is not None and links.ok else []
    label = {}
    for p in plist:
        oa, ob = peers.value.ordinal_of(p.bus_a), peers.value.ordinal_of(p.bus_b)
        label[(oa, ob)] = label[(ob, oa)] = p.label
    for c in out.copies:
        c["label"] = label.get((c.get("src"), c.get("dst")), "")
    out.status = Status.OK if out.run.outcome == "ok" else Status.FAIL
    if any(x.get("ok") is False for x in out.run.bench) or any(c.get("ok") is False for c in out.copies):
        out.status = Status.FAIL
    ar = row(out.run, "all_reduce", check_size())
    buses = {norm_bus(r.bus) for r in out.run.ranks if r.bus}
    pair, exp = slowest(plist, links.value, buses) if plist else (None, None)
    if ar and exp is not None:
        ratio = ar["busbw"] / exp.busbw_gbps
        out.judged = {"coll": "all_reduce", "bytes": check_size(), "busbw": ar["busbw"], "expected": exp.busbw_gbps,
                      "ratio": round(ratio, 3), "pair": pair.label, "from": exp.text, "confidence": exp.confidence,
                      "status": (Status.OK if ratio >= warn_below() else Status.WARN).value}
        if ratio < warn_below() and out.status is Status.OK:
            out.status = Status.WARN
    out.elapsed_s = time.monotonic() - t0
    return out
