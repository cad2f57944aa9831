"""`cudadoctor fleet slurm` against a real Slurm: three virtual nodes gpu1..gpu3 on this machine,
started by .ci/slurm-up (Debian's slurm-wlm and munge; see that script).

The nodes share this machine, so a node is made to differ through its environment, chosen by
SLURMD_NODENAME in a small `cudadoctor` wrapper passed with --cudadoctor:
- gpu2 finds a fake nvidia-smi first on its PATH (an H100 with driver 570.124.06);
- in the second run, gpu3 has no cudadoctor (the wrapper exits 127, as a missing one would).
Skipped only when Slurm's `sinfo` is not installed; if it is installed the cluster must answer.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

H200 = Path(__file__).parent / "data" / "h200"
ODD_DRIVER = "570.124.06"
ODD_GPU = "NVIDIA H100 80GB HBM3"


def _need_slurm() -> None:
    if shutil.which("sinfo") is None or shutil.which("srun") is None:
        pytest.skip("Slurm is not installed here (no sinfo/srun on PATH): .ci/slurm-up installs slurm-wlm and "
                    "munge and starts a 3-node cluster; it could not run on this machine")
    p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"sinfo is installed but the cluster does not answer (run .ci/slurm-up): {p.stderr}"
    states = dict(line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
    for n in ("gpu1", "gpu2", "gpu3"):
        assert states.get(n, "").rstrip("*") in ("idle", "mix", "alloc"), (
            f"virtual node {n} is not up ({states}): run .ci/slurm-up")


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_smi(folder: Path) -> Path:
    folder.mkdir()
    lines = (H200 / "nvidia_smi.txt").read_text().splitlines()
    banner = "\n".join(ln for ln in lines if not ln.startswith("$ ") and not ln.startswith("wall="))
    banner = banner.replace("580.159.04", ODD_DRIVER).replace("NVIDIA H200", "NVIDIA H100 80GB HBM3")
    (folder / "banner.txt").write_text(banner + "\n")
    csv = f"0, {ODD_GPU}, GPU-11111111-2222-3333-4444-555555555555, 00000000:00:06.0, 9.0, 81559, {ODD_DRIVER}, " \
          "Disabled, Enabled, Default"
    _executable(folder / "nvidia-smi", f"""#!/bin/sh
case "$1" in
  --query-gpu=*) echo '{csv}' ;;
  *) cat '{folder / "banner.txt"}' ;;
esac
""")
    return folder


def _wrapper(tmp: Path, gpu3_missing: bool) -> Path:
    smi = _fake_smi(tmp / "fake-smi")
    gpu3 = 'echo "cudadoctor: command not found" >&2; exit 127' if gpu3_missing else f'exec "{sys.executable}" -m cudadoctor "$@"'
    return _executable(tmp / "cudadoctor-on-node", f"""#!/bin/sh
# cudadoctor as each virtual node runs it
case "$SLURMD_NODENAME" in
  gpu2) PATH="{smi}:$PATH"; export PATH; exec "{sys.executable}" -m cudadoctor "$@" ;;
  gpu3) {gpu3} ;;
  *) exec "{sys.executable}" -m cudadoctor "$@" ;;
esac
""")


def _fleet(*args, timeout=300):
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "cudadoctor", "fleet", "slurm", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_slurm_fleet_names_the_node_that_differs(tmp_path):
    _need_slurm()
    shim = _wrapper(tmp_path, gpu3_missing=False)
    saved = tmp_path / "reports"
    p = _fleet("--partition", "debug", "--time-limit", "120", "--cudadoctor", str(shim), "--save", str(saved),
               "--json")
    assert p.returncode in (0, 1), p.stderr
    s = json.loads(p.stdout)
    assert [n["node"] for n in s["nodes"]] == ["gpu1", "gpu2", "gpu3"], s
    assert s["silent"] == []
    dims = {d["key"]: d for d in s["dimensions"]}
    assert dims["driver"]["outliers"] == [{"node": "gpu2", "value": ODD_DRIVER}]
    assert dims["gpu"]["outliers"] == [{"node": "gpu2", "value": ODD_GPU}]
    assert "gpu2" in dims["driver"]["sentence"] and "from the other 2" in dims["driver"]["sentence"]
    assert dims["torch"]["uniform"] and dims["nvcc"]["uniform"]
    # each node's own report came back whole, under its Slurm name, and is a valid report
    assert sorted(os.listdir(saved)) == ["gpu1.json", "gpu2.json", "gpu3.json"]
    rep = json.loads((saved / "gpu2.json").read_text())
    assert rep["node"] == "gpu2" and rep["facts"]["nvidia_smi"]["value"]["driver_version"] == ODD_DRIVER
    jsonschema = pytest.importorskip("jsonschema")
    from cudadoctor.schema import report_schema

    jsonschema.Draft202012Validator(report_schema()).validate(rep)
    # the console form names it too
    p = _fleet("--partition", "debug", "--time-limit", "120", "--cudadoctor", str(shim))
    assert "gpu2 (570.124.06)" in p.stdout, p.stdout + p.stderr


def test_slurm_fleet_reports_a_node_that_does_not_answer(tmp_path):
    _need_slurm()
    shim = _wrapper(tmp_path, gpu3_missing=True)
    p = _fleet("--nodes", "3", "--time-limit", "120", "--cudadoctor", str(shim), "--json")
    assert p.returncode == 1, p.stderr
    s = json.loads(p.stdout)
    assert [n["node"] for n in s["nodes"]] == ["gpu1", "gpu2"]
    assert [x["node"] for x in s["silent"]] == ["gpu3"]
    assert "127" in s["silent"][0]["reason"], s["silent"]
    assert s["counts"]["silent"] == 1


def _node_state(node: str) -> tuple:
    p = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t|%E"], capture_output=True, text=True, timeout=30)
    state, _, reason = p.stdout.strip().partition("|")
    return state, reason


def test_healthcheck_program_drains_and_resumes_a_real_node(tmp_path):
    """deploy/slurm/cudadoctor-healthcheck with the real scontrol and the real `cudadoctor health`: on this
    GPU-less machine the node is unhealthy (driver.none) and gpu3 is drained with health's verdict as the
    reason; a healthy verdict (a fake cudadoctor: there is no GPU here) resumes it."""
    _need_slurm()
    script = Path(__file__).resolve().parent.parent / "deploy" / "slurm" / "cudadoctor-healthcheck"
    real = _executable(tmp_path / "cudadoctor-real", f'#!/bin/sh\nexec "{sys.executable}" -m cudadoctor "$@"\n')
    healthy = _executable(tmp_path / "cudadoctor-healthy", "#!/bin/sh\necho 'healthy: 1× NVIDIA H200'\nexit 0\n")
    env = dict(os.environ, CUDADOCTOR_STATE=str(tmp_path / "state"), SLURMD_NODENAME="gpu3")
    try:
        probe = subprocess.run([sys.executable, "-m", "cudadoctor", "health", "--quiet"], capture_output=True,
                               text=True, timeout=120)
        if probe.returncode != 1:
            pytest.skip(f"this machine is not an unhealthy GPU node for health ({probe.stdout.strip()})")
        p = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, env=dict(env, CUDADOCTOR=str(real)))
        assert p.returncode == 1, p.stderr
        state, reason = _node_state("gpu3")
        # "drng": draining while another job still runs there
        assert state.startswith(("drain", "drng")) and reason.startswith("cudadoctor: driver."), (state, reason)
        assert json.loads((tmp_path / "state" / "health.json").read_text())["command"] == "health"
        p = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, env=dict(env, CUDADOCTOR=str(healthy)))
        assert p.returncode == 0 and "resumed" in p.stderr, p.stderr
        state, _ = _node_state("gpu3")
        assert not state.startswith(("drain", "drng")), state  # resumed ("idle*" until slurmd re-registers)
    finally:
        if _node_state("gpu3")[0].startswith(("drain", "drng")):
            subprocess.run(["scontrol", "update", "NodeName=gpu3", "State=RESUME"], timeout=30)
        for _ in range(60):  # leave the node answering for whatever runs next
            if not _node_state("gpu3")[0].endswith("*"):
                break
            time.sleep(0.5)


def _fleet_nccl(*args, timeout=400):
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "cudadoctor", "fleet", "nccl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


NCCL_ARGS = ("--partition", "debug", "--backend", "gloo", "--size", "1M", "--time-limit", "90",
             "--python", sys.executable, "--json")


def test_slurm_fleet_nccl_all_reduce_across_the_three_nodes(tmp_path):
    """The real srun path: one task per node, the rendezvous on the first node; gloo on the CPUs."""
    _need_slurm()
    pytest.importorskip("torch.distributed")
    shim = _wrapper(tmp_path, gpu3_missing=False)
    p = _fleet_nccl(*NCCL_ARGS, "--cudadoctor", str(shim))
    assert p.returncode == 0, p.stdout + p.stderr
    whole = json.loads(p.stdout)["whole"]
    assert whole["outcome"] == "ok" and whole["world"] == 3 and whole["backend"] == "gloo"
    assert sorted(whole["nodes"]) == ["gpu1", "gpu2", "gpu3"] and whole["busbw"] > 0


def test_slurm_fleet_nccl_names_the_node_that_does_not_answer(tmp_path):
    """gpu3 has no cudadoctor: the whole run fails, the pairs name gpu3 and only gpu3."""
    _need_slurm()
    pytest.importorskip("torch.distributed")
    shim = _wrapper(tmp_path, gpu3_missing=True)
    p = _fleet_nccl(*NCCL_ARGS, "--cudadoctor", str(shim))
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["whole"]["outcome"] != "ok"
    assert [c["node"] for c in d["culprits"]] == ["gpu3"], d
    assert any(x["nodes"] == ["gpu1", "gpu2"] and x["outcome"] == "ok" for x in d["pairs"]), d["pairs"]
