"""`cudadoctor health` judged on the real 2x H200 node (tests/data/h200x2) and on every fault the issue
names: ECC, remapped rows pending or failed, Xid 48/79/94/95/119, HW slowdown, NVLink down, fabric
manager not ready, a GPU missing, NVML hanging; and the others health checks. Asserts finding ids,
statuses, the GPU they concern and the exit code (0 healthy, 1 unhealthy, 2 cannot tell)."""

from __future__ import annotations

import json

import pytest
from fakes import nvml_health
from fakes.system import FakeCmd
from health_scenarios import h200x2, launch_records, xid_line

from cudadoctor.checks import health as H
from cudadoctor.facts.health_types import HealthExpect
from cudadoctor.health import run_health
from cudadoctor.model import Finding, Status, StepResult


def health(fs, gpus=None, driver="", strict=False, launch=True):
    return run_health(fs, HealthExpect(gpus=gpus, driver=driver), timeout=5, launch=launch, strict=strict)


def findings(run) -> list:
    """(id, status, gpu) of every finding."""
    return [(f.id, f.status.value, f.evidence.get("gpu")) for s in run.report.steps for f in s.findings]


def steps(run) -> dict:
    return {s.id: s.status.value for s in run.report.steps}


def bad(run) -> list:
    return [x for x in findings(run) if x[1] in ("warn", "fail", "error")]


def gpus(**changes):
    """The dump's two GPUs, with changes per GPU: gpus(g1={"temp": 95})."""
    gs = nvml_health.dump_gpus()
    for key, ch in changes.items():
        gs[int(key[1:])].update(ch)
    return gs


def test_the_real_h200_pair_is_healthy():
    run = health(h200x2(), gpus=2, driver="580.159.04")
    assert run.report.exit_code == 0
    assert set(steps(run).values()) == {"ok"}, steps(run)
    ids = {f[0] for f in findings(run)}
    assert {"driver.ok", "health.gpus", "health.memory", "health.xid-none", "health.nvlink", "health.fabric",
            "probe.launch.ok"} <= ids
    assert run.reason == "healthy: 2× NVIDIA H200 · driver 580.159.04 · kernels ran on 2 GPU(s)"


# ------------------------------------------------------------------ memory


def test_uncorrectable_ecc_errors_since_the_driver_loaded_warn():
    run = health(h200x2(gpus(g1={"ecc_UNCORRECTED_VOLATILE_ECC": 2, "ecc_UNCORRECTED_AGGREGATE_ECC": 2})))
    assert bad(run) == [("health.ecc-uncorrected", "warn", 1)]
    assert run.report.exit_code == 0 and run.reason.startswith("healthy") and "health.ecc-uncorrected" in run.reason
    assert health(h200x2(gpus(g1={"ecc_UNCORRECTED_VOLATILE_ECC": 2})), strict=True).report.exit_code == 1


def test_lifetime_uncorrectable_errors_alone_are_history():
    run = health(h200x2(gpus(g0={"ecc_UNCORRECTED_AGGREGATE_ECC": 5})))
    assert bad(run) == [] and "5 uncorrectable error(s) in the GPUs' lifetime" in steps_summary(run, "memory")


def steps_summary(run, sid):
    return next(s.summary for s in run.report.steps if s.id == sid)


def test_remapped_rows_pending_need_a_reset():
    run = health(h200x2(gpus(g0={"remapped_rows": [0, 1, 1, 0]})))
    assert bad(run) == [("health.reset-pending", "warn", 0)]
    assert run.report.exit_code == 0


def test_remapped_rows_failed_means_unhealthy():
    run = health(h200x2(gpus(g0={"remapped_rows": [0, 3, 0, 1]})))
    assert bad(run) == [("health.remapped-rows-failure", "fail", 0)]
    assert run.report.exit_code == 1 and run.reason.startswith("unhealthy: health.remapped-rows-failure")


def test_pending_retired_pages_on_gpus_before_ampere():
    run = health(h200x2(gpus(g1={"retired_pending": 1, "retired_dbe": 2, "retired_sbe": 0})))
    assert bad(run) == [("health.reset-pending", "warn", 1)]


# ------------------------------------------------------------------ Xid


@pytest.mark.parametrize("code,status", [(48, "fail"), (79, "fail"), (94, "warn"), (95, "fail"), (119, "fail"),
                                         (74, "fail"), (64, "fail")])
def test_xid_events_are_judged_from_the_catalogue(code, status):
    log = xid_line(code, "0000:00:07") + xid_line(code, "0000:00:07", ts=6000.5)
    run = health(h200x2(dmesg=log))
    assert bad(run) == [("health.xid", status, 1)]
    f = next(f for s in run.report.steps for f in s.findings if f.id == "health.xid")
    assert f.evidence["xid"] == code and f.evidence["events"] == 2 and f.evidence["last at (s since boot)"] == 6000.5
    assert f.fix.commands and all("{index}" not in c for c in f.fix.commands)
    assert run.report.exit_code == (1 if status == "fail" else 0)
    if status == "fail":
        assert run.reason == f"unhealthy: health.xid {code} on GPU 1"


def test_application_xids_leave_the_node_healthy():
    log = xid_line(13, text="Graphics SM Warp Exception") + xid_line(31) + xid_line(43) + xid_line(45)
    run = health(h200x2(dmesg=log))
    assert bad(run) == [] and ("health.xid-app", "ok", None) in findings(run)
    assert run.report.exit_code == 0


def test_an_xid_on_a_bus_nvml_does_not_list_is_still_reported():
    run = health(h200x2(dmesg=xid_line(79, "0000:3b:00")))
    f = [x for x in findings(run) if x[0] == "health.xid"]
    assert f == [("health.xid", "fail", None)]
    assert run.reason == "unhealthy: health.xid 79"


def test_an_unknown_xid_is_a_warning_not_silence():
    run = health(h200x2(dmesg=xid_line(333)))
    assert bad(run) == [("health.xid", "warn", 0)]


def test_kernel_log_not_readable_is_a_fact_not_a_failure():
    fs = h200x2()
    fs.add_exe("/usr/bin/dmesg", FakeCmd(stderr="dmesg: read kernel buffer failed: Operation not permitted",
                                         returncode=1))
    run = health(fs)
    assert ("health.xid-unreadable", "skip", None) in findings(run)
    assert run.report.exit_code == 0 and steps(run)["xid"] == "skip"


# ------------------------------------------------------------------ clocks and temperature


@pytest.mark.parametrize("mask,reason", [(0x8, "HW slowdown"), (0x8 | 0x40, "HW thermal slowdown"),
                                         (0x8 | 0x80, "HW power brake"), (0x20, "SW thermal slowdown")])
def test_clock_slowdowns_warn(mask, reason):
    run = health(h200x2(gpus(g0={"throttle": mask | 0x1})))
    assert bad(run) == [("health.clocks-slowdown", "warn", 0)]
    assert reason in steps_summary(run, "clocks")


def test_idle_and_power_cap_are_not_slowdowns():
    assert bad(health(h200x2(gpus(g0={"throttle": 0x1 | 0x4})))) == []


def test_temperature_against_the_slowdown_threshold():
    assert bad(health(h200x2(gpus(g1={"temp": 90})))) == [("health.temperature", "fail", 1)]
    assert bad(health(h200x2(gpus(g1={"temp": 88})))) == [("health.temperature", "warn", 1)]  # above GPU_MAX 87
    assert bad(health(h200x2(gpus(g1={"temp": 86})))) == []


# ------------------------------------------------------------------ NVLink, fabric, MIG


def test_an_nvlink_down_fails_that_gpu():
    gs = gpus()
    gs[1]["nvlinks"][3]["state"] = 0
    gs[1]["nvlinks"][7]["state"] = 0
    run = health(h200x2(gs))
    assert bad(run) == [("health.nvlink-down", "fail", 1)]
    assert "NVLink 3, 7 down (16 of 18 up)" in steps_summary(run, "nvlink")


def test_nonzero_crc_counters_on_up_links_are_not_a_fault():
    gs = gpus()
    assert any(link.get("err3") for link in gs[0]["nvlinks"][:18])  # the real counters: 1-48
    assert bad(health(h200x2(gs))) == []


def test_pcie_gpus_without_nvlink_skip_the_step():
    gs = gpus()
    for g in gs:
        g["nvlinks"], g["nvlink_count"], g["fabric"] = [], 0, {"state": 0, "status": 0}
    run = health(h200x2(gs))
    assert steps(run)["nvlink"] == "skip" and steps(run)["fabric"] == "skip" and run.report.exit_code == 0


@pytest.mark.parametrize("state", [1, 2])
def test_fabric_manager_not_ready(state):
    run = health(h200x2(gpus(g0={"fabric": {"state": state, "status": 0}}, g1={"fabric": {"state": state, "status": 0}})))
    assert bad(run) == [("health.fabric-manager", "fail", 0), ("health.fabric-manager", "fail", 1)]
    assert run.reason == "unhealthy: health.fabric-manager on GPUs 0,1"


def test_fabric_registration_failed_and_degraded_bandwidth():
    run = health(h200x2(gpus(g0={"fabric": {"state": 3, "status": 5}}, g1={"fabric": {"state": 3, "status": 0,
                                                                                     "health_mask": 1}})))
    assert bad(run) == [("health.fabric-manager", "fail", 0), ("health.fabric-degraded", "warn", 1)]


def test_cuda_not_ready_because_of_the_fabric():
    err = {"call": "cuInit", "code": 802, "name": "CUDA_ERROR_SYSTEM_NOT_READY", "message": "system not yet initialized"}
    run = health(h200x2(launch=FakeCmd(stdout=launch_records(init_error=err))))
    assert bad(run) == [("health.fabric-manager", "fail", None)] and steps(run)["launch"] == "fail"


def test_mig_on_without_instances_and_a_pending_change():
    run = health(h200x2(gpus(g0={"mig": [1, 1], "mig_instances": 0}, g1={"mig": [0, 1]})))
    assert sorted(bad(run)) == [("health.mig-no-instances", "fail", 0), ("health.mig-pending", "warn", 1)]
    run = health(h200x2(gpus(g0={"mig": [1, 1], "mig_instances": 3})))
    assert bad(run) == [] and "3 instances" in steps_summary(run, "mig")


# ------------------------------------------------------------------ driver, GPUs, files, persistence


def test_a_gpu_missing_against_expect_gpus():
    gs = gpus()[:1]
    run = health(h200x2(gs, launch=FakeCmd(stdout=launch_records(1))), gpus=2)
    assert bad(run) == [("health.gpu-count", "fail", None)]
    assert run.reason == "unhealthy: health.gpu-count: 1 GPU, expected 2"
    assert health(h200x2(), gpus=1).report.exit_code == 0  # more than expected: a warning
    assert ("health.gpu-count", "warn", None) in findings(health(h200x2(), gpus=1))


def test_nvml_hanging_means_a_wedged_driver():
    run = health(h200x2(nvml=FakeCmd(hang=True)))
    assert bad(run)[0] == ("driver.nvml-hang", "fail", None)
    assert steps(run)["memory"] == "skip" and run.report.exit_code == 1


def test_a_lost_gpu():
    run = health(h200x2(gpus(g1={"handle_error": "GpuIsLost"}), launch=FakeCmd(stdout=launch_records(1))))
    assert ("driver.gpu-lost", "fail", 1) in bad(run) and run.report.exit_code == 1


def test_driver_library_mismatch_from_nvml_and_from_libcuda():
    run = health(h200x2(init_error="LibRmVersionMismatch"))
    assert bad(run) == [("driver.version-mismatch", "fail", None)]
    out = launch_records().replace("libcuda.so.580.159.04", "libcuda.so.580.173.01")
    run = health(h200x2(launch=FakeCmd(stdout=out)))
    assert bad(run) == [("driver.version-mismatch", "fail", None)]
    assert "libcuda 580.173.01" in steps_summary(run, "driver")


def test_expect_driver():
    assert health(h200x2(), driver="580").report.exit_code == 0
    assert health(h200x2(), driver="580.159").report.exit_code == 0
    run = health(h200x2(), driver="580.1")
    assert bad(run) == [("health.driver-unexpected", "fail", None)] and run.report.exit_code == 1


def test_no_driver_at_all():
    err = {"call": "dlopen", "code": -1, "name": "LIBCUDA_NOT_LOADABLE", "message": "cannot load libcuda.so.1"}
    run = health(h200x2(km="", init_error="LibraryNotFound", nodes=[],
                        launch=FakeCmd(stdout=launch_records(init_error=err))))
    assert bad(run) == [("driver.none", "fail", None)] and run.report.exit_code == 1


def test_kernel_module_not_loaded():
    run = health(h200x2(km="", init_error="DriverNotLoaded"))
    assert bad(run)[0] == ("driver.not-loaded", "fail", None)


def test_nvml_unavailable_is_cannot_tell():
    run = health(h200x2(nvml=FakeCmd(stdout=json.dumps({"error": "import-failed", "message": "No module named pynvml"}))))
    assert ("health.nvml-unavailable", "skip", None) in findings(run)
    assert run.report.exit_code == 2 and run.reason.startswith("cannot tell: health.nvml-unavailable")


def test_missing_device_files():
    nodes = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    run = health(h200x2(nodes=nodes))
    assert bad(run) == [("health.device-file-missing", "fail", None)]
    f = next(f for s in run.report.steps for f in s.findings if f.id == "health.device-file-missing")
    assert f.summary == "missing: /dev/nvidia1" and "sudo nvidia-modprobe -c=1" in f.fix.commands


def test_persistence_off_without_the_daemon_warns_not_fails():
    gs = gpus(g0={"persistence": 0}, g1={"persistence": 0})
    run = health(h200x2(gs))
    assert bad(run) == [("health.persistence-off", "warn", None)] and run.report.exit_code == 0
    assert "nvidia-persistenced" in " ".join(bad_fix(run))
    assert bad(health(h200x2(gs, processes=("nvidia-persiste",)))) == []
    assert bad(health(h200x2(gs, container=True))) == []


def bad_fix(run) -> list:
    return [c for s in run.report.steps for f in s.findings if f.fix for c in f.fix.commands]


def test_recovery_action_asked_by_the_driver():
    run = health(h200x2(gpus(g0={"recovery_action": 1})))
    assert bad(run) == [("health.recovery-action", "fail", 0)]


def test_compute_mode_prohibited():
    assert ("health.compute-mode-prohibited", "fail", 1) in bad(health(h200x2(gpus(g1={"compute_mode": 2}))))


# ------------------------------------------------------------------ the kernel launch


def test_a_gpu_that_fails_the_launch():
    err = {"call": "cuCtxSynchronize", "code": 719, "name": "CUDA_ERROR_LAUNCH_FAILED", "message": "unspecified launch failure"}
    out = launch_records(devices={1: {"ok": False, "step": "launch", "error": err}})
    run = health(h200x2(launch=FakeCmd(stdout=out)))
    assert bad(run) == [("probe.launch.failed", "fail", 1)] and run.report.exit_code == 1


def test_wrong_results_are_silent_corruption():
    out = launch_records(devices={0: {"ok": False, "wrong": 1, "step": "done"}})
    assert bad(health(h200x2(launch=FakeCmd(stdout=out)))) == [("probe.launch.wrong-result", "fail", 0)]


def test_a_busy_gpu_is_not_judged():
    err = {"call": "cuDevicePrimaryCtxRetain", "code": 46, "name": "CUDA_ERROR_DEVICE_UNAVAILABLE",
           "message": "CUDA-capable device(s) is/are busy or unavailable"}
    out = launch_records(devices={1: {"ok": False, "step": "context", "error": err}})
    run = health(h200x2(gpus(g1={"compute_mode": 3, "procs": [[4242, 1 << 30]]}), launch=FakeCmd(stdout=out)))
    assert ("probe.launch.busy", "skip", 1) in findings(run)
    assert bad(run) == [] and run.report.exit_code == 0
    # the same error on a GPU nobody uses is a fault
    run = health(h200x2(launch=FakeCmd(stdout=out)))
    assert bad(run) == [("probe.launch.failed", "fail", 1)]


def test_a_gpu_full_of_another_process_is_not_judged_whatever_cuda_says():
    # the recon's hog: another process holding 142892 MiB of GPU 0's 143771
    err = {"call": "cuModuleLoadDataEx", "code": 701, "name": "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "message": "x"}
    out = launch_records(devices={0: {"ok": False, "step": "load", "error": err}})
    gs = gpus(g0={"procs": [[2662, 142892 << 20]], "mem": [143771 << 20, 143000 << 20]})
    run = health(h200x2(gs, launch=FakeCmd(stdout=out)))
    assert ("probe.launch.busy", "skip", 0) in findings(run) and run.report.exit_code == 0
    # the same error with the memory free is a fault of the GPU
    run = health(h200x2(gpus(g0={"procs": [[2662, 1 << 30]]}), launch=FakeCmd(stdout=out)))
    assert bad(run) == [("probe.launch.failed", "fail", 0)]


def test_a_launch_that_hangs_on_one_gpu_keeps_the_others_results():
    out = launch_records(devices={1: {"missing": True}}, done=False)
    run = health(h200x2(launch=FakeCmd(stdout=out, hang=True)))
    assert bad(run) == [("probe.launch.timeout", "fail", None)]
    f = next(f for s in run.report.steps for f in s.findings if f.id == "probe.launch.timeout")
    assert f.summary.startswith("CUDA device(s) 1 did not finish") and "launching on GPU(s) 1" in f.summary


def test_cuinit_that_hangs():
    run = health(h200x2(launch=FakeCmd(hang=True)))
    assert bad(run) == [("probe.launch.timeout", "fail", None)]
    assert "while initialising CUDA (cuInit)" in steps_summary(run, "launch")


def test_no_launch_and_hidden_gpus_are_skips():
    run = health(h200x2(), launch=False)
    assert steps(run)["launch"] == "skip" and run.report.exit_code == 0
    out = launch_records(1).replace('"visible_devices": null', '"visible_devices": "0"')
    run = health(h200x2(launch=FakeCmd(stdout=out)))
    assert ("probe.launch.not-tested", "skip", 1) in findings(run) and run.report.exit_code == 0


def test_a_gpu_cuda_does_not_enumerate():
    run = health(h200x2(launch=FakeCmd(stdout=launch_records(1))))
    assert bad(run) == [("probe.launch.not-enumerated", "fail", 1)]


def test_the_launch_child_that_cannot_start_is_cannot_tell():
    fs = h200x2()
    del fs.commands[next(k for k in fs.commands if "health_launch.py" in " ".join(k))]
    run = health(fs)
    assert ("probe.launch.unavailable", "skip", None) in findings(run) and run.report.exit_code == 2


# ------------------------------------------------------------------ verdict and reason


def test_a_crashed_step_is_cannot_tell_unless_something_failed():
    crashed = StepResult("memory", "m", Status.ERROR, "crash", (Finding("memory.crashed", Status.ERROR, "x"),))
    ok = StepResult("driver", "d", Status.OK, "ok", (Finding("driver.ok", Status.OK, "ok"),))
    failed = StepResult("xid", "x", Status.FAIL, "f", (Finding("health.xid", Status.FAIL, "f", evidence={"xid": 79}),))
    assert H.verdict([ok, crashed]) == 2
    assert H.verdict([ok, crashed, failed]) == 1
    assert H.verdict([ok]) == 0


def test_the_reason_fits_a_drain_reason():
    log = "".join(xid_line(c, b) for c in (48, 64, 79, 95, 119, 120) for b in ("0000:00:06", "0000:00:07"))
    run = health(h200x2(gpus(g0={"remapped_rows": [0, 1, 0, 1]}, g1={"temp": 99}), dmesg=log), gpus=4)
    assert run.report.exit_code == 1
    assert len(run.reason) <= H.MAX_REASON and "\n" not in run.reason
    assert run.reason.startswith("unhealthy: health.gpu-count: 2 GPUs, expected 4; health.remapped-rows-failure")


def test_garbled_launch_records_are_judged_not_crashed_on():
    from cudadoctor.facts.health_launch import LAUNCH_MARK

    out = (f'{LAUNCH_MARK}{{"stage": "init", "count": "two", "error": "boom"}}\n{LAUNCH_MARK}{{"stage": "device", '
           f'"ordinal": "x"}}\n{LAUNCH_MARK}not json\n')
    run = health(h200x2(launch=FakeCmd(stdout=out)))
    assert bad(run) == [("probe.launch.failed", "fail", None)] and "UNREADABLE" in steps_summary(run, "launch")
    assert not any(s.status.value == "error" for s in run.report.steps)


def test_a_mismatch_from_an_nvml_copy_on_ld_library_path_is_not_a_reboot():
    # (session 33) health gives the same verdict as check's driver step (tests/test_check_nvml_shadowed.py, recorded on
    # the H200): an old driver's libnvidia-ml first on LD_LIBRARY_PATH, the driver's own copy in the loader's cache
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/old/lib:/usr/lib/x86_64-linux-gnu"}
    fs = h200x2(init_error="LibRmVersionMismatch", env=env)
    fs.add_file("/opt/old/lib/libnvidia-ml.so.535.54.03", b"")
    fs.symlinks["/opt/old/lib/libnvidia-ml.so.1"] = "/opt/old/lib/libnvidia-ml.so.535.54.03"
    fs.add_file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04", b"")
    fs.symlinks["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04"
    run = health(fs)
    assert bad(run) == [("driver.nvml-shadowed", "fail", None)]
    f = next(f for s in run.report.steps for f in s.findings if f.id == "driver.nvml-shadowed")
    assert f.fix.commands[0] == "export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu"
    # the healthy path gathers none of it (no `ldconfig -p` on a node whose NVML answers)
    ok = h200x2()
    ok.add_exe("/sbin/ldconfig", FakeCmd(""))
    health(ok)
    assert not any("ldconfig" in " ".join(c) for c in ok.calls)
    fs.add_exe("/sbin/ldconfig", FakeCmd(""))
    health(fs)
    assert any("ldconfig" in " ".join(c) for c in fs.calls)
