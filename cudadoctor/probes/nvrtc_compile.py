"""NVRTC through ctypes, in a child process: compile CUDA C++ read from stdin to a cubin or PTX.

Run as `python -m cudadoctor.probes.nvrtc_compile --lib /path/libnvrtc.so.13 [--version]
[--name file.cu] [--opt=--gpu-architecture=sm_90 ...]`; prints one JSON line: {"ok": true,
"image": base64, "kind": "cubin"|"ptx", "log": ...} or {"ok": false, "error"/"log": ...}.
A child because a broken libnvrtc can crash or hang the process that loads it. API:
https://docs.nvidia.com/cuda/nvrtc/index.html (nvrtcCreateProgram, nvrtcCompileProgram,
nvrtcGetCUBIN, nvrtcGetPTX, nvrtcGetProgramLog, nvrtcVersion, nvrtcGetSupportedArchs).
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import sys


def _emit(d: dict) -> int:
    sys.stdout.write(json.dumps(d) + "\n")
    sys.stdout.flush()
    return 0


def _preload_builtins(folder: str) -> None:
    """libnvrtc dlopen()s libnvrtc-builtins.so.X.Y by name at compile time; outside a toolkit on the
    loader's path (the nvidia-cuda-nvrtc wheel) that fails unless the one next to libnvrtc is loaded first."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("libnvrtc-builtins.so"))
    except OSError:
        return
    for n in names:
        try:
            ctypes.CDLL(os.path.join(folder, n), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--version", action="store_true")
    ap.add_argument("--name", default="probe.cu")
    ap.add_argument("--opt", action="append", default=[])
    a = ap.parse_args(argv)
    try:
        lib = ctypes.CDLL(a.lib)
    except OSError as e:
        return _emit({"ok": False, "error": f"cannot load {a.lib}: {e}"})
    _preload_builtins(os.path.dirname(os.path.realpath(a.lib)))
    major, minor = ctypes.c_int(), ctypes.c_int()
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        return _emit({"ok": False, "error": "nvrtcVersion failed"})
    version = f"{major.value}.{minor.value}"
    if a.version:
        archs: list = []
        n = ctypes.c_int()
        if hasattr(lib, "nvrtcGetNumSupportedArchs") and lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0:
            arr = (ctypes.c_int * n.value)()
            if lib.nvrtcGetSupportedArchs(arr) == 0:
                archs = list(arr)
        return _emit({"ok": True, "version": version, "archs": archs})
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    src = sys.stdin.buffer.read()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), ctypes.c_char_p(src), a.name.encode(), 0, None, None)
    if rc != 0:
        return _emit({"ok": False, "error": f"nvrtcCreateProgram: {lib.nvrtcGetErrorString(rc).decode()}"})
    opts = [o.encode() for o in a.opt]
    arr = (ctypes.c_char_p * max(1, len(opts)))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    logbuf = ctypes.create_string_buffer(size.value or 1)
    lib.nvrtcGetProgramLog(prog, logbuf)
    log = logbuf.value.decode(errors="replace")
    if rc != 0:
        return _emit({"ok": False, "log": log or lib.nvrtcGetErrorString(rc).decode(), "version": version})
    sass = any("sm_" in o for o in a.opt)
    get_size, get = (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if sass else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
    get_size(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    if get(prog, buf) != 0:
        return _emit({"ok": False, "error": "could not fetch the compiled image", "log": log})
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return _emit({"ok": True, "version": version, "kind": "cubin" if sass else "ptx",
                  "image": base64.b64encode(buf.raw).decode(), "log": log})


if __name__ == "__main__":
    sys.exit(main())
