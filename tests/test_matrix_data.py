"""The matrix tables: schema and consistency, and rows checked by hand against their sources."""

from __future__ import annotations

import copy

import pytest

from cudadoctor.matrix import Matrix, load
from cudadoctor.matrix.schema import validate
from cudadoctor.matrix.versions import cudnn_from_int


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def test_every_table_is_sound(m):
    assert validate(m.tables) == []


@pytest.mark.parametrize("breakage", ["overlap_cudnn", "no_source", "bad_version", "driver_falls", "bad_arch"])
def test_validation_catches_broken_tables(m, breakage):
    t = copy.deepcopy(m.tables)
    if breakage == "overlap_cudnn":
        t["cudnn"]["cudnn"][0]["last"] = "8.1"  # 7.5-8.1 overlaps the 8.0 row
    elif breakage == "no_source":
        t["torch"]["release"][0]["variant"][0]["source"] = []
    elif breakage == "bad_version":
        t["drivers"]["toolkit"][0]["linux"] = "r384"
    elif breakage == "driver_falls":
        t["drivers"]["toolkit"][-1]["linux"] = "400.1"
    elif breakage == "bad_arch":
        t["torch"]["release"][0]["variant"][0]["archs"].append("4.4")
    assert validate(t) != []


# --- CUDA -> minimum driver. Source: CUDA 13.1 release notes, Table 3 (RN131) and the
# minor-version compatibility guide (MVC): 12.4 GA >=550.54.14 / >=551.61; 12.x MVC >=525.60.13.
def test_min_driver_12_4(m):
    r = m.min_driver("12.4")
    assert r["full"]["linux"] == "550.54.14" and r["full"]["windows"] == "551.61"
    assert r["minor_compat"]["linux"] == "525.60.13" and r["minor_compat"]["windows"] == "527.41"
    assert r["driver"] == "550.54.14"
    assert m.min_driver("12.4", os="windows")["driver"] == "551.61"


def test_min_driver_update_release(m):
    # RN131: 12.4 Update 1 needs >=550.54.15; 13.0 Update 2 needs >=580.95.05
    assert m.min_driver("12.4.1")["full"]["linux"] == "550.54.15"
    assert m.min_driver("13.0.2")["full"]["linux"] == "580.95.05"
    # 11.8 (RN131 >=520.61.05); 11.x MVC floor >=450.80.02
    r = m.min_driver("11.8")
    assert r["full"]["linux"] == "520.61.05" and r["minor_compat"]["linux"] == "450.80.02"


def test_min_driver_before_minor_compat_and_beyond_data(m):
    assert m.min_driver("10.2")["minor_compat"] is None  # MVC starts with 11.1
    assert m.min_driver("10.2")["full"]["linux"] == "440.33"
    beyond = m.min_driver("14.0")
    assert beyond["full"] is None and "data stops" in beyond["note"]
    assert m.min_driver("8.0") is None and m.min_driver("twelve") is None


# --- driver branch -> CUDA. Source: real nvidia-smi banners (SMI): 535.104.05 -> 12.2,
# 565.57.01 -> 12.7, 576.57 (Windows R575) -> 12.9; the H200 fixture: 580.159.04 -> 13.0.
@pytest.mark.parametrize("driver,cuda", [("535.104.05", "12.2"), ("565.57.01", "12.7"), ("576.57", "12.9"),
                                         ("580.159.04", "13.0"), ("525.60.13", "12.0"), ("610.43.02", "13.3")])
def test_max_cuda_for_driver(m, driver, cuda):
    assert m.max_cuda_for_driver(driver) == cuda


def test_driver_runs_cuda(m):
    assert m.driver_runs_cuda("580.159.04", "13.0") == "full"
    assert m.driver_runs_cuda("580.159.04", "11.8") == "full"  # backward compatible
    assert m.driver_runs_cuda("525.60.13", "12.8") == "minor-version"
    assert m.driver_runs_cuda("570.133.07", "13.0") == "too-old"  # cu130 needs R580
    assert m.driver_runs_cuda("470.57.02", "12.1") == "too-old"


# --- architectures and nvcc. Sources: LLVM Cuda.cpp / CMake (sm_61 last in 12.9, sm_120 from 12.8),
# CUDA 13.0 `nvcc --list-gpu-arch` (starts at compute_75, includes compute_88 and compute_110).
def test_arch_rows(m):
    assert m.arch_name((9, 0)) == "Hopper"
    assert "H200" in m.arch_for_cc((9, 0))["examples"]
    assert m.arch_for_cc((12, 0))["architecture"] == "Blackwell"
    assert m.arch_for_cc((4, 0)) is None


@pytest.mark.parametrize("nvcc,cc,ok", [("13.0", (6, 1), False), ("12.9", (6, 1), True), ("12.6", (12, 0), False),
                                        ("12.8", (12, 0), True), ("11.8", (8, 9), True), ("11.5", (8, 9), False),
                                        ("12.0", (3, 5), False), ("11.8", (3, 5), True), ("13.0", (7, 5), True),
                                        ("13.0", (11, 0), True), ("12.9", (11, 0), False), ("13.0", (10, 1), False)])
def test_nvcc_supports_cc(m, nvcc, cc, ok):
    assert m.nvcc_supports_cc(nvcc, cc) is ok


def test_nvcc_variants(m):
    nv = m.nvcc_for_cc((9, 0))
    assert {"target": "sm_90a", "first": "12.0"} in nv["variants"]
    assert m.nvcc_for_cc((10, 1))["renamed_to"] == "11.0"


@pytest.mark.parametrize("name,cc", [("RTX 4090", "8.9"), ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA H200", "9.0"),
                                     ("Tesla V100-SXM2-16GB", "7.0"), ("GeForce GTX 1080", "6.1"), ("A10", "8.6"),
                                     ("NVIDIA A100-SXM4-80GB", "8.0")])
def test_find_gpu(m, name, cc):
    assert [h["cc"] for h in m.find_gpu(name)] == [cc]


def test_find_gpu_ambiguous_and_unknown(m):
    assert {h["cc"] for h in m.find_gpu("RTX 6000")} == {"7.5", "8.9"}
    assert m.find_gpu("Radeon RX 7900") == []


# --- torch wheels. Sources: pytorch/builder build_cuda.sh (BLD), .ci/manywheel/build_cuda.sh (PTCI),
# pytorch#157517 (2.8 cu128 on PyPI, sm_70 re-added), pytorch#172352 (2.11 cu128 drops Volta),
# the H200 fixture (2.11.0+cu130 arch list sm_75..sm_120, no PTX, cuDNN 91900).
def _variant(m, torch, cu):
    return next(v for v in m.torch_variants(torch) if v["cu"] == cu)


def test_torch_arch_lists(m):
    assert _variant(m, "2.8.0", "cu128")["arch_list"] == ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert _variant(m, "2.8.0", "cu128")["pypi_default"] is True
    assert _variant(m, "2.11.0", "cu130")["arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert _variant(m, "2.11.0", "cu130")["cudnn"] == "9.19.0.56"
    assert "7.0" not in _variant(m, "2.11", "cu128")["archs"]
    assert _variant(m, "2.4.1", "cu118")["archs"][0] == "3.7"
    assert _variant(m, "2.6.0", "cu124")["archs"] == ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"]
    assert [v["cu"] for v in m.torch_variants("2.12")] == ["cu126", "cu130", "cu132"]  # cu128 removed
    assert m.torch_variants("1.12") == []


def test_torch_pip_command(m):
    v = _variant(m, "2.9.1", "cu126")
    assert v["index_url"] == "https://download.pytorch.org/whl/cu126"
    assert v["pip"] == "pip install 'torch==2.9.*' --index-url https://download.pytorch.org/whl/cu126"


def test_recommend_torch(m):
    # RTX 5090 (12.0) on an R570 driver (CUDA 12.8): only cu128 wheels from 2.7 on; newest first
    recs = m.recommend_torch((12, 0), "570.133.07")
    assert recs[0]["torch"] == "2.11" and recs[0]["cu"] == "cu128"
    assert all(r["cuda"].startswith("12.") for r in recs)
    assert recs[-1]["torch"] == "2.7"
    # GTX 1080 (6.1) on R580: only cu126 and older variants carry sm_60/61
    recs = m.recommend_torch((6, 1), "580.65.06")
    assert recs[0]["torch"] == "2.14" and recs[0]["cu"] == "cu126"
    assert all(r["gpu"] == "native" for r in recs)


def test_torch_support_for_cc(m):
    assert m.torch_support_for_cc((6, 1))["newest_torch"] == "2.14"
    assert m.torch_support_for_cc((12, 0))["oldest_torch"] == "2.7"
    assert m.torch_support_for_cc((3, 0))["variants"] == []


# --- cuDNN (NVIDIA cuDNN support matrices: 8.9.x for CUDA 12.0-12.2 and 11.x; 9.17 for 12.x and
# 13.0-13.1 with cc >= 7.5) and host compilers (cpp_extension.py: CUDA 12.0-12.2 gcc < 13;
# CUDA 13.0 host_config.h: gcc <= 15, clang < 21).
def test_cudnn(m):
    assert m.cudnn_supports_cuda("8.9.2", "12.1") is True
    assert m.cudnn_supports_cuda("8.9.2", "12.4") is False
    assert m.cudnn_supports_cuda("9.17.1", "13.0") is True
    assert m.cudnn_row("9.13.0")["cc_min"] == "7.5"
    assert cudnn_from_int(91900) == "9.19.0" and cudnn_from_int(8902) == "8.9.2"


def test_compilers(m):
    assert m.compiler_bounds("12.1")["gcc_max"] == 12
    assert m.compiler_bounds("12.4")["gcc_max"] == 13
    assert m.compiler_bounds("13.0")["gcc_max"] == 15 and m.compiler_bounds("13.0")["clang_max"] == 20
    assert m.compiler_bounds("11.1")["clang_max"] == 10
    assert m.first_cuda_for_gcc(13) == "12.3"
    assert m.compiler_bounds("7.5") is None


# --- the rows added for November 2026, each checked against its source by hand.
# torch 2.15 (PYPI: 2.15.0 uploaded 2026-10-28, requires cuda-toolkit 13.2.2, cuDNN 9.26.0.51, NCCL 2.30.7;
# WHEEL: libtorch_cuda.so of the PyPI cp312 x86_64 wheel read by scripts/refresh_matrix.py: sm_75..sm_120)
def test_torch_2_15(m):
    assert m.torch_data_stops_at == "2.15"
    assert [v["cu"] for v in m.torch_variants("2.15.0")] == ["cu130", "cu132", "cu134"]  # cu126 gone (#190385)
    v = _variant(m, "2.15.0", "cu132")
    assert v["pypi_default"] and v["confidence"] == "verified" and "WHEEL" in v["source"]
    assert v["arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert (v["cudnn"], v["nccl"]) == ("9.26.0.51", "2.30.7")
    assert _variant(m, "2.15", "cu134")["role"] == "experimental"
    # stable variants are recommended before the experimental (and inferred) cu134
    recs = m.recommend_torch((12, 0), "620.70.06", "13.5")
    assert [(r["torch"], r["cu"]) for r in recs[:3]] == [("2.15", "cu132"), ("2.15", "cu130"), ("2.15", "cu134")]
    # no 2.15 wheel for Pascal: the newest torch for a GTX 1080 stays 2.14 cu126
    assert m.torch_support_for_cc((6, 1))["newest_torch"] == "2.14"
    # Rubin (10.7) runs 2.15's sm_100 SASS (same major)
    assert any(r["torch"] == "2.15" and r["gpu"] == "native" for r in m.recommend_torch((10, 7), "620.70.06", "13.5"))


def test_nccl_pins_backfilled(m):
    # PTNCCL: pytorch#190386 (2.10-2.12), #187075 (2.13), #194367 (2.14)
    assert _variant(m, "2.10", "cu128")["nccl"] == "2.27.5" and _variant(m, "2.12", "cu132")["nccl"] == "2.29.7"
    assert _variant(m, "2.14", "cu126")["nccl"] == "2.29.3" and _variant(m, "2.14", "cu130")["nccl"] == "2.30.7"


# CUDA 13.4 GA = 13.4.1 (RN134) with the R615 driver released the same day (NVREDIST 615.71.09, 2026-09-09);
# 13.5.0 with 620.70.06, whose manifest carries the CUDA 13.5 compat package; 13.2.2's runfile names 595.71.05
@pytest.mark.parametrize("cuda,driver", [("13.4", "615.71.09"), ("13.4.1", "615.71.09"), ("13.5", "620.70.06"),
                                         ("13.5.0", "620.70.06"), ("13.2.2", "595.71.05")])
def test_min_driver_13_4_and_13_5(m, cuda, driver):
    r = m.min_driver(cuda)
    assert r["full"]["linux"] == driver and r["minor_compat"]["linux"] == "580.65.06" and not r["note"]


@pytest.mark.parametrize("driver,cuda", [("615.71.09", "13.4"), ("617.14", "13.4"), ("620.70.06", "13.5")])
def test_branches_r615_r620(m, driver, cuda):
    assert m.max_cuda_for_driver(driver) == cuda


def test_host_compilers_13_4_13_5(m):
    # NVCRT: host_config.h of 13.4.59/13.4.92/13.5.37: "__GNUC__ > 16" and "__clang_major__ >= 23" refused
    for cuda in ("13.4", "13.5"):
        b = m.compiler_bounds(cuda)
        assert (b["gcc_max"], b["clang_max"]) == (16, 22) and b["confidence"] == "verified"
    assert (m.compiler_bounds("13.3")["gcc_max"], m.compiler_bounds("13.3")["clang_max"]) == (15, 21)
    assert m.first_cuda_for_gcc(16) == "13.4"


def test_rubin_targets(m):
    # NVCC134: nvcc 13.4.92 lists sm_107 and accepts sm_107a/sm_107f; 13.0 refuses sm_107
    assert m.nvcc_supports_cc("13.4", (10, 7)) is True and m.nvcc_supports_cc("13.3", (10, 7)) is False
    assert {v["target"] for v in m.nvcc_for_cc((10, 7))["variants"]} == {"sm_107a", "sm_107f"}
    assert [h["cc"] for h in m.find_gpu("NVIDIA R200")] == ["10.7"]


def test_cudnn_9_25_to_9_28(m):
    assert m.cudnn_row("9.26.0")["first"] == "9.25" and m.cudnn_data_stops_at == "9.28"
    assert m.cudnn_supports_cuda("9.26.0", "13.4") is True and m.cudnn_supports_cuda("9.28.1", "12.9") is True
    assert m.cudnn_supports_cuda("9.26.0", "11.8") is False


def test_index_snapshot_is_covered_by_the_tables(m):
    assert m.index["checked"] == "2026-11-30" and m.index["newest"]["torch"]["version"] == "2.15.0"


@pytest.mark.parametrize("breakage", ["torch_not_added", "bad_date", "cuda_not_added"])
def test_validation_catches_a_half_done_refresh(m, breakage):
    t = copy.deepcopy(m.tables)
    if breakage == "torch_not_added":  # the index had 2.15.0 but the 2.15 rows were not written
        t["torch"]["release"] = [r for r in t["torch"]["release"] if r["torch"] != "2.15"]
    elif breakage == "bad_date":
        t["index"]["checked"] = "last week"
    else:
        t["index"]["newest"]["cuda-toolkit"] = {"version": "13.6.0", "date": "2027-01-10"}
    assert validate(t) != []
