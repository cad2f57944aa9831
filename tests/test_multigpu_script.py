"""benchmarks/gpu/multigpu.sh's verdicts (multigpu_verdicts.py), checked here on reports made from the 2x H200
captures: each case passes on what the GPU machine should produce and fails on what it must not."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from multigpu_scenarios import DATA, h200_nccl, h200_nccl_badif, h200_nccl_hang, two_h200
from test_bench_collectives import machine as bench_machine

from cudadoctor.bench.collectives import run_collectives
from cudadoctor.doctor import run_check
from cudadoctor.facts.registry import Options
from cudadoctor.render.json_report import render_json

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu" / "multigpu_verdicts.py"


def verdicts(*args) -> tuple:
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout


def report(tmp_path: Path, name: str, fs, only=(), **extra) -> Path:
    opts = Options()
    opts.extra.update(extra)
    path = tmp_path / f"{name}.json"
    path.write_text(render_json(run_check(fs, opts, only), {}))
    return path


def test_healthy_and_expect(tmp_path):
    rep = report(tmp_path, "healthy", two_h200())
    rc, out = verdicts("healthy", rep, DATA / "smi_topo.txt")
    assert rc == 0 and out.count("PASS") == 3, out
    rc, out = verdicts("expect", report(tmp_path, "expect", two_h200(), ("topology",), expect_gpus=8), 8)
    assert rc == 0 and "expected 8 GPUs, the driver sees 2" in out
    rc, out = verdicts("expect", rep, 8)  # a report made without --expect-gpus must not pass
    assert rc == 1


def test_cvd_p2poff_badif_hang(tmp_path):
    cvd = report(tmp_path, "cvd", two_h200(env={"CUDA_VISIBLE_DEVICES": "1,0"}, peers_run=2,
                                           nccl=h200_nccl(buses=("0000:00:07.0", "0000:00:06.0"))), ("topology", "nccl"))
    assert verdicts("cvd", cvd, "00000000:00:07.0")[0] == 0
    assert verdicts("cvd", cvd, "00000000:00:06.0")[0] == 1
    off = report(tmp_path, "p2poff", two_h200(env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
                                              nccl=h200_nccl("nccl_nop2p_noshm.txt")), ("environment", "nccl"))
    rc, out = verdicts("p2poff", off)
    assert rc == 0 and "64× below" in out, out
    assert verdicts("p2poff", report(tmp_path, "healthy", two_h200(), ("nccl",)))[0] == 1
    bad = report(tmp_path, "badif", two_h200(env={"NCCL_SOCKET_IFNAME": "eth9"}, nccl=h200_nccl_badif()), ("nccl",))
    assert verdicts("badif", bad)[0] == 0
    hang = report(tmp_path, "hang", two_h200(nccl=h200_nccl_hang(1)), ("nccl",))
    assert verdicts("hang", hang, 24.0, 20)[0] == 0
    assert verdicts("hang", hang, 90.0, 20)[0] == 1  # a hang that was not stopped on time fails


def _nt_dir(tmp_path: Path, scale: float = 1.0) -> Path:
    """The recon's nccl-tests outputs, busbw columns scaled by `scale`."""
    d = tmp_path / "nt"
    d.mkdir(exist_ok=True)
    for c in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
        lines = []
        for line in (DATA / f"nt_{c}.txt").read_text().splitlines():
            cols = line.split()
            if len(cols) >= 12 and cols[0].isdigit():
                cols[7] = f"{float(cols[7]) * scale:.2f}"
                cols[11] = f"{float(cols[11]) * scale:.2f}"
                line = "  ".join(cols)
            lines.append(line)
        (d / f"{c}.txt").write_text("\n".join(lines) + "\n")
    return d


def test_bench_against_nccl_tests(tmp_path):
    res = run_collectives(bench_machine(), None)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(res.to_dict()))
    rc, out = verdicts("bench", bench, _nt_dir(tmp_path))
    assert rc == 0, out
    assert "all_reduce" in out and "512 MiB" in out and "1.00" in out
    rc, out = verdicts("bench", bench, _nt_dir(tmp_path, scale=1.2))  # nccl-tests 20% faster: fails
    assert rc == 1 and "under 90% of nccl-tests" in out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_script_parses():
    sh = SCRIPT.with_name("multigpu.sh")
    assert subprocess.run(["bash", "-n", str(sh)], capture_output=True, timeout=30).returncode == 0
    text = sh.read_text()
    assert 'set -u; . "$(dirname "$0")/_install.sh"' in text.replace("set -u\n. ", "set -u; . ")
    assert "NCCL_NVLS_ENABLE=1" not in text and "unset NCCL_NVLS_ENABLE" not in text
