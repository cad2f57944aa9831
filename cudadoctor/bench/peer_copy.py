"""Runs inside the TARGET interpreter, as a script: stdlib + torch only.

The GPU-to-GPU copy bandwidth matrix: for every ordered pair of visible GPUs, `dst.copy_(src)` of
--bytes (256 MiB), which torch turns into cudaMemcpyPeerAsync (over NVLink or PCIe P2P when the pair
has peer access, staged through the host otherwise). Warm-up copies first, then --reps copies timed
with CUDA events on the source device's stream; the median is reported. Data is random int32 and every
pair is checked (the copy's sum equals the source's, exactly).

Records: `@@CUDADOCTOR-PEERCOPY@@ {json}` lines: start, device (one per GPU), copy (one per pair), done.
"""

import json
import sys
import time

MARK = "@@CUDADOCTOR-PEERCOPY@@"


def emit(stage, **data):
    data["stage"] = stage
    sys.stdout.write(MARK + " " + json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else default


def main():
    nbytes = int(arg("--bytes", str(256 << 20)))
    reps, warmup = int(arg("--reps", "10")), int(arg("--warmup", "2"))
    t0 = time.time()
    emit("start", python=sys.executable)
    import torch

    n = torch.cuda.device_count()
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        emit("device", index=i, name=p.name, bus="%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0),
                                                                     getattr(p, "pci_bus_id", 0),
                                                                     getattr(p, "pci_device_id", 0)))
    count = nbytes // 4
    bufs = []
    for i in range(n):
        src = torch.randint(-2 ** 30, 2 ** 30, (count,), dtype=torch.int32, device="cuda:%d" % i)
        bufs.append((src, torch.empty_like(src), int(src.sum(dtype=torch.int64).item())))
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            src, want = bufs[a][0], bufs[a][2]
            dst = bufs[b][1]
            try:
                peer = bool(torch.cuda.can_device_access_peer(a, b))
                with torch.cuda.device(a):
                    for _ in range(warmup):
                        dst.copy_(src, non_blocking=True)
                    torch.cuda.synchronize(a)
                    torch.cuda.synchronize(b)
                    times = []
                    for _ in range(reps):
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        dst.copy_(src, non_blocking=True)
                        e1.record()
                        e1.synchronize()
                        times.append(e0.elapsed_time(e1) / 1000.0)
                torch.cuda.synchronize(b)
                ok = int(dst.sum(dtype=torch.int64).item()) == want
                times.sort()
                med = times[len(times) // 2]
                emit("copy", src=a, dst=b, bytes=count * 4, peer=peer, seconds=med,
                     gbps=round(count * 4 / med / 1e9, 2), ok=ok)
            except Exception as e:
                emit("copy", src=a, dst=b, ok=False, error="%s: %s" % (type(e).__name__, e))
    emit("done", seconds=round(time.time() - t0, 3))


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        emit("crash", error="%s: %s" % (type(e).__name__, e))
