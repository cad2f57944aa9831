"""GPU-to-GPU links through NVML (nvidia-ml-py), in a child of cudadoctor's own interpreter.

Run as `python -m cudadoctor.system.nvml_links`; prints one JSON object:

    {"error": "", "gpus": [{"index", "name", "uuid", "bus", "memory_total_mib", "pcie_gen_max",
                            "pcie_width_max", "compute_capability", "links": [{"link", "active",
                            "version", "remote_bus", "remote_type", "replay", "recovery",
                            "crc_flit", "crc_data"}], "errors": {...}}],
     "pairs": [{"a", "b", "ancestor", "p2p_read", "p2p_write", "p2p_nvlink", "p2p_atomics"}]}

A child for the same reason as nvml_probe.py: a wedged driver can hang NVML. Every query is asked on its
own, so one unsupported call never hides the rest. NVLink indexes past the GPU's last link answer
NVML_ERROR_INVALID_ARGUMENT (H200: 18 links, 19 and 20 invalid); GPUs without NVLink answer
NVML_ERROR_NOT_SUPPORTED; both mean "no such link" and are left out.
"""

from __future__ import annotations

import json
import sys

from cudadoctor.system.nvml_probe import _err_name, _s, open_nvml

# nvmlDeviceGetP2PStatus indexes (nvml.h nvmlGpuP2PCapsIndex_t). Literals on purpose: nvidia-ml-py
# defines NVML_P2P_CAPS_INDEX_READ as the tuple `(0,)` (a stray comma), which ctypes cannot pass
# ("ArgumentError: argument 3", seen on the H200 machine with the pynvml of torch's venv).
P2P_CAPS = {"p2p_read": 0, "p2p_write": 1, "p2p_nvlink": 2, "p2p_atomics": 3}
# nvmlDeviceGetNvLinkErrorCounter counters (NVML_NVLINK_ERROR_DL_*)
COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in recent nvml.h; older GPUs have 4-18


def _links(N, h) -> tuple:
    links, errors = [], {}
    for link in range(int(getattr(N, "NVML_NVLINK_MAX_LINKS", MAX_LINKS) or MAX_LINKS)):
        try:
            state = N.nvmlDeviceGetNvLinkState(h, link)
        except Exception as e:  # noqa: BLE001 - no such link (invalid argument / not supported)
            name = _err_name(N, e)
            if link == 0 and name not in ("NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_SUPPORTED"):
                errors["nvlink_state"] = name
            continue
        d = {"link": link, "active": state == 1}
        for key, fn in (("version", N.nvmlDeviceGetNvLinkVersion),
                        ("remote_type", N.nvmlDeviceGetNvLinkRemoteDeviceType)):
            try:
                d[key] = int(fn(h, link))
            except Exception:  # noqa: BLE001
                d[key] = None
        try:
            d["remote_bus"] = _s(N.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
        except Exception:  # noqa: BLE001
            d["remote_bus"] = ""
        for key, counter in COUNTERS.items():
            try:
                d[key] = int(N.nvmlDeviceGetNvLinkErrorCounter(h, link, counter))
            except Exception:  # noqa: BLE001 - not every GPU counts every kind
                d[key] = None
        links.append(d)
    return links, errors


def _gpu(N, i: int, h) -> dict:
    g: dict = {"index": i}
    errs: dict = {}
    for key, fn in (("name", lambda: _s(N.nvmlDeviceGetName(h))),
                    ("uuid", lambda: _s(N.nvmlDeviceGetUUID(h))),
                    ("bus", lambda: _s(N.nvmlDeviceGetPciInfo(h).busId)),
                    ("memory_total_mib", lambda: N.nvmlDeviceGetMemoryInfo(h).total // (1 << 20)),
                    ("pcie_gen_max", lambda: N.nvmlDeviceGetMaxPcieLinkGeneration(h)),
                    ("pcie_width_max", lambda: N.nvmlDeviceGetMaxPcieLinkWidth(h)),
                    ("compute_capability", lambda: "%d.%d" % tuple(N.nvmlDeviceGetCudaComputeCapability(h)))):
        try:
            g[key] = fn()
        except Exception as e:  # noqa: BLE001
            errs[key] = _err_name(N, e)
    g["links"], link_errs = _links(N, h)
    errs.update(link_errs)
    if errs:
        g["errors"] = errs
    return g


def _pair(N, a: int, b: int, ha, hb) -> dict:
    d: dict = {"a": a, "b": b}
    try:
        d["ancestor"] = int(N.nvmlDeviceGetTopologyCommonAncestor(ha, hb))
    except Exception as e:  # noqa: BLE001
        d["ancestor"] = None
        d["ancestor_error"] = _err_name(N, e)
    for key, index in P2P_CAPS.items():
        try:
            d[key] = int(N.nvmlDeviceGetP2PStatus(ha, hb, index))
        except Exception:  # noqa: BLE001
            d[key] = None
    return d


def main() -> int:
    N = open_nvml()
    if N is None:
        return 0
    out: dict = {"error": "", "gpus": [], "pairs": []}
    try:
        count = N.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": _err_name(N, e), "message": str(e)}))
        return 0
    handles: dict = {}
    for i in range(count):
        try:
            handles[i] = N.nvmlDeviceGetHandleByIndex(i)
        except Exception as e:  # noqa: BLE001 - a lost GPU: listed with why, left out of the pairs
            out["gpus"].append({"index": i, "links": [], "errors": {"handle": _err_name(N, e)}})
            continue
        out["gpus"].append(_gpu(N, i, handles[i]))
    for a in handles:
        for b in handles:
            if a != b:
                out["pairs"].append(_pair(N, a, b, handles[a], handles[b]))
    try:
        N.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
