"""bench maths and judgements: units, ratios, thresholds, expectations and causes chosen from NVML facts."""

from __future__ import annotations

import pytest

from cudadoctor.bench import judge
from cudadoctor.bench.peaks import GpuPeaks, expectations, find_peaks, parse_pcie, pcie_gbps
from cudadoctor.facts.types import NvmlGpu
from cudadoctor.model import Status

EXPECT = expectations()
H200 = find_peaks("NVIDIA H200")


def h200_gpu(**kw) -> NvmlGpu:
    """The NVML facts of the healthy H200 in tests/data/h200/nvidia_smi_q.xml."""
    base = dict(index=0, name="NVIDIA H200", uuid="GPU-8493e5ec-97b3-c7b9-38a5-38d6fbfc8bda", compute_capability="9.0",
                mig_mode=False, persistence_mode=True, pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
                clock_sm_mhz=1980, clock_sm_max_mhz=1980, clock_mem_mhz=3201, clock_mem_max_mhz=3201,
                throttle_reasons=["gpu_idle"], power_w=76.9, power_limit_w=700.0, temperature_c=30,
                ecc_enabled=True, processes=[])
    base.update(kw)
    return NvmlGpu(**base)


def rec(fid, **kw):
    d = {"stage": "measure", "id": fid, "checked": True}
    d.update(kw)
    return d


# ---------------------------------------------------------------- units and maths


def test_bandwidth_and_flops_maths():
    assert judge.bandwidth_gbps(2 * 4 * 2**30, 2e-3) == pytest.approx(4294.967, rel=1e-6)
    assert judge.matmul_tflops(8192, 8192, 8192, 1.39e-3) == pytest.approx(791.0, rel=1e-3)
    assert judge.bandwidth_gbps(100, 0) is None
    assert judge.matmul_tflops(10, 10, 10, 0) is None
    assert judge.ratio(4300, 4800) == pytest.approx(0.8958, rel=1e-3)
    assert judge.ratio(5, None) is None and judge.ratio(None, 5) is None
    assert judge.median([3, 1, 2, None]) == 2
    assert judge.median([4, 1, 2, 3]) == 2.5
    assert judge.median([]) is None


@pytest.mark.parametrize("value,unit,text", [
    (4310.0, "GB/s", "4.31 TB/s"), (52.14, "GB/s", "52.1 GB/s"), (7.5, "GB/s", "7.50 GB/s"),
    (789.6, "TFLOP/s", "790 TFLOP/s"), (52.34, "TFLOP/s", "52.3 TFLOP/s"), (0.85, "TFLOP/s", "850 GFLOP/s"),
    (10.78, "µs", "10.8 µs"), (0.852, "µs", "0.85 µs"), (None, "GB/s", "—"),
])
def test_formatting(value, unit, text):
    assert judge.fmt_value(value, unit) == text


def test_ratio_formatting():
    assert judge.fmt_ratio(0.8958) == "90%"
    assert judge.fmt_ratio(None) == "—"


def test_pcie_rates():
    assert parse_pcie("5x16") == (5, 16)
    assert parse_pcie(" 4 x 8 ") == (4, 8)
    assert parse_pcie("") == (None, None)
    assert pcie_gbps(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert pcie_gbps(4, 16) == pytest.approx(31.5, rel=1e-3)
    assert pcie_gbps(3, 4) == pytest.approx(3.94, rel=1e-3)
    assert pcie_gbps(None, 16) is None and pcie_gbps(9, 16) is None


# ---------------------------------------------------------------- the peaks table


@pytest.mark.parametrize("name,model", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA A10", "A10"),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"), ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 5090", "GeForce RTX 5090"), ("NVIDIA B200", "B200"), ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"), ("Tesla V100-PCIE-16GB", "V100 PCIe"),
])
def test_peaks_match_nvml_names(name, model):
    p = find_peaks(name)
    assert p is not None and p.model == model


@pytest.mark.parametrize("name", ["NVIDIA A100X", "NVIDIA A10G", "NVIDIA GeForce RTX 3090 Ti", "", "NVIDIA L40"])
def test_unknown_or_different_models_do_not_match_a_sibling(name):
    assert find_peaks(name) is None


def test_every_row_has_source_confidence_and_dense_rates():
    from cudadoctor.bench.peaks import rows

    for _, p in rows():
        assert p.source.startswith("https://"), p.model
        assert p.confidence in ("verified", "inferred"), p.model
        assert p.mem_bw_gbps and p.fp32, p.model
        if p.tf32 is not None:
            assert p.fp32 <= p.tf32 <= p.bf16, p.model  # dense TF32 at most the BF16 rate
    for kind in ("d2d", "matmul_bf16", "h2d_pinned"):
        e = EXPECT[kind]
        assert 0 < e["warn_below"] < e["typical"] <= 1


# ---------------------------------------------------------------- figures against expectations


def test_healthy_h200_figures_are_ok_and_ratios_right():
    """The issue's hand-measured H200 figures: D2D 4.3 TB/s, BF16 790 TFLOP/s."""
    gpu = h200_gpu()
    d2d = judge.judge_figure("d2d", rec("d2d", gbps=4300.0), "", H200, EXPECT, gpu)
    assert d2d.status is Status.OK and d2d.ratio == pytest.approx(4300 / 4800)
    assert d2d.expected == 4800 and not d2d.causes
    bf16 = judge.judge_figure("matmul_bf16", rec("matmul_bf16", tflops=790.0, n=8192), "", H200, EXPECT, gpu)
    assert bf16.status is Status.OK and bf16.ratio == pytest.approx(790 / 989.5)
    h2d = judge.judge_figure("h2d_pinned", rec("h2d_pinned", gbps=53.0), "", H200, EXPECT, gpu)
    assert h2d.status is Status.OK and h2d.expected == pytest.approx(63.0, rel=1e-3)
    assert "PCIe 5.0 x16" in h2d.expected_from


def test_value_is_computed_from_time_when_the_rate_is_missing():
    r = rec("matmul_bf16", n=8192, median_s=1.39e-3)
    assert judge.value_of("matmul_bf16", r) == pytest.approx(791.0, rel=1e-3)
    r = rec("d2d", traffic_bytes=2 * 2**30, median_s=5e-4)
    assert judge.value_of("d2d", r) == pytest.approx(4294.97, rel=1e-4)


def test_far_below_warns_and_at_threshold_does_not():
    gpu = h200_gpu()
    warn_at = EXPECT["d2d"]["warn_below"] * 4800
    just_ok = judge.judge_figure("d2d", rec("d2d", gbps=warn_at + 1), "", H200, EXPECT, gpu)
    low = judge.judge_figure("d2d", rec("d2d", gbps=warn_at - 1), "", H200, EXPECT, gpu)
    assert just_ok.status is Status.OK
    assert low.status is Status.WARN and low.causes


def test_wrong_result_fails_whatever_the_speed():
    f = judge.judge_figure("matmul_bf16", rec("matmul_bf16", tflops=800.0, checked=False, rel_error=0.5,
                                              rel_error_bound=0.01), "", H200, EXPECT, h200_gpu())
    assert f.status is Status.FAIL and "0.5" in f.error


def test_measurement_error_fails_and_missing_is_skip():
    f = judge.judge_figure("d2d", None, "RuntimeError: CUDA out of memory", H200, EXPECT)
    assert f.status is Status.FAIL and "out of memory" in f.error
    assert judge.judge_figure("d2d", None, "", H200, EXPECT).status is Status.SKIP


def test_unknown_gpu_shows_value_without_ratio():
    f = judge.judge_figure("matmul_bf16", rec("matmul_bf16", tflops=100.0), "", None, EXPECT)
    assert f.status is Status.OK and f.ratio is None and f.expected is None


def test_tf32_on_a_gpu_without_tf32_expects_the_fp32_rate():
    t4 = find_peaks("Tesla T4")
    f = judge.judge_figure("matmul_tf32", rec("matmul_tf32", tflops=6.0), "", t4, EXPECT)
    assert f.expected == t4.fp32 and f.status is Status.OK
    b = judge.judge_figure("matmul_bf16", rec("matmul_bf16", tflops=3.0), "", t4, EXPECT)
    assert b.ratio is None and b.status is Status.OK


def test_pcie_expectation_falls_back_to_the_datasheet_link():
    gpu = h200_gpu(pcie_gen_max=None, pcie_width_max=None)
    f = judge.judge_figure("h2d_pinned", rec("h2d_pinned", gbps=50.0), "", H200, EXPECT, gpu)
    assert f.expected == pytest.approx(63.0, rel=1e-3) and "datasheet" in f.expected_from


# ---------------------------------------------------------------- causes chosen from NVML facts


def cause_ids(fid, gpu, under=None, env=None, peaks=H200, host=None):
    return [c.id for c in judge.likely_causes(fid, gpu, under, env or {}, peaks, host)]


def test_pcie_x4_link_is_the_strong_cause_for_slow_host_copies():
    ids = cause_ids("h2d_pinned", h200_gpu(pcie_width=4), under={"pcie_gen": 5, "pcie_width": 4})
    assert ids[0] == "pcie-width"


def test_pcie_gen_low_under_load_is_strong_but_at_idle_only_possible():
    loaded = judge.likely_causes("h2d_pinned", h200_gpu(), {"pcie_gen": 1, "pcie_width": 16}, {}, H200)
    idle = judge.likely_causes("h2d_pinned", h200_gpu(pcie_gen=1), None, {}, H200)
    assert loaded[0].id == "pcie-gen" and loaded[0].strength == 3
    gen = next(c for c in idle if c.id == "pcie-gen")
    assert gen.strength == 1 and "idle" in gen.text


def test_full_link_points_at_the_host():
    assert cause_ids("d2h_pinned", h200_gpu(), {"pcie_gen": 5, "pcie_width": 16}) == ["pcie-host"]


def test_power_cap_and_low_power_limit_for_slow_matmul():
    gpu = h200_gpu(power_limit_w=300.0)
    under = {"throttle_reasons": ["sw_power_cap"], "clock_sm_mhz": 1200, "power_w": 299.0}
    ids = cause_ids("matmul_bf16", gpu, under)
    assert {"power-cap", "sm-clock-low", "power-limit-low"} <= set(ids)
    assert ids.index("power-cap") < ids.index("sm-clock-low")
    cmds = [c for c in judge.likely_causes("matmul_bf16", gpu, under, {}, H200) if c.id == "power-limit-low"][0]
    assert "sudo nvidia-smi -i 0 -pl 700" in cmds.commands


def test_thermal_reason_names_the_temperature():
    under = {"throttle_reasons": ["hw_thermal_slowdown", "sw_thermal_slowdown"], "temperature_c": 91}
    causes = judge.likely_causes("matmul_fp32", h200_gpu(), under, {}, H200)
    thermal = [c for c in causes if c.id == "thermal"]
    assert len(thermal) == 1 and "91" in thermal[0].text


def test_idle_throttle_reason_read_after_the_run_is_not_a_cause():
    assert cause_ids("matmul_bf16", h200_gpu(throttle_reasons=["gpu_idle"], clock_sm_mhz=345)) == ["none-visible"]


def test_memory_clock_low_is_a_cause_for_d2d_only():
    under = {"clock_mem_mhz": 1600, "throttle_reasons": []}
    assert "mem-clock-low" in cause_ids("d2d", h200_gpu(), under)
    assert "mem-clock-low" not in cause_ids("matmul_bf16", h200_gpu(), under)


def test_mig_other_processes_and_persistence():
    gpu = h200_gpu(mig_mode=True, persistence_mode=False, processes=[{"pid": 4242, "used_mib": 10240}])
    ids = cause_ids("d2d", gpu)
    assert ids[0] == "mig"
    assert "other-processes" in ids and ids[-1] == "persistence-off"
    text = [c.text for c in judge.likely_causes("d2d", gpu, None, {}, H200) if c.id == "other-processes"][0]
    assert "4242" in text


def test_ecc_is_a_cause_on_gddr_only():
    gpu = h200_gpu(name="NVIDIA L40S", ecc_enabled=True)
    assert "ecc-gddr" in cause_ids("d2d", gpu, peaks=find_peaks("NVIDIA L40S"))
    assert "ecc-gddr" not in cause_ids("d2d", h200_gpu(ecc_enabled=True))


def test_memory_repair_pending():
    assert cause_ids("d2d", h200_gpu(remapped_rows_pending=True))[0] == "memory-repair-pending"


def test_environment_causes():
    assert "tf32-override" in cause_ids("matmul_tf32", h200_gpu(), env={"NVIDIA_TF32_OVERRIDE": "0"})
    assert "tf32-override" not in cause_ids("matmul_bf16", h200_gpu(), env={"NVIDIA_TF32_OVERRIDE": "0"})
    assert cause_ids("launch", h200_gpu(), env={"CUDA_LAUNCH_BLOCKING": "1"})[0] == "launch-blocking"
    assert "launch-blocking" not in cause_ids("launch", h200_gpu(), env={"CUDA_LAUNCH_BLOCKING": "0"})
    assert "profiler-injected" in cause_ids("d2d", h200_gpu(), env={"CUDA_INJECTION64_PATH": "/opt/nsys/lib.so"})


def test_no_nvml_still_gives_an_answer():
    assert cause_ids("matmul_bf16", None) == ["none-visible"]


# ---------------------------------------------------------------- launch cost


def launch_rec(eager_us, graph_us, **kw):
    return rec("launch", eager_us=eager_us, graph_us=graph_us, kernels=1000, **kw)


def test_launch_bound_judgement_on_the_h200_reference():
    """fixtures/h200-cuda13/launch.txt: eager 10.78 µs, graph 0.85 µs per kernel."""
    f = judge.judge_figure("launch", launch_rec(10.78, 0.85), "", H200, EXPECT, h200_gpu())
    assert f.status is Status.OK
    assert f.extra["launch_bound"] is True and f.extra["eager_over_graph"] == pytest.approx(12.68, rel=1e-2)
    assert "CUDA graphs" in f.advice


def test_not_launch_bound_when_eager_is_close_to_graph():
    f = judge.judge_figure("launch", launch_rec(2.0, 1.0), "", H200, EXPECT)
    assert f.extra["launch_bound"] is False and not f.advice


def test_slow_eager_launch_warns_with_host_causes():
    host = {"cpu_governor": "powersave", "torch_debug": True}
    f = judge.judge_figure("launch", launch_rec(80.0, 1.0), "", H200, EXPECT, h200_gpu(),
                           {"CUDA_LAUNCH_BLOCKING": "1"}, host)
    assert f.status is Status.WARN
    ids = [c.id for c in f.causes]
    assert ids[:2] == ["launch-blocking", "torch-debug-build"] and "cpu-governor" in ids


def test_wrong_launch_count_fails():
    f = judge.judge_figure("launch", launch_rec(10.0, 1.0, checked=False, check_error="counter"), "", H200, EXPECT)
    assert f.status is Status.FAIL


# ---------------------------------------------------------------- the whole run


def test_judge_run_orders_figures_and_marks_the_step_the_child_died_in():
    measures = {"launch": launch_rec(10.0, 0.9), "d2d": rec("d2d", gbps=4300.0)}
    figs = judge.judge_run(measures, {}, H200, EXPECT, h200_gpu(), unfinished="host",
                           stop_reason="the torch bench gave no answer within 240 s (killed)")
    by = {f.id: f for f in figs}
    assert [f.id for f in figs] == judge.ORDER
    assert by["launch"].status is Status.OK and by["d2d"].status is Status.OK
    assert by["h2d_pinned"].status is Status.FAIL and "240 s" in by["h2d_pinned"].error
    assert by["matmul_bf16"].status is Status.SKIP
    assert judge.overall(figs) is Status.FAIL


def test_judge_run_step_errors_and_skips():
    figs = {f.id: f for f in judge.judge_run({}, {"host": "RuntimeError: pin_memory failed"}, H200, EXPECT,
                                              skipped={"probe_gemm": "probe GEMMs not built: no nvcc"})}
    assert figs["d2h_pageable"].status is Status.FAIL
    assert figs["probe_gemm_tiled"].status is Status.SKIP and "no nvcc" in figs["probe_gemm_tiled"].summary


def test_figure_json_is_plain_data():
    import json

    f = judge.judge_figure("d2d", rec("d2d", gbps=1000.0), "", H200, EXPECT, h200_gpu(processes=[{"pid": 1}]))
    d = json.loads(json.dumps(f.to_dict()))
    assert d["status"] == "warn" and d["causes"][0]["id"] == "other-processes"
    assert d["unit"] == "GB/s" and d["ratio"] == pytest.approx(1000 / 4800, abs=1e-4)


def test_overall_ignores_skips():
    a = judge.Figure("d2d", "x", "GB/s", status=Status.SKIP)
    b = judge.Figure("launch", "y", "µs", status=Status.WARN)
    assert judge.overall([a, b]) is Status.WARN
    assert judge.overall([a]) is Status.OK


def test_gddr_flag():
    assert GpuPeaks("x", memory="GDDR6X").gddr and not GpuPeaks("y", memory="HBM3e").gddr
