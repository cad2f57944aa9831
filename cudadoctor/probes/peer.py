"""The GPUs as CUDA numbers them, and which can reach which: the driver API in a child process.

Run as `python -m cudadoctor.probes.peer` (no torch needed); prints one JSON line after MARK:

    {"driver_cuda": "13.0", "visible_devices": "1,0", "device_order": null, "count": 2,
     "devices": [{"ordinal": 0, "bus": "0000:00:07.0", "uuid": "GPU-...", "name": "NVIDIA H200",
                  "cc": "9.0", "memory_bytes": ...}, ...],
     "peers": [{"a": 0, "b": 1, "access": true, "rank": 0, "atomics": true}, ...]}

or {"error": {...}, "stage": "cuInit"}. The child inherits the user's environment, so the ordinals
are the ones the user's programs get: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER apply. Only
device-level queries (cuInit, cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute): no context is
created and nothing is enabled. The parent (facts/gpu_links.py) runs it with a timeout.
"""

from __future__ import annotations

import json
import os
import sys
import time

MARK = "@@CDPEER@@"


def emit(rec: dict) -> None:
    sys.stdout.write(MARK + json.dumps(rec) + "\n")
    sys.stdout.flush()


def _device(drv, ordinal: int) -> dict:
    from cudadoctor.probes.driver_api import CudaError

    dev = drv.device(ordinal)
    d = {"ordinal": ordinal, "bus": drv.pci_bus_id(dev), "name": drv.name(dev)}
    for key, fn in (("uuid", lambda: drv.uuid(dev)), ("memory_bytes", lambda: drv.total_mem(dev)),
                    ("cc", lambda: "%d.%d" % drv.compute_capability(dev))):
        try:
            d[key] = fn()
        except CudaError as e:
            d.setdefault("errors", {})[key] = e.name
    return d


def _pair(drv, a: int, b: int) -> dict:
    from cudadoctor.probes.driver_api import (
        P2P_NATIVE_ATOMIC_SUPPORTED,
        P2P_PERFORMANCE_RANK,
        CudaError,
    )

    d: dict = {"a": a, "b": b}
    try:
        d["access"] = drv.can_access_peer(drv.device(a), drv.device(b))
    except CudaError as e:
        d["access"] = None
        d["error"] = f"{e.call}: {e.name}"
        return d
    for key, attr in (("rank", P2P_PERFORMANCE_RANK), ("atomics", P2P_NATIVE_ATOMIC_SUPPORTED)):
        try:
            v = drv.p2p_attribute(attr, drv.device(a), drv.device(b))
            d[key] = bool(v) if key == "atomics" else v
        except CudaError:
            d[key] = None
    return d


def main() -> int:
    from cudadoctor.probes.driver_api import CudaError, Driver, DriverLoadError, version_str

    t0 = time.monotonic()
    env = {"visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "device_order": os.environ.get("CUDA_DEVICE_ORDER")}
    try:
        drv = Driver()
    except DriverLoadError as e:
        emit(dict(env, stage="load-libcuda", error={"name": "no-libcuda", "message": str(e)}))
        return 0
    try:
        drv.init()
        out = dict(env, driver_cuda=version_str(drv.driver_version()), count=drv.device_count())
    except CudaError as e:
        emit(dict(env, stage=e.call, error=e.to_dict()))
        return 0
    try:
        out["devices"] = [_device(drv, i) for i in range(out["count"])]
    except CudaError as e:
        emit(dict(out, stage=e.call, error=e.to_dict()))
        return 0
    out["peers"] = [_pair(drv, a, b) for a in range(out["count"]) for b in range(out["count"]) if a != b]
    out["seconds"] = round(time.monotonic() - t0, 3)
    emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
