"""NVML through nvidia-ml-py (the `pynvml` module), in a child of cudadoctor's own interpreter.

Run as `python -m cudadoctor.system.nvml_probe`; prints one JSON object. A child, not in-process,
because a wedged driver can hang NVML calls and cudadoctor must stay responsive (the parent kills
it at its timeout). Every field is asked separately: one unsupported query never hides the rest.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Optional


def _s(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def import_failed(e: BaseException) -> dict:
    """What every NVML child prints when nvidia-ml-py cannot be imported (the parent names the package)."""
    return {"error": "import-failed", "message": f"{type(e).__name__}: {e}"}


def init_error(N) -> Optional[dict]:
    """nvmlInit(); None when it worked, else what every NVML child prints: the NVML error's name, or
    NVML_ERROR_LIBRARY_NOT_FOUND when libnvidia-ml cannot be loaded at all."""
    try:
        N.nvmlInit()
    except N.NVMLError as e:
        return {"error": _err_name(N, e), "message": str(e)}
    except Exception as e:  # noqa: BLE001 - e.g. the library cannot be loaded
        return {"error": "NVML_ERROR_LIBRARY_NOT_FOUND", "message": f"{type(e).__name__}: {e}"}
    return None


def open_nvml():
    """pynvml after nvmlInit, or None once the error record for the parent is printed."""
    try:
        import pynvml as N
    except Exception as e:  # noqa: BLE001
        print(json.dumps(import_failed(e)))
        return None
    err = init_error(N)
    if err:
        print(json.dumps(err))
        return None
    return N


def main() -> int:
    N = open_nvml()
    if N is None:
        return 0
    out: dict = {"error": "", "gpus": []}
    errs: dict = {}

    def ask(key, fn, *a, target=None, conv=lambda x: x):
        tgt = out if target is None else target
        try:
            tgt[key] = conv(fn(*a))
        except Exception as e:  # noqa: BLE001
            (tgt.setdefault("errors", {}) if target is not None else errs)[key] = _err_name(N, e)

    ask("driver_version", N.nvmlSystemGetDriverVersion, conv=_s)
    ask("nvml_version", N.nvmlSystemGetNVMLVersion, conv=_s)
    ask("cuda_driver_version", N.nvmlSystemGetCudaDriverVersion_v2,
        conv=lambda v: f"{v // 1000}.{(v % 1000) // 10}")
    try:
        count = N.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001
        count = 0
        errs["device_count"] = _err_name(N, e)
    out["device_count"] = count
    for i in range(count):
        g: dict = {"index": i}
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except Exception as e:  # noqa: BLE001
            g["errors"] = {"handle": _err_name(N, e)}
            out["gpus"].append(g)
            continue
        ask("name", N.nvmlDeviceGetName, h, target=g, conv=_s)
        ask("uuid", N.nvmlDeviceGetUUID, h, target=g, conv=_s)
        ask("pci_bus_id", lambda h: N.nvmlDeviceGetPciInfo(h).busId, h, target=g, conv=_s)
        ask("compute_capability", N.nvmlDeviceGetCudaComputeCapability, h, target=g,
            conv=lambda t: f"{t[0]}.{t[1]}")
        ask("memory_total_mib", lambda h: N.nvmlDeviceGetMemoryInfo(h).total // (1 << 20), h, target=g)
        ask("memory_used_mib", lambda h: N.nvmlDeviceGetMemoryInfo(h).used // (1 << 20), h, target=g)
        ask("mig_mode", lambda h: N.nvmlDeviceGetMigMode(h)[0] == 1, h, target=g)
        ask("persistence_mode", lambda h: N.nvmlDeviceGetPersistenceMode(h) == 1, h, target=g)
        ask("compute_mode", N.nvmlDeviceGetComputeMode, h, target=g, conv=_compute_mode)
        ask("pcie_gen", N.nvmlDeviceGetCurrPcieLinkGeneration, h, target=g)
        ask("pcie_gen_max", N.nvmlDeviceGetMaxPcieLinkGeneration, h, target=g)
        ask("pcie_width", N.nvmlDeviceGetCurrPcieLinkWidth, h, target=g)
        ask("pcie_width_max", N.nvmlDeviceGetMaxPcieLinkWidth, h, target=g)
        ask("clock_sm_mhz", N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM, target=g)
        ask("clock_sm_max_mhz", N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_SM, target=g)
        ask("clock_mem_mhz", N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_MEM, target=g)
        ask("clock_mem_max_mhz", N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_MEM, target=g)
        ask("throttle_reasons", N.nvmlDeviceGetCurrentClocksThrottleReasons, h, target=g,
            conv=lambda m: _reasons(N, m))
        ask("power_w", N.nvmlDeviceGetPowerUsage, h, target=g, conv=lambda mw: mw / 1000.0)
        ask("power_limit_w", N.nvmlDeviceGetEnforcedPowerLimit, h, target=g, conv=lambda mw: mw / 1000.0)
        ask("temperature_c", N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU, target=g)
        ask("ecc_enabled", lambda h: N.nvmlDeviceGetEccMode(h)[0] == 1, h, target=g)
        ask("ecc_uncorrected_volatile", N.nvmlDeviceGetTotalEccErrors, h,
            N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC, target=g)
        ask("retired_pages_pending", lambda h: N.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1, h, target=g)
        ask("remapped_rows_pending", lambda h: bool(N.nvmlDeviceGetRemappedRows(h)[2]), h, target=g)
        ask("remapped_rows_failure", lambda h: bool(N.nvmlDeviceGetRemappedRows(h)[3]), h, target=g)
        ask("processes", N.nvmlDeviceGetComputeRunningProcesses, h, target=g,
            conv=lambda ps: [{"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) // (1 << 20)} for p in ps])
        ask("fabric_state", lambda h: fabric_info(N, h)["state"], h, target=g)
        if g.get("mig_mode"):
            g["mig_devices"] = _mig_devices(N, h)
        out["gpus"].append(g)
    if errs:
        out["errors"] = errs
    try:
        N.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    print(json.dumps(out))
    return 0


def fabric_info(N, h) -> dict:
    """nvmlDeviceGetGpuFabricInfo[V] fill a struct the caller passes (nvidia-ml-py has no one-argument
    form): V (with the health mask) where the binding and driver have it, else the first version."""
    v2 = getattr(N, "c_nvmlGpuFabricInfo_v2_t", None)
    if v2 is not None and hasattr(N, "nvmlDeviceGetGpuFabricInfoV"):
        info = v2()
        try:
            N.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
            return {"state": int(info.state), "status": int(info.status), "health_mask": int(info.healthMask)}
        except N.NVMLError as e:
            # an older driver: no V entry point, or a struct version it does not know
            if getattr(e, "value", None) not in (N.NVML_ERROR_FUNCTION_NOT_FOUND,
                                                 getattr(N, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25)):
                raise
    info = N.c_nvmlGpuFabricInfo_t()
    N.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    return {"state": int(info.state), "status": int(info.status)}


def _mig_devices(N, h) -> list:
    out = []
    try:
        n = N.nvmlDeviceGetMaxMigDeviceCount(h)
    except Exception:  # noqa: BLE001
        return out
    for j in range(n):
        try:
            m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except Exception:  # noqa: BLE001
            continue
        d = {"index": j}
        for key, fn in (("uuid", N.nvmlDeviceGetUUID), ("name", N.nvmlDeviceGetName)):
            try:
                d[key] = _s(fn(m))
            except Exception:  # noqa: BLE001
                pass
        out.append(d)
    return out


def _compute_mode(v: int) -> str:
    return {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}.get(v, str(v))


_REASONS = [
    ("nvmlClocksThrottleReasonGpuIdle", "gpu_idle"),
    ("nvmlClocksThrottleReasonApplicationsClocksSetting", "applications_clocks_setting"),
    ("nvmlClocksThrottleReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksThrottleReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksThrottleReasonSyncBoost", "sync_boost"),
    ("nvmlClocksThrottleReasonSwThermalSlowdown", "sw_thermal_slowdown"),
    ("nvmlClocksThrottleReasonHwThermalSlowdown", "hw_thermal_slowdown"),
    ("nvmlClocksThrottleReasonHwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("nvmlClocksThrottleReasonDisplayClockSetting", "display_clock_setting"),
]


def _reasons(N, mask: int) -> list:
    out = []
    for attr, name in _REASONS:
        bit = getattr(N, attr, None)
        if bit and mask & bit:
            out.append(name)
    return out


def _err_name(N, e) -> str:
    code = getattr(e, "value", None)
    if code is not None:
        for k, v in vars(N).items():
            if k.startswith("NVML_ERROR_") and v == code:
                return k
    return f"{type(e).__name__}: {e}"


if __name__ == "__main__":
    sys.exit(main())
