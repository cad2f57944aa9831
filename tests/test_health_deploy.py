"""deploy/kubernetes for `cudadoctor health`: the health DaemonSet's loop writes the verdict and the
Prometheus file where node-problem-detector's plugin and node_exporter's textfile collector read them; the
NPD custom-plugin config passes NPD's own validation rules; the plugin maps verdicts to NPD's protocol."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cudadoctor.checks.health import MAX_REASON

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra (pip install '.[test]')")

K8S = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")


def doc(name: str) -> dict:
    (d,) = [x for x in yaml.safe_load_all((K8S / name).read_text()) if x]
    return d


def npd() -> tuple:
    cm = doc("node-problem-detector.yaml")
    return cm, json.loads(cm["data"]["cudadoctor-health.json"]), cm["data"]["cudadoctor-verdict"]


def test_npd_config_passes_npds_validation_rules():
    cm, cfg, _ = npd()
    assert (cm["kind"], cm["metadata"]["namespace"]) == ("ConfigMap", "kube-system")
    # pkg/custompluginmonitor/types/config.go: plugin "custom"; a rule's timeout within the global one; a
    # permanent rule's condition among the default conditions
    g = cfg["pluginConfig"]
    assert cfg["plugin"] == "custom" and cfg["source"]
    seconds = {r["condition"]: int(r["timeout"].rstrip("s")) for r in cfg["rules"]}
    assert all(t <= int(g["timeout"].rstrip("s")) for t in seconds.values())
    (rule,) = cfg["rules"]
    assert rule["type"] == "permanent" and rule["condition"] in {c["type"] for c in cfg["conditions"]}
    assert g["max_output_length"] >= MAX_REASON  # health's reason is never cut (NPD's default is 80)
    assert rule["path"] == "/config/cudadoctor/cudadoctor-verdict"  # the mount the file's comment describes
    assert "cudadoctor-verdict" in cm["data"] and rule["path"].rsplit("/", 1)[1] in cm["data"]


@pytest.fixture
def plugin(tmp_path) -> Path:
    p = tmp_path / "cudadoctor-verdict"
    p.write_text(npd()[2])
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def run_plugin(plugin: Path, verdict: Path, max_age: int = 300):
    env = dict(os.environ, CUDADOCTOR_VERDICT=str(verdict), CUDADOCTOR_VERDICT_MAX_AGE=str(max_age))
    return subprocess.run([str(plugin)], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("line,rc", [("0 healthy: 8× NVIDIA H200 · driver 580.159.04", 0),
                                     ("1 unhealthy: health.xid 79 on GPU 3", 1),
                                     ("2 cannot tell: health.nvml-unavailable: x", 2), ("x garbage", 2)])
def test_the_npd_plugin_follows_npds_exit_protocol(plugin, tmp_path, line, rc):
    v = tmp_path / "verdict"
    v.write_text(line + "\n")
    p = run_plugin(plugin, v)
    assert p.returncode == rc and p.stdout.strip() == line.split(" ", 1)[1]


def test_a_missing_or_stale_verdict_is_unknown(plugin, tmp_path):
    v = tmp_path / "verdict"
    assert run_plugin(plugin, v).returncode == 2
    v.write_text("0 healthy: x\n")
    old = time.time() - 3600
    os.utime(v, (old, old))
    p = run_plugin(plugin, v)
    assert p.returncode == 2 and "old" in p.stdout


def test_the_health_daemonset_feeds_npd_and_node_exporter(tmp_path):
    ds = doc("health-daemonset.yaml")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths[mounts["/var/lib/cudadoctor"]] == "/var/lib/cudadoctor"  # what the NPD plugin reads
    assert paths[mounts["/var/lib/node_exporter/textfile"]] == "/var/lib/node_exporter/textfile"
    script = c["command"][2]
    assert "--prometheus /var/lib/node_exporter/textfile/cudadoctor.prom" in script and "--no-launch" in script
    # one round of the loop, with a fake cudadoctor and the node's folders under tmp_path
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "cudadoctor"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\necho "unhealthy: health.xid 79 on GPU 3"\nexit 1\n')
    fake.chmod(0o755)
    for d in ("cudadoctor", "node_exporter/textfile"):
        (tmp_path / "var" / "lib" / d).mkdir(parents=True)
    local = script.replace("/var/lib/", f"{tmp_path}/var/lib/")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", INTERVAL="30")
    verdict = tmp_path / "var/lib/cudadoctor/verdict"
    p = subprocess.Popen(["sh", "-c", local], env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if verdict.exists():
                break
            time.sleep(0.1)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    assert verdict.read_text() == "1 unhealthy: health.xid 79 on GPU 3\n"
    assert (tmp_path / "args").read_text().split()[:2] == ["health", "--quiet"]
    assert sorted(os.listdir(verdict.parent)) == [".verdict.new", "verdict"]  # the temporary name is gone
