"""health's NVML child (cudadoctor/system/nvml_health.py) against a fake pynvml made from the real 2x H200
NVML dump, and the parent's reading of what it prints."""

from __future__ import annotations

import ctypes
import json

import pytest
from fakes import nvml_health as F
from fakes.system import FakeCmd
from health_scenarios import NVML_ARGV, h200x2

from cudadoctor.facts.health import gather_nvml_health
from cudadoctor.facts.registry import Options
from cudadoctor.model import FactState
from cudadoctor.system import nvml_probe
from cudadoctor.system.nvml_health import collect


def test_the_real_h200_answers():
    out = collect(F.make(F.dump_gpus()))
    assert out["error"] == "" and out["driver_version"] == "580.159.04" and out["device_count"] == 2
    g0, g1 = out["gpus"]
    assert (g0["name"], g0["pci_bus_id"], g0["minor_number"], g1["minor_number"]) == ("NVIDIA H200", "00000000:00:06.0", 0, 1)
    assert (g0["temperature_c"], g0["temp_slowdown_c"], g0["temp_shutdown_c"], g0["temp_max_c"]) == (38, 89, 95, 87)
    assert g0["clock_events"] == ["gpu_idle"] and g0["persistence_mode"] is True and g0["mig_mode"] == [0, 0]
    assert g0["remapped_rows"] == [0, 0, 0, 0] and g0["ecc_uncorrected_volatile"] == 0
    assert g0["nvlinks"] == [1] * 18 and g0["fabric"] == {"state": 3, "status": 0, "health_mask": 0}
    # Hopper remaps rows instead of retiring pages: NotSupported, recorded, nothing else lost
    assert g0["errors"] == {"retired_pages_pending": "NVML_ERROR_NOT_SUPPORTED"}
    assert "retired_pages_dbe" not in g0 and "fields" not in g0


def test_fabric_info_passes_the_struct_the_binding_needs():
    N = F.make(F.dump_gpus())
    with pytest.raises(TypeError):  # what nvml_probe.py used to do, and what the recon caught
        N.nvmlDeviceGetGpuFabricInfo(0)
    assert nvml_probe.fabric_info(N, 0)["state"] == 3
    del N.nvmlDeviceGetGpuFabricInfoV  # an older binding: the first struct version
    assert nvml_probe.fabric_info(N, 0) == {"state": 3, "status": 0}
    assert ctypes.sizeof(N.c_nvmlGpuFabricInfo_t) > 16


def test_links_are_counted_without_the_field_and_unsupported_queries_are_kept_apart():
    gs = F.dump_gpus()
    for g in gs:
        del g["nvlink_count"], g["recovery_action"]
    out = collect(F.make(gs))
    assert out["gpus"][0]["nvlinks"] == [1] * 18  # asked until the driver said InvalidArgument
    assert "recovery_action" not in out["gpus"][0]


def test_init_errors_and_lost_gpus():
    assert collect(F.make(F.dump_gpus(), init_error="LibRmVersionMismatch"))["error"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    gs = F.dump_gpus()
    gs[1]["handle_error"] = "GpuIsLost"
    out = collect(F.make(gs))
    assert out["gpus"][1] == {"index": 1, "errors": {"handle": "NVML_ERROR_GPU_IS_LOST"}}


def test_the_parent_reads_the_child():
    fs = h200x2()
    fact = gather_nvml_health(fs, Options(timeout_nvml=3), {})
    assert fact.state is FactState.FOUND and [g.uuid for g in fact.value.gpus] == F.UUIDS
    assert fact.value.gpus[1].nvlinks == [1] * 18


@pytest.mark.parametrize("answer,state,text", [
    (FakeCmd(hang=True), FactState.TIMEOUT, "no answer within 3 s"),
    (FakeCmd(stdout="Segmentation fault\n", returncode=-11), FactState.FAILED, "SIGSEGV"),
    (FakeCmd(stdout="not json\n"), FactState.FAILED, "printed no JSON"),
    (FakeCmd(stdout=json.dumps({"error": "import-failed", "message": "No module named 'pynvml'"})), FactState.FAILED,
     "not importable"),
    (FakeCmd(stdout=json.dumps({"error": "NVML_ERROR_DRIVER_NOT_LOADED", "message": "Driver Not Loaded"})),
     FactState.FAILED, "NVML_ERROR_DRIVER_NOT_LOADED"),
])
def test_the_parent_survives_any_child(answer, state, text):
    fs = h200x2(nvml=answer)
    fact = gather_nvml_health(fs, Options(timeout_nvml=3), {})
    assert fact.state is state and text in fact.error
    assert fs.calls[-1] == NVML_ARGV
