"""bench: reading the child's output (whole, partial, torn, crashed) and the run end to end on a FakeSystem."""

from __future__ import annotations

import json

from fakes.system import FakeCmd, FakeSystem
from typer.testing import CliRunner

from cudadoctor.bench import runner
from cudadoctor.bench.records import MARK, build_run, parse_records
from cudadoctor.facts.types import NvmlGpu, NvmlInfo
from cudadoctor.model import Fact, Status

PY = "/opt/torch/.venv/bin/python3"
UUID = "8493e5ec-97b3-c7b9-38a5-38d6fbfc8bda"


def line(stage, **kw) -> str:
    kw["stage"] = stage
    return f"{MARK} {json.dumps(kw)}\n"


def measure(fid, **kw) -> str:
    kw.setdefault("checked", True)
    return line("measure", id=fid, **kw)


HEAD = (line("start", python=PY, version="3.12.3", quick=False, env={}) +
        line("import", installed=True, version="2.11.0+cu130", cuda="13.0", debug=False, import_s=2.1) +
        line("device", index=0, name="NVIDIA H200", capability="9.0", total_bytes=150 << 30, free_bytes=149 << 30,
             l2_bytes=60 << 20, sm_count=132, uuid=UUID, plan={"matmul_n": 8192}))
UNDER = {"clock_sm_mhz": 1980, "clock_mem_mhz": 3201, "pcie_gen": 5, "pcie_width": 16, "throttle_reasons": []}
# The hand-measured H200 figures (launch from fixtures/h200-cuda13/launch.txt).
LAUNCH = line("begin", id="launch") + measure("launch", eager_us=10.78, graph_us=0.85, kernels=1000)
D2D = line("begin", id="d2d") + measure("d2d", bytes=2 << 30, traffic_bytes=4 << 30, gbps=4300.0, median_s=1e-3,
                                        under_load=UNDER)
HOST = line("begin", id="host") + "".join(
    measure(f, bytes=512 << 20, traffic_bytes=512 << 20, gbps=g, under_load=UNDER if "pinned" in f else None)
    for f, g in (("h2d_pinned", 53.0), ("d2h_pinned", 52.0), ("h2d_pageable", 20.0), ("d2h_pageable", 15.0)))
MATMUL = "".join(line("begin", id=f"matmul_{k}") + measure(f"matmul_{k}", n=8192, tflops=t, under_load=UNDER)
                 for k, t in (("fp32", 50.0), ("tf32", 380.0), ("bf16", 790.0)))
FULL = HEAD + LAUNCH + D2D + HOST + MATMUL + line("done", seconds=9.5)


def nvml_fact(**kw) -> Fact:
    g = dict(index=0, name="NVIDIA H200", uuid="GPU-" + UUID, compute_capability="9.0", mig_mode=False,
             persistence_mode=True, pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
             clock_sm_max_mhz=1980, clock_mem_max_mhz=3201, power_limit_w=700.0, ecc_enabled=True)
    g.update(kw)
    return Fact.found(NvmlInfo(driver_version="580.159.04", device_count=1, gpus=[NvmlGpu(**g)]), "NVML")


def system_with(torch_answer, driver_answer=None) -> FakeSystem:
    s = FakeSystem(python="/usr/bin/python3")

    def own(argv):
        if "cudadoctor.bench.driver_bench" in argv:
            return driver_answer
        return FakeCmd(returncode=1, stderr="unexpected")

    s.add_exe(PY, lambda argv: torch_answer)
    s.add_exe("/usr/bin/python3", own)
    return s


def bench(system, nvml=None, **kw):
    opts = runner.BenchOptions(python=PY, **kw)
    return runner.run_bench(system, opts, nvml_fact=nvml or nvml_fact())


def by_id(result) -> dict:
    return {f.id: f for f in result.figures}


# ---------------------------------------------------------------- records


def test_parse_skips_junk_and_a_torn_last_line():
    text = "Warning: numpy missing\n" + HEAD + LAUNCH + MARK + ' {"stage": "measure", "id": "d2d", "gb'
    recs = parse_records(text)
    assert [r["stage"] for r in recs] == ["start", "import", "device", "begin", "measure"]
    run = build_run(recs)
    assert run.device["name"] == "NVIDIA H200" and "launch" in run.measures and "d2d" not in run.measures
    assert not run.done and run.unfinished == "launch"


def test_unfinished_step_after_partial_output():
    run = build_run(parse_records(HEAD + LAUNCH + line("begin", id="d2d")))
    assert run.unfinished == "d2d" and run.doing() == "measuring d2d"
    run = build_run(parse_records(HEAD))
    assert run.unfinished == "" and run.doing() == "the first measurement"
    run = build_run(parse_records(FULL))
    assert run.done and run.unfinished == ""


def test_records_of_a_broken_torch():
    run = build_run(parse_records(line("start", python=PY, env={"CUDA_LAUNCH_BLOCKING": "1"}) +
                                  line("import", installed=False, error="OSError: libcudart.so.13", not_found=False) +
                                  line("done")))
    assert run.torch_installed is True and "libcudart" in run.import_error
    assert run.env == {"CUDA_LAUNCH_BLOCKING": "1"}


# ---------------------------------------------------------------- whole runs


def test_healthy_h200_run():
    r = bench(system_with(FakeCmd(stdout=FULL)))
    figs = by_id(r)
    assert r.backend == "torch" and r.peaks.model == "H200 SXM" and r.gpu.uuid == "GPU-" + UUID
    for fid in ("launch", "d2d", "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable", "matmul_fp32",
                "matmul_tf32", "matmul_bf16"):
        assert figs[fid].status is Status.OK, (fid, figs[fid].summary)
    assert figs["launch"].extra["launch_bound"] is True
    # no nvcc/NVRTC on the fake: the probe GEMMs are skipped with the reason
    assert figs["probe_gemm_tiled"].status is Status.SKIP and "not built" in figs["probe_gemm_tiled"].summary
    assert r.status is Status.OK and not r.stop_reason
    d = json.loads(json.dumps(r.to_dict()))
    assert d["status"] == "ok" and d["datasheet"]["model"] == "H200 SXM" and len(d["figures"]) == 11


def test_timeout_keeps_finished_figures_and_blames_the_step():
    partial = HEAD + LAUNCH + D2D + line("begin", id="host") + MARK + ' {"stage": "meas'
    # a hung child killed at its timeout, after it printed part of its output (FakeCmd(hang=True) has none)
    from cudadoctor.system.proc import ProcResult

    class Hung(FakeSystem):
        def run(self, argv, timeout, env=None, input_bytes=None, cwd=None):
            if argv[0] == PY:
                return ProcResult(tuple(argv), stdout=partial, timed_out=True, timeout_s=timeout, elapsed_s=timeout)
            return super().run(argv, timeout, env, input_bytes, cwd)

    h = Hung(python="/usr/bin/python3")
    r = bench(h, quick=True)
    figs = by_id(r)
    assert figs["launch"].status is Status.OK and figs["d2d"].status is Status.OK
    assert figs["h2d_pinned"].status is Status.FAIL and "90 s" in figs["h2d_pinned"].error
    assert figs["matmul_bf16"].status is Status.SKIP
    assert "measuring host" in r.stop_reason and r.status is Status.FAIL


def test_segfault_in_a_matmul():
    out = HEAD + LAUNCH + D2D + HOST + line("begin", id="matmul_fp32")
    r = bench(system_with(FakeCmd(stdout=out, returncode=-11)))
    figs = by_id(r)
    assert "SIGSEGV" in r.stop_reason and "matmul_fp32" in r.stop_reason
    assert figs["matmul_fp32"].status is Status.FAIL and figs["matmul_tf32"].status is Status.SKIP
    assert figs["h2d_pinned"].status is Status.OK


def test_child_crash_record():
    out = HEAD + line("begin", id="d2d") + line("crash", error="RuntimeError: CUDA error: an illegal memory access")
    r = bench(system_with(FakeCmd(stdout=out, returncode=0)))
    assert "illegal memory access" in r.stop_reason and by_id(r)["d2d"].status is Status.FAIL


def test_measurement_error_is_reported_per_figure():
    out = HEAD + line("begin", id="matmul_bf16") + line("error", id="matmul_bf16",
                                                        error="RuntimeError: CUDA out of memory") + line("done")
    r = bench(system_with(FakeCmd(stdout=out)))
    f = by_id(r)["matmul_bf16"]
    assert f.status is Status.FAIL and "out of memory" in f.error and not r.stop_reason


def test_slow_figures_come_with_causes_from_nvml():
    slow = HEAD + line("begin", id="host") + measure(
        "h2d_pinned", gbps=6.0, under_load={"pcie_gen": 5, "pcie_width": 2}) + line("begin", id="matmul_bf16") + \
        measure("matmul_bf16", tflops=300.0, under_load={"throttle_reasons": ["sw_power_cap"], "clock_sm_mhz": 900}) + \
        line("done")
    r = bench(system_with(FakeCmd(stdout=slow)), nvml=nvml_fact(power_limit_w=350.0))
    figs = by_id(r)
    assert figs["h2d_pinned"].status is Status.WARN and figs["h2d_pinned"].causes[0].id == "pcie-width"
    ids = [c.id for c in figs["matmul_bf16"].causes]
    assert figs["matmul_bf16"].status is Status.WARN and {"power-cap", "power-limit-low", "sm-clock-low"} <= set(ids)


def test_gpu_is_picked_by_uuid_not_index():
    info = NvmlInfo(gpus=[NvmlGpu(index=0, name="NVIDIA L4", uuid="GPU-aaaa"),
                          NvmlGpu(index=1, name="NVIDIA H200", uuid="GPU-" + UUID)])
    g = runner.pick_gpu(Fact.found(info), UUID, 0)
    assert g.index == 1
    assert runner.pick_gpu(Fact.found(info), "", 0).index == 0
    assert runner.pick_gpu(Fact.failed("NVML", "x"), UUID, 0) is None


def test_torch_missing_falls_back_to_the_driver_api():
    no_torch = line("start", python=PY, env={}) + line("import", installed=False, not_found=True,
                                                       error="ModuleNotFoundError: No module named 'torch'") + line("done")
    drv = (line("start", python="/usr/bin/python3", backend="driver", env={}) +
           line("device", index=0, name="NVIDIA H200", capability="9.0", uuid=UUID) +
           line("begin", id="copies") + measure("d2d", gbps=4250.0, traffic_bytes=2 << 30) +
           measure("h2d_pinned", gbps=52.0) + line("done"))
    r = bench(system_with(FakeCmd(stdout=no_torch), FakeCmd(stdout=drv)))
    figs = by_id(r)
    assert r.backend == "driver" and r.device_name == "NVIDIA H200"
    assert figs["d2d"].status is Status.OK and figs["h2d_pinned"].status is Status.OK
    assert figs["matmul_bf16"].status is Status.SKIP and "needs torch" in figs["matmul_bf16"].summary
    assert any("not installed" in n for n in r.notes)


def test_driver_fallback_without_libcuda():
    no_cuda = HEAD[:0] + line("start", python=PY, env={}) + line("import", installed=True, version="2.13.0+cpu") + \
        line("error", id="cuda", error="AssertionError: Torch not compiled with CUDA enabled") + line("done")
    drv = line("start", backend="driver", env={}) + line("crash", error="DriverLoadError: cannot load libcuda.so.1")
    r = bench(system_with(FakeCmd(stdout=no_cuda), FakeCmd(stdout=drv)))
    assert r.backend == "driver" and "libcuda" in r.stop_reason and "cuInit" in r.stop_reason
    assert r.status is Status.FAIL


def test_target_interpreter_missing():
    s = FakeSystem(python="/usr/bin/python3")
    s.add_exe("/usr/bin/python3", lambda argv: FakeCmd(stdout=line("start", backend="driver") +
                                                       line("crash", error="DriverLoadError: no libcuda")))
    r = runner.run_bench(s, runner.BenchOptions(python="/nope/python"), nvml_fact=nvml_fact())
    assert any("/nope/python does not exist" in n for n in r.notes)


def test_stop_reason_wording():
    from cudadoctor.system.proc import ProcResult

    run = build_run(parse_records(HEAD + line("begin", id="d2d")))
    assert "no answer within 60 s while measuring d2d" in runner.stop_reason(
        ProcResult(("x",), timed_out=True, timeout_s=60.0), run)
    assert runner.stop_reason(ProcResult(("x",), returncode=0), build_run(parse_records(FULL))) == ""
    assert "exit code 3" in runner.stop_reason(ProcResult(("x",), returncode=3, stderr="boom"), run)


# ---------------------------------------------------------------- command line


def test_cli_usage_errors():
    from cudadoctor.cli import app

    res = CliRunner().invoke(app, ["bench", "--python", "/no/such/python"])
    assert res.exit_code == 2 and "no executable" in res.output
    res = CliRunner().invoke(app, ["bench", "--device", "-1"])
    assert res.exit_code == 2
    res = CliRunner().invoke(app, ["bench", "--timeout", "0"])
    assert res.exit_code == 2


def test_cli_json_is_valid_and_exit_code_follows_status(monkeypatch):
    from cudadoctor.cli import app

    fake = system_with(FakeCmd(stdout=FULL))
    monkeypatch.setattr("cudadoctor.system.host.HostSystem", lambda: fake)
    real = runner.run_bench
    monkeypatch.setattr(runner, "run_bench", lambda system, opts, nvml_fact=None: real(
        system, runner.BenchOptions(python=PY, quick=opts.quick), nvml_fact=globals()["nvml_fact"]()))
    res = CliRunner().invoke(app, ["bench", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["status"] == "ok" and d["figures"][0]["id"] == "launch"
    res = CliRunner().invoke(app, ["bench", "--quick"])
    assert res.exit_code == 0 and "BF16 matmul" in res.output and "launch-bound" in res.output
