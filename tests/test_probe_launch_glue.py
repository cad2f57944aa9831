"""The launch child's glue (probes/launch.py) against a CPU stand-in for the driver: argument order,
buffer sizes, result checks and the error path, without a GPU."""

from __future__ import annotations

import array
import math
import random

from cudadoctor.probes import launch as L
from cudadoctor.probes.driver_api import CudaError
from cudadoctor.probes.run import observed_from


class CpuDriver:
    """Implements the Driver calls launch.py makes; 'launches' run the kernels' maths in Python."""

    def __init__(self, fail_load_code=None, wrong=False):
        self.mem, self.next, self.fail, self.wrong = {}, 4096, fail_load_code, wrong
        self.launches = []

    def load_module(self, image):
        if self.fail:
            raise CudaError("cuModuleLoadDataEx", self.fail, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image")
        return "mod"

    def function(self, mod, name):
        return name

    def unload(self, mod):
        pass

    def alloc(self, n):
        p = self.next
        self.mem[p] = bytearray(n)
        self.next += n + 256
        return p

    def free(self, p):
        del self.mem[p]

    def htod(self, p, data):
        self.mem[p][:len(data)] = data

    def dtoh(self, p, n):
        return bytes(self.mem[p][:n])

    def memset(self, p, v, n):
        self.mem[p][:n] = bytes([v]) * n

    def synchronize(self):
        pass

    def time_ms(self, work, repeat=1):
        for _ in range(repeat):
            work()
        return 0.5

    def _f(self, p, n):
        return array.array("f", bytes(self.mem[p][:4 * n]))

    def launch(self, fn, grid, block, args):
        v = [a.value for a in args]
        self.launches.append((fn, tuple(grid), tuple(block)))
        if fn == "cd_minimal":
            out, n = v
            vals = array.array("i", [3 * i + 7 + (1 if self.wrong else 0) for i in range(n)] + [900])
            self.mem[out][:4 * (n + 1)] = vals.tobytes()
        elif fn.startswith("cd_gemm"):
            a, b, c, M, N, K = v
            A, B = self._f(a, M * K), self._f(b, K * N)
            C = array.array("f", (sum(A[i * K + k] * B[k * N + j] for k in range(K)) for i in range(M) for j in range(N)))
            self.mem[c][:4 * M * N] = C.tobytes()
        elif fn == "cd_attention":
            q, k, vv, o, Ln, scale, causal = v
            BH = grid[1]
            n = BH * Ln * L.HEAD_DIM
            Q, K, V = self._f(q, n), self._f(k, n), self._f(vv, n)
            out = array.array("f", [0.0] * n)
            for bh in range(BH):
                for i in range(Ln):
                    row = L.attention_reference(Q, K, V, Ln, bh, i, scale, bool(causal))
                    base = (bh * Ln + i) * L.HEAD_DIM
                    out[base:base + L.HEAD_DIM] = array.array("f", row)
            self.mem[o][:4 * n] = out.tobytes()


def test_minimal_build_record(tmp_path):
    img = tmp_path / "m.fatbin"
    img.write_bytes(b"\x50\xed\x55\xba")
    rec = L.run_build(CpuDriver(), {"name": "native", "path": str(img)})
    assert rec["ok"] and rec["result_ok"] and rec["cuda_arch"] == 900
    assert observed_from(rec, ["sm_90"], (9, 0))[0] == "native"
    wrong = L.run_build(CpuDriver(wrong=True), {"name": "native", "path": str(img)})
    assert not wrong["ok"] and wrong["result_ok"] is False
    assert observed_from(wrong, ["sm_90"], (9, 0))[0] == "wrong-result"
    e = L.run_build(CpuDriver(fail_load_code=209), {"name": "sass-foreign", "path": str(img)})
    assert e["stage"] == "load" and e["error"]["code"] == 209
    assert observed_from(e, ["sm_80"], (9, 0))[0] == "no-kernel-image"
    missing = L.run_build(CpuDriver(), {"name": "x", "path": str(tmp_path / "nope")})
    assert missing["ok"] is False and missing["error"]["call"] == "open"


def test_gemm_records(tmp_path):
    img = tmp_path / "g.fatbin"
    img.write_bytes(b"x")
    drv = CpuDriver()
    recs = L.run_gemm(drv, str(img), 48, random.Random(1))
    assert [r["name"] for r in recs] == ["gemm_naive", "gemm_tiled"]
    assert all(r["ok"] and r["max_rel_err"] <= L.GEMM_TOL for r in recs)
    assert recs[0]["gflops"] == round(2.0 * 48 ** 3 / (0.5 * 1e6), 1)
    fn, grid, block = drv.launches[0]
    assert grid == (2, 2) and block == (L.TILE, L.TILE)  # ceil(48 / 32) tiles each way
    assert drv.mem == {}  # every buffer freed


def test_attention_record(tmp_path):
    img = tmp_path / "a.fatbin"
    img.write_bytes(b"x")
    drv = CpuDriver()
    rec = L.run_attention(drv, str(img), 40, 2, random.Random(2))
    assert rec["ok"] and rec["max_rel_err"] < 1e-5
    fn, grid, block = drv.launches[0]
    assert grid == (1, 2) and block == (128,)
    assert rec["gflops"] == round(4.0 * 2 * L.HEAD_DIM * 40 * 41 / 2 / (0.5 * 1e6), 1)
    assert math.isfinite(rec["max_rel_err"])
