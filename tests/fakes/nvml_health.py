"""A fake `pynvml` for cudadoctor/system/nvml_health.py, built from the real 2x H200 NVML dump
(tests/data/h200x2/nvml_dump.txt) and changed per test.

It keeps the real nvidia-ml-py's constants, error classes and ctypes structures (the module imports
without a driver) and replaces the functions with ones that answer from plain per-GPU dicts, with the real
signatures: nvmlDeviceGetGpuFabricInfo[V] take a struct by reference and raise TypeError without it, as
the real binding did in the recon. `gpus[i]` keys are the dump's (temp, thr_SLOWDOWN, throttle, ...); a
value that is an NVML error name ("NotSupported") makes that call raise.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pynvml as real

DUMP = Path(__file__).resolve().parent.parent / "data" / "h200x2" / "nvml_dump.txt"
# /proc/driver/nvidia/gpus/*/information in tests/data/h200x2/sys.txt
UUIDS = ["GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d", "GPU-98c8e6bb-71cb-01a3-2789-aeaadd598bf2"]
ERRORS = {"NotSupported": real.NVML_ERROR_NOT_SUPPORTED, "InvalidArgument": real.NVML_ERROR_INVALID_ARGUMENT,
          "GpuIsLost": real.NVML_ERROR_GPU_IS_LOST, "Unknown": real.NVML_ERROR_UNKNOWN,
          "NoPermission": real.NVML_ERROR_NO_PERMISSION, "LibRmVersionMismatch": real.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
          "DriverNotLoaded": real.NVML_ERROR_DRIVER_NOT_LOADED, "LibraryNotFound": real.NVML_ERROR_LIBRARY_NOT_FOUND}


def dump_gpus() -> list:
    """The dump's per-GPU dicts, with what the dump could not read filled from nvidia-smi -q / sys.txt."""
    text = DUMP.read_text()
    d = json.loads(text[text.index("{"):text.rindex("}") + 1])
    gpus = d["gpus"]
    for g, uuid in zip(gpus, UUIDS):
        g["uuid"] = uuid
        g["fabric"] = {"state": 3, "status": 0, "health_mask": 0}  # smi_q.txt: Completed, Success
        g["recovery_action"] = 0
        g["nvlink_count"] = sum(1 for link in g["nvlinks"] if isinstance(link["state"], int))
    return gpus


def _raise_if_error(v):
    if isinstance(v, str) and v.startswith("ERR "):
        v = "NotSupported" if "NotSupported" in v else "InvalidArgument"
    if isinstance(v, str) and v in ERRORS:
        raise real.NVMLError(ERRORS[v])
    return v


def make(gpus: list, init_error: str = "", driver: str = "580.159.04", init_hang: float = 0.0):
    """A module object standing in for pynvml."""
    N = types.ModuleType("pynvml")
    for k, v in vars(real).items():
        if k.isupper() or k.startswith(("NVML_", "nvmlClocks", "c_nvml")) or k.startswith("NVMLError"):
            setattr(N, k, v)
    N.NVMLError = real.NVMLError

    def init():
        if init_hang:
            time.sleep(init_hang)
        if init_error:
            raise real.NVMLError(ERRORS[init_error])

    def g(h):
        return gpus[h]

    def ask(key):
        return lambda h, *a: _raise_if_error(g(h)[key])

    N.nvmlInit = init
    N.nvmlShutdown = lambda: None
    N.nvmlSystemGetDriverVersion = lambda: driver
    N.nvmlDeviceGetCount = lambda: len(gpus)

    def handle(i):
        if gpus[i].get("handle_error"):
            raise real.NVMLError(ERRORS[gpus[i]["handle_error"]])
        return i

    N.nvmlDeviceGetHandleByIndex = handle
    N.nvmlDeviceGetName = ask("name")
    N.nvmlDeviceGetUUID = ask("uuid")
    N.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=_raise_if_error(g(h)["bus"]))
    N.nvmlDeviceGetMinorNumber = ask("minor")
    N.nvmlDeviceGetPersistenceMode = ask("persistence")
    N.nvmlDeviceGetComputeMode = ask("compute_mode")
    N.nvmlDeviceGetMigMode = ask("mig")
    N.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    N.nvmlDeviceGetMigDeviceHandleByIndex = lambda h, j: (
        j if j < g(h).get("mig_instances", 0) else _raise_if_error("NotSupported"))
    N.nvmlDeviceGetEccMode = ask("ecc_mode")
    N.nvmlDeviceGetTotalEccErrors = lambda h, err, counter: _raise_if_error(g(h)[
        f"ecc_{'UNCORRECTED' if err == real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 'CORRECTED'}_"
        f"{'VOLATILE' if counter == real.NVML_VOLATILE_ECC else 'AGGREGATE'}_ECC"])
    N.nvmlDeviceGetRetiredPagesPendingStatus = ask("retired_pending")
    N.nvmlDeviceGetRetiredPages = lambda h, cause: [0] * _raise_if_error(
        g(h)["retired_dbe" if cause == real.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else "retired_sbe"])
    N.nvmlDeviceGetRemappedRows = lambda h: tuple(_raise_if_error(g(h)["remapped_rows"]))
    N.nvmlDeviceGetTemperature = lambda h, sensor: _raise_if_error(g(h)["temp"])
    names = {real.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "SLOWDOWN", real.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "SHUTDOWN",
             real.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "GPU_MAX"}
    N.nvmlDeviceGetTemperatureThreshold = lambda h, t: _raise_if_error(g(h)["thr_" + names[t]])
    N.nvmlDeviceGetCurrentClocksEventReasons = ask("throttle")
    N.nvmlDeviceGetCurrentClocksThrottleReasons = ask("throttle")
    N.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=g(h)["mem"][0], used=g(h)["mem"][1])
    N.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p[0], usedGpuMemory=p[1])
                                                        for p in g(h)["procs"]]

    def field_values(h, ids):
        vals = (real.c_nvmlFieldValue_t * len(ids))()
        answers = {real.NVML_FI_DEV_NVLINK_LINK_COUNT: g(h).get("nvlink_count"),
                   real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: g(h).get("recovery_action")}
        for v, fid in zip(vals, ids):
            v.fieldId = fid
            a = answers.get(fid)
            v.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED if a is None else real.NVML_SUCCESS
            v.value.uiVal = a or 0
        return vals

    N.nvmlDeviceGetFieldValues = field_values

    def link_state(h, link):
        links = g(h)["nvlinks"]
        if link >= len(links):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _raise_if_error(links[link]["state"])

    N.nvmlDeviceGetNvLinkState = link_state

    def fabric(h, gpuFabricInfo):  # the real signature: the struct is the caller's, passed by reference
        f = g(h)["fabric"]
        if isinstance(f, str):
            _raise_if_error(f)
        info = gpuFabricInfo._obj
        info.state, info.status = f["state"], f["status"]
        if hasattr(info, "healthMask"):
            info.healthMask = f.get("health_mask", 0)
        return real.NVML_SUCCESS

    N.nvmlDeviceGetGpuFabricInfo = fabric
    N.nvmlDeviceGetGpuFabricInfoV = fabric
    return N
