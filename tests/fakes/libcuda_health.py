"""A fake libcuda.so.1 for `cudadoctor health`'s launch child (probes/health_launch.py), compiled with the
host C compiler: enough of the driver API for that child, with the kernel's effect computed on the host
(out[i] = 3*i + seed), so the child's own check of the 256 values is exercised for real.

Behaviour from the environment of the child:
  FAKE_CUDA_COUNT   devices (default 2; the first two carry the H200s' UUIDs and bus ids of tests/data/h200x2)
  FAKE_CUINIT       cuInit's result code, or "hang" (default 0)
  FAKE_CUDA_FAIL    "ORDINAL:CALL:CODE": that call fails with CODE on that device
                    (CALL: cuDevicePrimaryCtxRetain, cuModuleLoadDataEx, cuMemAlloc_v2, cuLaunchKernel,
                    cuCtxSynchronize)
  FAKE_CUDA_HANG    "ORDINAL:CALL": that call never returns on that device
  FAKE_CUDA_WRONG   ORDINAL whose kernel writes wrong values
  FAKE_CUDA_LOG     a file each loaded module's first 64 bytes and target line are appended to
Error names and codes: cuda.h ("Data types used by CUDA driver",
https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
"""

from __future__ import annotations

from pathlib import Path

from faults.fakelibs import build, compiler  # noqa: F401 - compiler() tells tests whether they can run

SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static __thread int cur = -1;
static const unsigned char UUIDS[2][16] = {
    {0x3c,0xf3,0x05,0x3a,0x1d,0xca,0x59,0xd4,0x18,0x25,0x81,0x20,0x07,0xe0,0xdc,0x7d},
    {0x98,0xc8,0xe6,0xbb,0x71,0xcb,0x01,0xa3,0x27,0x89,0xae,0xaa,0xdd,0x59,0x8b,0xf2}};

static int count(void) { const char *c = getenv("FAKE_CUDA_COUNT"); return c && *c ? atoi(c) : 2; }

/* "ORDINAL:CALL[:CODE]" in variable `var` names this device and call: return CODE (or 1 for a hang spec) */
static int spec(const char *var, int dev, const char *call) {
    const char *s = getenv(var);
    char buf[128];
    if (!s || !*s) return 0;
    snprintf(buf, sizeof buf, "%d:%s", dev, call);
    size_t n = strlen(buf);
    if (strncmp(s, buf, n) != 0 || (s[n] != 0 && s[n] != ':')) return 0;
    return s[n] == ':' ? atoi(s + n + 1) : 1;
}
static int act(int dev, const char *call) {
    if (spec("FAKE_CUDA_HANG", dev, call)) for (;;) pause();
    return spec("FAKE_CUDA_FAIL", dev, call);
}

int cuInit(unsigned int flags) {
    (void)flags;
    const char *m = getenv("FAKE_CUINIT");
    if (m && !strcmp(m, "hang")) for (;;) pause();
    return m && *m ? atoi(m) : 0;
}
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = count(); return 0; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal < 0 || ordinal >= count()) return 101; *d = ordinal; return 0; }
int cuDeviceGetName(char *buf, int len, int dev) { (void)dev; snprintf(buf, len, "NVIDIA H200"); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) { (void)dev; *v = attr == 75 ? 9 : 0; return 0; }
int cuDeviceGetPCIBusId(char *buf, int len, int dev) { snprintf(buf, len, "0000:00:%02x.0", 6 + dev); return 0; }
int cuDeviceGetUuid_v2(unsigned char *u, int dev) {
    if (dev < 2) memcpy(u, UUIDS[dev], 16); else { memset(u, 0, 16); u[15] = (unsigned char)dev; }
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    int rc = act(dev, "cuDevicePrimaryCtxRetain");
    if (rc) return rc;
    *ctx = (void *)(intptr_t)(dev + 1);
    return 0;
}
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
int cuCtxSetCurrent(void *ctx) { cur = (int)(intptr_t)ctx - 1; return 0; }
int cuModuleLoadDataEx(void **mod, const char *image, unsigned n, void *o, void *v) {
    (void)n; (void)o; (void)v;
    const char *log = getenv("FAKE_CUDA_LOG");
    if (log && *log) {
        FILE *f = fopen(log, "a");
        const char *t = strstr(image, "\n.target");
        if (f) { fprintf(f, "device %d: %.14s\n", cur, t ? t + 1 : "(no .target)"); fclose(f); }
    }
    int rc = act(cur, "cuModuleLoadDataEx");
    if (rc) return rc;
    if (!strstr(image, ".entry cudadoctor_health")) return 218; /* CUDA_ERROR_INVALID_PTX */
    *mod = (void *)1;
    return 0;
}
int cuModuleGetFunction(void **fn, void *mod, const char *name) {
    (void)mod;
    if (strcmp(name, "cudadoctor_health")) return 500; /* CUDA_ERROR_NOT_FOUND */
    *fn = (void *)2;
    return 0;
}
int cuModuleUnload(void *mod) { (void)mod; return 0; }
int cuMemAlloc_v2(uint64_t *p, size_t n) {
    int rc = act(cur, "cuMemAlloc_v2");
    if (rc) return rc;
    *p = (uint64_t)(uintptr_t)calloc(1, n);
    return 0;
}
int cuMemFree_v2(uint64_t p) { free((void *)(uintptr_t)p); return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    int rc = act(cur, "cuLaunchKernel");
    if (rc) return rc;
    uint32_t *out = (uint32_t *)(uintptr_t)*(uint64_t *)params[0];
    uint32_t seed = *(uint32_t *)params[1];
    const char *w = getenv("FAKE_CUDA_WRONG");
    uint32_t off = (w && *w && atoi(w) == cur) ? 1 : 0;
    for (unsigned i = 0; i < gx * bx; i++) out[i] = 3 * i + seed + (i == 7 ? off : 0);
    return 0;
}
int cuCtxSynchronize(void) { return act(cur, "cuCtxSynchronize"); }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return 0; }
int cuGetErrorName(int e, const char **s) {
    switch (e) {
    case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case 46: *s = "CUDA_ERROR_DEVICE_UNAVAILABLE"; break;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case 214: *s = "CUDA_ERROR_ECC_UNCORRECTABLE"; break;
    case 218: *s = "CUDA_ERROR_INVALID_PTX"; break;
    case 719: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case 802: *s = "CUDA_ERROR_SYSTEM_NOT_READY"; break;
    case 803: *s = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
    }
    return 0;
}
int cuGetErrorString(int e, const char **s) {
    switch (e) {
    case 2: *s = "out of memory"; break;
    case 46: *s = "CUDA-capable device(s) is/are busy or unavailable"; break;
    case 100: *s = "no CUDA-capable device is detected"; break;
    case 802: *s = "system not yet initialized"; break;
    case 803: *s = "system has unsupported display driver / cuda driver combination"; break;
    default: *s = "unknown error"; break;
    }
    return 0;
}
"""


def build_libcuda(folder: Path) -> Path:
    """Compile the fake into folder/libcuda.so.1; put `folder` on LD_LIBRARY_PATH to use it."""
    return build(folder, "libcuda.so.1", SOURCE)
