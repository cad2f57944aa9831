"""deploy/: the Kubernetes manifests are well-formed and consistent with each other and with
cudadoctor (node name variable, command, labels), and collect-reports works against a fake kubectl."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import check
from scenarios import h200

from cudadoctor.doctor import NODE_NAME_VARS
from cudadoctor.render.json_report import render_json

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra (pip install '.[test]')")

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"


def load(name: str) -> list:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d is not None]
    for d in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(d), (name, d)
        assert d["metadata"].get("name"), name
    return docs


def only(name: str) -> dict:
    docs = load(name)
    assert len(docs) == 1, name
    return docs[0]


def env_of(container: dict) -> dict:
    return {e["name"]: e for e in container.get("env", [])}


def test_daemonset_runs_check_json_on_every_gpu_node():
    ns = only("namespace.yaml")
    ds = only("daemonset.yaml")
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    assert ds["metadata"]["namespace"] == ns["metadata"]["name"] == "cudadoctor"
    spec = ds["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod.get("restartPolicy", "Always") == "Always"  # the only one a DaemonSet allows
    (c,) = pod["containers"]
    script = " ".join(c["command"])
    assert "cudadoctor check --json" in script and "sleep infinity" in script
    env = env_of(c)
    node_var = env["CUDADOCTOR_NODE_NAME"]
    assert node_var["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "CUDADOCTOR_NODE_NAME" in NODE_NAME_VARS  # the name the report's "node" is read from
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})  # does not take GPUs from jobs
    assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_job_checks_one_node_and_fails_when_a_check_fails():
    job = only("job.yaml")
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["command"] == ["cudadoctor", "check", "--json"]  # argv: the exit code is the Job's outcome
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert env_of(c)["CUDADOCTOR_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_kustomization_lists_existing_files_and_sets_the_image():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())  # no metadata: not a Kubernetes object
    assert k["kind"] == "Kustomization" and k["namespace"] == "cudadoctor"
    for r in k["resources"]:
        assert (K8S / r).is_file(), r
    images = {i["name"] for i in k["images"]}
    for name in k["resources"] + ["job.yaml"]:
        for d in load(name):
            for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                assert c["image"] in images, (name, c["image"])


def test_dockerfile_installs_cudadoctor_on_the_users_image():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE" in text and "FROM ${BASE_IMAGE}" in text
    assert "pip install" in text and "cudadoctor --version" in text


def _fake_kubectl(folder: Path, pods: list) -> Path:
    """pods: (pod, node, phase, report text or None)."""
    lines = "\\n".join(f"{p} {n} {ph}" for p, n, ph, _ in pods)
    cases = []
    for p, _n, _ph, rep in pods:
        if rep is not None:
            (folder / f"{p}.log").write_text(rep)
            cases.append(f'  *" logs {p} "*) cat "{folder / (p + ".log")}" ;;')
    script = f"""#!/bin/sh
args=" $* "
case "$args" in
  *" get pods "*) printf '{lines}\\n' ;;
{chr(10).join(cases)}
  *) echo "fake kubectl: $*" >&2; exit 1 ;;
esac
"""
    path = folder / "kubectl"
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_collect_reports_gathers_each_nodes_log_and_summarises(tmp_path):
    def rep(node):
        return render_json(check(h200(env={"CUDADOCTOR_NODE_NAME": node})), {})

    kubectl = _fake_kubectl(tmp_path, [("cudadoctor-a", "node-a", "Running", rep("node-a")),
                                       ("cudadoctor-b", "node-b", "Running", rep("node-b")),
                                       ("cudadoctor-c", "node-c", "Pending", None)])
    out = tmp_path / "reports"
    env = dict(os.environ, KUBECTL=str(kubectl), NO_COLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    script = K8S / "collect-reports"
    assert os.access(script, os.X_OK)
    p = subprocess.run([str(script), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert sorted(os.listdir(out)) == ["node-a.json", "node-b.json"]
    assert json.loads((out / "node-a.json").read_text())["node"] == "node-a"
    assert "node-c: pod cudadoctor-c is Pending" in p.stderr
    assert "2 nodes reported" in p.stdout, p.stdout + p.stderr
    assert p.returncode in (0, 1)


# ------------------------------------------------------------------ deploy/slurm/cudadoctor-healthcheck

HEALTHCHECK = ROOT / "deploy" / "slurm" / "cudadoctor-healthcheck"


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _healthcheck(tmp_path, verdict: str, rc: int, mode: str = "healthcheck", reason: str = "",
                 state: str = "IDLE+DRAIN", env: dict = None):
    """Run the script with a fake `cudadoctor` that prints `verdict` (as `health --quiet` does) and exits rc,
    and a fake scontrol that shows the node in `state` with drain `reason`."""
    (tmp_path / "verdict.txt").write_text(verdict + "\n" if verdict else "")
    cd = _exe(tmp_path / "cudadoctor", f'#!/bin/sh\necho "$@" > "{tmp_path}/cd-args"\n'
                                       f'cat "{tmp_path}/verdict.txt"\nexit {rc}\n')
    log = tmp_path / "scontrol.log"
    sc = _exe(tmp_path / "scontrol", f'#!/bin/sh\necho "$@" >> "{log}"\n'
                                     f'[ "$1" = show ] && echo "   State={state} ThreadsPerCore=1 Reason={reason}"\n'
                                     'exit 0\n')
    e = {k: v for k, v in os.environ.items() if k not in ("CUDADOCTOR_ARGS", "CUDADOCTOR_PROM")}
    e.update(CUDADOCTOR=str(cd), SCONTROL=str(sc), CUDADOCTOR_STATE=str(tmp_path / "state"), SLURMD_NODENAME="gpu7")
    e.update(env or {})
    p = subprocess.run([str(HEALTHCHECK), mode], capture_output=True, text=True, timeout=60, env=e)
    calls = log.read_text().splitlines() if log.exists() else []
    return p, calls


def _args(tmp_path) -> list:
    return (tmp_path / "cd-args").read_text().split()


def test_healthcheck_drains_an_unhealthy_node_with_the_verdict(tmp_path):
    p, calls = _healthcheck(tmp_path, "unhealthy: health.xid 79 on GPU 1; driver.version-mismatch: x", rc=1)
    assert p.returncode == 1
    assert calls == ["show node gpu7",
                     "update NodeName=gpu7 State=DRAIN Reason=cudadoctor: health.xid 79 on GPU 1; driver.version-mismatch: x"]
    assert _args(tmp_path) == ["health", "--quiet", "--save", str(tmp_path / "state" / "health.json")]


def test_healthcheck_launches_kernels_only_on_a_node_without_jobs(tmp_path):
    for state, launch in (("IDLE", True), ("IDLE+DRAIN", True), ("MIXED", False), ("ALLOCATED", False)):
        d = tmp_path / state
        d.mkdir()
        p, _ = _healthcheck(d, "healthy: 8× NVIDIA H200", rc=0, state=state)
        assert p.returncode == 0 and ("--no-launch" not in _args(d)) is launch, state
    d = tmp_path / "prolog"
    d.mkdir()
    _healthcheck(d, "healthy: x", rc=0, mode="prolog", state="ALLOCATED")
    assert "--no-launch" not in _args(d)  # the job's GPUs are free before it starts


def test_healthcheck_passes_expectations_and_writes_prometheus(tmp_path):
    prom = tmp_path / "cudadoctor.prom"
    _healthcheck(tmp_path, "healthy: x", rc=0, env={"CUDADOCTOR_PROM": str(prom),
                                                   "CUDADOCTOR_ARGS": "--expect-gpus 8 --expect-driver 580.159.04"})
    assert _args(tmp_path)[4:] == ["--expect-gpus", "8", "--expect-driver", "580.159.04", "--prometheus", str(prom)]


def test_healthcheck_resumes_only_nodes_it_drained(tmp_path):
    p, calls = _healthcheck(tmp_path, "healthy: x", rc=0, reason="cudadoctor: driver.none [root@2026-11-29T10:00:00]")
    assert p.returncode == 0 and calls == ["show node gpu7", "update NodeName=gpu7 State=RESUME"]
    other = tmp_path / "other"
    other.mkdir()
    p, calls = _healthcheck(other, "healthy: x", rc=0, reason="bad DIMM [admin@2026-11-29T10:00:00]")
    assert p.returncode == 0 and calls == ["show node gpu7"]


def test_healthcheck_never_drains_when_it_cannot_tell_and_prolog_mode_only_exits(tmp_path):
    p, calls = _healthcheck(tmp_path, "cannot tell: health.nvml-unavailable: NVML could not be asked", rc=2)
    assert p.returncode == 0 and calls == ["show node gpu7"] and "could not tell" in p.stderr
    (tmp_path / "scontrol.log").unlink(missing_ok=True)
    p, calls = _healthcheck(tmp_path, "unhealthy: driver.none: no driver", rc=1, mode="prolog")
    assert p.returncode == 1 and calls == [] and "cudadoctor: driver.none: no driver" in p.stderr
