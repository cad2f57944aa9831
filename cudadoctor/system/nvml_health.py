"""NVML for `cudadoctor health`: only what a node check needs, in a child (`python -m
cudadoctor.system.nvml_health`), printing one JSON object.

A child for the same reason as nvml_probe.py: a wedged driver can hang NVML calls, and the parent
kills this process at its timeout. It asks less than nvml_probe (no clocks, PCIe, power, topology,
NVLink error counters: CRC counters of 3-48 are normal on healthy H200 links, see tests/data/h200x2)
and each question once, so two H200s with 18 NVLinks each answer in a few tens of ms. Every field is
asked separately: one unsupported query (retired pages on Hopper, which remaps rows instead) never
hides the rest; its NVML error name goes into the GPU's "errors".
"""

from __future__ import annotations

import json
import sys

from cudadoctor.system.nvml_probe import _compute_mode, _err_name, _reasons, _s, fabric_info, import_failed, init_error


def field_values(N, h, ids: dict) -> dict:
    """Several NVML field values in one call: name -> value, for the fields the driver answered."""
    vals = N.nvmlDeviceGetFieldValues(h, list(ids.values()))
    out = {}
    for name, v in zip(ids, vals):
        if v.nvmlReturn == 0:
            out[name] = int(v.value.uiVal)
    return out


def nvlink_states(N, h, count) -> list:
    """1 (active) / 0 (inactive) per link, for `count` links or until the driver says there are no more."""
    states = []
    for link in range(count if count is not None else N.NVML_NVLINK_MAX_LINKS):
        try:
            states.append(int(N.nvmlDeviceGetNvLinkState(h, link)))
        except N.NVMLError:
            if count is not None:
                states.append(-1)  # a link the GPU has but could not report
                continue
            break  # NotSupported / InvalidArgument past the last link
    return states


def gpu(N, i: int) -> dict:
    g: dict = {"index": i, "errors": {}}

    def ask(key, fn, *a, conv=lambda x: x):
        try:
            g[key] = conv(fn(*a))
        except Exception as e:  # noqa: BLE001 - one failed field never hides the others
            g["errors"][key] = _err_name(N, e)

    try:
        h = N.nvmlDeviceGetHandleByIndex(i)
    except Exception as e:  # noqa: BLE001
        g["errors"]["handle"] = _err_name(N, e)
        return g
    ask("name", N.nvmlDeviceGetName, h, conv=_s)
    ask("uuid", N.nvmlDeviceGetUUID, h, conv=_s)
    ask("pci_bus_id", lambda h: N.nvmlDeviceGetPciInfo(h).busId, h, conv=_s)
    ask("minor_number", N.nvmlDeviceGetMinorNumber, h)
    ask("persistence_mode", lambda h: N.nvmlDeviceGetPersistenceMode(h) == 1, h)
    ask("compute_mode", N.nvmlDeviceGetComputeMode, h, conv=_compute_mode)
    ask("mig_mode", lambda h: list(N.nvmlDeviceGetMigMode(h)), h)  # [current, pending]
    if (g.get("mig_mode") or [0])[0] == 1:
        ask("mig_devices", lambda h: _count_mig(N, h), h)
    ask("ecc_mode", lambda h: list(N.nvmlDeviceGetEccMode(h)), h)  # [current, pending]
    ask("ecc_uncorrected_volatile", N.nvmlDeviceGetTotalEccErrors, h,
        N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC)
    ask("ecc_uncorrected_aggregate", N.nvmlDeviceGetTotalEccErrors, h,
        N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_AGGREGATE_ECC)
    ask("retired_pages_pending", lambda h: N.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1, h)
    if "retired_pages_pending" in g:  # GPUs before Ampere; Ampere and later remap rows instead
        ask("retired_pages_dbe", lambda h: len(N.nvmlDeviceGetRetiredPages(
            h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)), h)
        ask("retired_pages_sbe", lambda h: len(N.nvmlDeviceGetRetiredPages(
            h, N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)), h)
    ask("remapped_rows", lambda h: list(N.nvmlDeviceGetRemappedRows(h)), h)  # [corr, uncorr, pending, failed]
    ask("temperature_c", N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU)
    for key, which in (("temp_slowdown_c", "SLOWDOWN"), ("temp_shutdown_c", "SHUTDOWN"), ("temp_max_c", "GPU_MAX")):
        ask(key, N.nvmlDeviceGetTemperatureThreshold, h, getattr(N, "NVML_TEMPERATURE_THRESHOLD_" + which))
    reasons = getattr(N, "nvmlDeviceGetCurrentClocksEventReasons", None) or N.nvmlDeviceGetCurrentClocksThrottleReasons
    ask("clock_events", reasons, h, conv=lambda m: _reasons(N, m))
    ask("memory_used_mib", lambda h: N.nvmlDeviceGetMemoryInfo(h).used // (1 << 20), h)
    ask("memory_total_mib", lambda h: N.nvmlDeviceGetMemoryInfo(h).total // (1 << 20), h)
    ask("processes", lambda h: len(N.nvmlDeviceGetComputeRunningProcesses(h)), h)
    fields = {"nvlink_count": getattr(N, "NVML_FI_DEV_NVLINK_LINK_COUNT", 91)}
    if hasattr(N, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"):
        fields["recovery_action"] = N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    ask("fields", field_values, N, h, fields)
    f = g.pop("fields", None) or {}
    if "recovery_action" in f:
        g["recovery_action"] = f["recovery_action"]
    ask("nvlinks", nvlink_states, N, h, f.get("nvlink_count"))
    ask("fabric", fabric_info, N, h)
    if not g["errors"]:
        del g["errors"]
    return g


def _count_mig(N, h) -> int:
    n = 0
    for j in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            n += 1
        except N.NVMLError:
            continue
    return n


def collect(N) -> dict:
    """Everything health asks NVML, as plain data. `N` is the pynvml module (a fake in tests)."""
    err = init_error(N)
    if err:
        return err
    out: dict = {"error": "", "gpus": []}
    try:
        out["driver_version"] = _s(N.nvmlSystemGetDriverVersion())
    except Exception as e:  # noqa: BLE001
        out["driver_version_error"] = _err_name(N, e)
    try:
        count = N.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001
        out["error"] = _err_name(N, e)
        out["message"] = f"nvmlDeviceGetCount: {e}"
        return out
    out["device_count"] = count
    out["gpus"] = [gpu(N, i) for i in range(count)]
    try:
        N.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    return out


def main() -> int:
    try:
        import pynvml as N
    except Exception as e:  # noqa: BLE001
        print(json.dumps(import_failed(e)))
        return 0
    print(json.dumps(collect(N)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
