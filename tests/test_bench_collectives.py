"""`bench --collectives` on the 2x H200 machine's facts, with the sweep and the copy matrix answered by fakes
whose figures are the recon's nccl-tests numbers (tests/data/multigpu/nt_*.txt)."""

from __future__ import annotations

import json

from fakes.system import FakeCmd
from multigpu_scenarios import DATA, PY, launcher_output, rank_records, rec, two_h200
from scenarios import h200

from cudadoctor.bench.collectives import COLLS, PEER_MARK, PEER_SCRIPT, run_collectives, sizes
from cudadoctor.model import Status

LAUNCH = (PY, "-m", "cudadoctor.child.nccl_launch")


def nccl_tests_rows(coll: str) -> list:
    """(bytes, out-of-place time µs, algbw, busbw) of a recon nccl-tests capture."""
    out = []
    for line in (DATA / f"nt_{coll}.txt").read_text().splitlines():
        cols = line.split()
        if len(cols) >= 9 and cols[0].isdigit():
            out.append((int(cols[0]), float(cols[5]), float(cols[6]), float(cols[7])))
    return out


def sweep(world: int = 2, wrong: tuple = ()) -> str:
    recs = []
    for r, bus in enumerate(("0000:00:06.0", "0000:00:07.0")[:world]):
        recs += rank_records(r, bus, ("rendezvous", "init", "measure"))
    for coll in COLLS:
        for n, us, alg, bus in nccl_tests_rows(coll):
            recs.append(rec(0, "bench", coll=coll, bytes=n, time_us=us, algbw=alg, busbw=bus,
                            ok=(coll, n) not in wrong))
    recs.append(rec(0, "bench", coll="all_reduce", bytes=64 << 20, time_us=258.1, algbw=260.1, busbw=260.1, ok=True))
    recs.append(rec(0, "bench", coll="sendrecv", bytes=1 << 30, skipped="needs 2048 MiB per GPU, over the 1024 MiB budget"))
    recs += [rec(r, "done", ok=True) for r in range(world)]
    return launcher_output(recs, world=world)


def copies(ok: bool = True) -> str:
    lines = [{"stage": "start"}]
    for a, b in ((0, 1), (1, 0)):
        lines.append({"stage": "copy", "src": a, "dst": b, "bytes": 256 << 20, "peer": True, "seconds": 0.0007,
                      "gbps": 383.5, "ok": ok})
    lines.append({"stage": "done", "seconds": 1.2})
    return "".join(f"{PEER_MARK} {json.dumps(x)}\n" for x in lines)


def machine(nccl: str = None, copy: str = None):
    fs = two_h200(nccl=nccl if nccl is not None else sweep())
    fs.on([PY, PEER_SCRIPT], FakeCmd(copy if copy is not None else copies()))
    return fs


def test_sizes_follow_nccl_tests_and_stay_in_budget():
    s = sizes()
    assert s[:3] == [8, 32, 128] and 64 << 20 in s and s[-1] == 1 << 30 and 512 << 20 in s
    assert max(sizes(256 << 20)) == 256 << 20 and 64 << 20 in sizes(256 << 20)
    assert 64 << 20 not in sizes(1 << 20)


def test_sweep_copies_and_the_judged_figure():
    fs = machine()
    res = run_collectives(fs, None, 1 << 30, 120)
    assert res.status is Status.OK and res.gpus == 2 and res.run.outcome == "ok"
    assert res.judged["busbw"] == 260.1 and res.judged["pair"] == "NV18" and res.judged["status"] == "ok"
    assert {c["label"] for c in res.copies} == {"NV18"}
    plan = json.loads(fs.inputs[LAUNCH])
    args = plan["args"]
    assert args[args.index("--mode") + 1] == "bench" and args[args.index("--max-bytes") + 1] == str(1 << 30)
    assert args[args.index("--colls") + 1] == "all_reduce,all_gather,reduce_scatter,sendrecv"
    d = res.to_dict()
    assert d["status"] == "ok" and d["nccl"] == "2.28.9" and any(r.get("skipped") for r in d["rows"])


def test_a_wrong_result_or_a_failed_copy_fails():
    assert run_collectives(machine(nccl=sweep(wrong=(("all_gather", 8388608),))), None).status is Status.FAIL
    assert run_collectives(machine(copy=copies(ok=False)), None).status is Status.FAIL


def test_far_below_the_links_warns():
    slow = sweep().replace('"busbw": 260.1', '"busbw": 4.0')
    res = run_collectives(machine(nccl=slow), None)
    assert res.status is Status.WARN and res.judged["status"] == "warn"


def test_one_gpu_is_refused_with_the_reason():
    res = run_collectives(h200(), None)
    assert res.status is Status.FAIL and "two or more GPUs" in res.notes[0]


def test_console_form(capsys):
    from cudadoctor.commands.bench import render_collectives

    render_collectives(run_collectives(machine(), None))
    out = capsys.readouterr().out
    assert "all_reduce" in out and "sendrecv" in out and "over budget" in out
    assert "383.5 NV18" in out and "NV18 should give ~256" in out


def test_recon_nccl_tests_figures_are_the_ones_the_issue_quotes():
    ar = {n: b for n, _, _, b in nccl_tests_rows("all_reduce")}
    assert ar[128 << 20] == 282.02 and ar[512 << 20] == 310.27
    assert {n: b for n, _, _, b in nccl_tests_rows("sendrecv")}[512 << 20] == 355.29
