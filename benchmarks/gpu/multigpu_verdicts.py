"""Verdicts for benchmarks/gpu/multigpu.sh (issue 14), stdlib only: each case reads what the script saved
(a `check --json` report, `bench --collectives --json`, nccl-tests outputs), prints PASS/FAIL lines with
the figures, and exits 1 when a check failed.

    python3 multigpu_verdicts.py healthy REPORT SMI_TOPO
    python3 multigpu_verdicts.py cvd REPORT BUS_OF_NVIDIA_SMI_GPU1
    python3 multigpu_verdicts.py p2poff REPORT
    python3 multigpu_verdicts.py hang REPORT ELAPSED_S DEADLINE_S
    python3 multigpu_verdicts.py badif REPORT
    python3 multigpu_verdicts.py expect REPORT WANT
    python3 multigpu_verdicts.py bench BENCH_JSON NT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FAILED = []


def verdict(ok: bool, what: str) -> None:
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        verdict(False, f"{path}: unreadable ({e})")
        return {}


def findings(rep: dict) -> dict:
    return {f["id"]: f for s in rep.get("steps", []) for f in s.get("findings", [])}


def step(rep: dict, sid: str) -> dict:
    return next((s for s in rep.get("steps", []) if s["id"] == sid), {})


def show(rep: dict, *ids: str) -> None:
    for sid in ids:
        s = step(rep, sid)
        print(f"  {sid}: {s.get('status', '?')} · {s.get('summary', '')}")
        for f in s.get("findings", []):
            if f["status"] in ("warn", "fail"):
                print(f"    {f['status']} {f['id']}: {f['summary']}")
                if f.get("fix"):
                    print(f"      fix: {f['fix']['text'][:300]}")
                    for c in f["fix"]["commands"][:4]:
                        print(f"        {c}")


def nccl_value(rep: dict) -> dict:
    return (rep.get("facts", {}).get("nccl") or {}).get("value") or {}


def smi_label(topo: str) -> str:
    for line in Path(topo).read_text().splitlines():
        cols = line.split("\t")
        if cols and cols[0].strip() == "GPU0" and len(cols) > 2:
            return cols[2].strip()
    return ""


def case_healthy(rep_path: str, topo: str) -> None:
    rep = load(rep_path)
    show(rep, "topology", "nccl")
    f = findings(rep)
    links = f.get("topology.links", {})
    want = smi_label(topo)
    verdict(step(rep, "topology").get("status") == "ok" and want and f" {want} " in links.get("summary", "") + " ",
            f"healthy: topology {links.get('summary', '?')!r}; nvidia-smi topo -m says {want!r}")
    run = nccl_value(rep)
    ok = f.get("nccl.ok")
    verdict(ok is not None and any(t.startswith("P2P") for t in run.get("transports", [])),
            f"healthy: all-reduce correct over {run.get('world')} GPUs, busbw {run.get('busbw')} GB/s at 64 MiB via "
            f"{run.get('transports')}")
    read = run.get("env_read", {})
    verdict(read.get("NCCL_NVLS_ENABLE") == "0",
            f"healthy: the ranks inherited NCCL_NVLS_ENABLE=0 (NCCL read: {read})")


def case_cvd(rep_path: str, bus1: str) -> None:
    rep = load(rep_path)
    show(rep, "topology", "nccl")
    f = findings(rep)
    o = f.get("topology.ordinals", {})
    cuda0 = o.get("evidence", {}).get("CUDA 0", "")
    verdict(o.get("status") == "ok" and bus1.lower().lstrip("0") in cuda0.lower() and "GPU 1" in cuda0,
            f"CUDA_VISIBLE_DEVICES=1,0: {o.get('summary', '?')!r} (nvidia-smi GPU 1 is {bus1})")
    verdict("nccl.ok" in f, f"CUDA_VISIBLE_DEVICES=1,0: all-reduce {step(rep, 'nccl').get('summary', '?')}")


def case_p2poff(rep_path: str) -> None:
    rep = load(rep_path)
    show(rep, "environment", "nccl")
    f = findings(rep).get("nccl.slow", {})
    summ = f.get("summary", "")
    try:
        below = float(summ.split(" is ")[1].split("× below")[0])
    except (IndexError, ValueError):
        below = 0.0
    verdict(f.get("status") == "warn" and below >= 30 and "NET/Socket" in summ,
            f"P2P+SHM off: nccl warns {below:g}× below what NVLink gives, NCCL used NET/Socket")
    verdict("unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE" in (f.get("fix") or {}).get("commands", []),
            "P2P+SHM off: the fix names both variables")


def case_hang(rep_path: str, elapsed: str, deadline: str) -> None:
    rep = load(rep_path)
    show(rep, "nccl")
    f = findings(rep).get("nccl.hang", {})
    run = nccl_value(rep)
    late = [r["rank"] for r in run.get("ranks", []) if r.get("progress", 0) < max(
        (x.get("progress", 0) for x in run.get("ranks", [])), default=0)]
    verdict(f.get("status") == "fail" and run.get("stage") == "collective" and "rank 1" in f.get("summary", ""),
            f"one rank made to hang: FAIL in {run.get('stage')}, rank 1 named (behind: {late})")
    verdict(float(elapsed) <= float(deadline) + 25,
            f"one rank made to hang: check ended in {float(elapsed):.0f} s (deadline {deadline} s), every rank killed")


def case_badif(rep_path: str) -> None:
    rep = load(rep_path)
    show(rep, "nccl")
    f = findings(rep).get("nccl.error", {})
    cmds = (f.get("fix") or {}).get("commands", [])
    verdict(f.get("status") == "fail" and any(c.startswith("export NCCL_SOCKET_IFNAME=") for c in cmds),
            f"NCCL_SOCKET_IFNAME=eth9: {f.get('summary', '?')[:160]!r}, fix {cmds[:1]}")


def case_expect(rep_path: str, want: str) -> None:
    rep = load(rep_path)
    f = findings(rep).get("topology.gpu-count", {})
    verdict(f.get("status") == "fail", f"--expect-gpus {want}: {f.get('summary', '?')}")


def nt_rows(path: Path) -> dict:
    """nccl-tests output: bytes -> (out-of-place busbw, in-place busbw)."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        c = line.split()
        if len(c) >= 12 and c[0].isdigit():
            try:
                out[int(c[0])] = (float(c[7]), float(c[11]))
            except ValueError:
                continue
    return out


COLLS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")


def size_text(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def sweep_table(d: dict) -> None:
    """cudadoctor's own figures, 8 B to 1 GiB: busbw GB/s (time µs)."""
    cells = {(r["coll"], r["bytes"]): r for r in d.get("rows", [])}
    print(f"  {'size':>8s} " + " ".join(f"{c:>19s}" for c in COLLS) + "   busbw GB/s (µs per call)")
    for n in sorted({b for _, b in cells}):
        out = []
        for c in COLLS:
            r = cells.get((c, n))
            out.append("" if r is None else "over budget" if "skipped" in r else
                       "WRONG" if not r.get("ok", True) else f"{r['busbw']:.2f} ({r['time_us']:.0f})")
        print(f"  {size_text(n):>8s} " + " ".join(f"{x:>19s}" for x in out))


def case_bench(bench_path: str, nt_dir: str) -> None:
    d = load(bench_path)
    rows = {(r["coll"], r["bytes"]): r for r in d.get("rows", []) if "busbw" in r}
    verdict(d.get("status") in ("ok", "warn") and d.get("outcome") == "ok",
            f"bench --collectives: {len(rows)} figures, status {d.get('status')}, NCCL {d.get('nccl')}, via "
            f"{d.get('transports')}")
    sweep_table(d)
    print("  cudadoctor bench --collectives vs nccl-tests (same GPUs, same NCCL), 64 MiB and up:")
    print(f"  {'collective':15s} {'size':>9s} {'cudadoctor':>11s} {'nccl-tests':>11s} {'ratio':>6s}  (busbw GB/s)")
    for coll in COLLS:
        p = Path(nt_dir) / f"{coll}.txt"
        nt = nt_rows(p) if p.exists() else {}
        if not nt:
            verdict(False, f"nccl-tests {coll}: no output in {p}")
            continue
        for n in sorted(x for x in nt if x >= 64 << 20):
            ours = rows.get((coll, n))
            theirs = nt[n][0] if coll == "sendrecv" else nt[n][1]  # ours is in place except sendrecv
            if ours is None:
                print(f"  {coll:15s} {n >> 20:>6d} MiB {'-':>11s} {theirs:11.1f}      -  (not measured: budget)")
                continue
            ratio = ours["busbw"] / theirs if theirs else 0
            print(f"  {coll:15s} {n >> 20:>6d} MiB {ours['busbw']:11.1f} {theirs:11.1f} {ratio:6.2f}")
            if ratio < 0.9:
                verdict(False, f"{coll} at {n >> 20} MiB: {ours['busbw']:.1f} GB/s is under 90% of nccl-tests' "
                               f"{theirs:.1f}")
    j = d.get("judged") or {}
    verdict(j.get("status") == "ok", f"bench: all_reduce 64 MiB busbw {j.get('busbw')} vs ~{j.get('expected')} "
                                     f"expected ({j.get('pair')})")
    cp = d.get("copies", [])
    verdict(bool(cp) and all(c.get("ok") for c in cp),
            "copy matrix: " + ", ".join(f"cuda:{c['src']}->cuda:{c['dst']} {c.get('gbps')} GB/s {c.get('label', '')}"
                                        for c in cp))


def main() -> int:
    cases = {"healthy": case_healthy, "cvd": case_cvd, "p2poff": case_p2poff, "hang": case_hang,
             "badif": case_badif, "expect": case_expect, "bench": case_bench}
    if len(sys.argv) < 3 or sys.argv[1] not in cases:
        print(__doc__)
        return 2
    cases[sys.argv[1]](*sys.argv[2:])
    if not FAILED:
        return 0
    # the whole case is one more line for the summary
    print(f"  ({len(FAILED)} check(s) failed in case {sys.argv[1]})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
