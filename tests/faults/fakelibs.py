"""Tiny fake driver libraries, compiled with the host C compiler for fault cases.

libnvidia-ml.so.1: nvmlInit* hangs, segfaults or returns an NVML error code, per $FAKE_NVML
("hang", "segv" or a number; 9 is NVML_ERROR_DRIVER_NOT_LOADED, 999 NVML_ERROR_UNKNOWN).
libcuda.so.1: cuInit returns $FAKE_CUINIT (default 999, CUDA_ERROR_UNKNOWN), or hangs ("hang");
cuDriverGetVersion answers 13000 so callers get past the version query.
Error codes: NVML API reference (https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html),
CUDA driver API (https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

NVML_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int act(void) {
    const char *m = getenv("FAKE_NVML");
    if (!m || !*m) return 999;
    if (!strcmp(m, "hang")) for (;;) pause();
    if (!strcmp(m, "segv")) raise(SIGSEGV);
    return atoi(m);
}
int nvmlInit_v2(void) { return act(); }
int nvmlInit(void) { return act(); }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return act(); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) {
    switch (r) {
    case 9: return "Driver Not Loaded";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}
"""

CUDA_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static const char *NAME = "CUDA_ERROR_UNKNOWN";
int cuInit(unsigned int flags) {
    (void)flags;
    const char *m = getenv("FAKE_CUINIT");
    if (m && !strcmp(m, "hang")) for (;;) pause();
    return m && *m ? atoi(m) : 999;
}
int cuDriverGetVersion(int *v) { if (v) *v = 13000; return 0; }
int cuGetErrorName(int e, const char **s) { (void)e; if (s) *s = NAME; return 0; }
int cuGetErrorString(int e, const char **s) {
    (void)e; if (s) *s = "unknown error (fake libcuda: cuInit fails)"; return 0;
}
int cuDeviceGetCount(int *n) { if (n) *n = 0; return 3; }
"""


def compiler() -> str:
    return shutil.which("gcc") or shutil.which("cc") or ""


def build(folder: Path, soname: str, source: str) -> Path:
    """Compile `source` into folder/soname (a shared library with that SONAME)."""
    folder.mkdir(parents=True, exist_ok=True)
    c = folder / (soname.split(".so")[0] + ".c")
    c.write_text(source)
    out = folder / soname
    subprocess.run([compiler(), "-shared", "-fPIC", "-O0", f"-Wl,-soname,{soname}", "-o", str(out), str(c)],
                   check=True, capture_output=True, timeout=120)
    return out
