"""A small binding of the CUDA driver API (libcuda.so.1) through ctypes, for CHILD processes only.

cudadoctor never initialises CUDA in its own process: modules that use this one run as
`python -m cudadoctor.probes.<module>` under `system.run(..., timeout)` (see probes/launch.py).
Nothing here is imported by the parent at module level.

Stable API (also used by the `bench` helper for launch-cost and memory measurements without torch):

    drv = Driver()                      # loads libcuda.so.1 (DriverLoadError when it cannot)
    drv.init(); drv.driver_version()    # 13000 -> "13.0" via version_str()
    dev = drv.device(0); drv.compute_capability(dev) -> (9, 0); drv.name(dev); drv.total_mem(dev)
    drv.attribute(dev, ATTR_MULTIPROCESSOR_COUNT)
    drv.pci_bus_id(dev) -> "0000:00:06.0"; drv.uuid(dev); drv.can_access_peer(dev, peer) -> bool
    with drv.context(dev):              # the device's primary context, made current
        mod = drv.load_module(image_bytes)            # cubin, fatbin or NUL-terminated PTX
        fn = drv.function(mod, "name")
        buf = drv.alloc(nbytes); drv.htod(buf, data); drv.dtoh(buf, nbytes) -> bytes; drv.free(buf)
        drv.launch(fn, grid=(x, y, z), block=(x, y, z), args=[ctypes values], shared=0)
        drv.synchronize()
        ms = drv.time_ms(lambda: ..., repeat=10)       # cuEvent-timed, per repeat
        free, total = drv.mem_info()
        drv.unload(mod)

Every failing call raises CudaError(call, code, name, message). Error codes and attribute numbers
are from cuda.h (CUDA Driver API, "Data types used by CUDA driver":
https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html).
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Callable, Optional, Sequence

CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221
CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222

ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8
ATTR_CLOCK_RATE = 13
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
# CUdevice_P2PAttribute
P2P_PERFORMANCE_RANK = 1
P2P_ACCESS_SUPPORTED = 2
P2P_NATIVE_ATOMIC_SUPPORTED = 3

_JIT_ERROR_LOG_BUFFER = 5
_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

LIBCUDA = "libcuda.so.1"


class DriverLoadError(RuntimeError):
    """libcuda.so.1 could not be loaded (no driver, or not on the loader's path)."""


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str, message: str, log: str = ""):
        self.call, self.code, self.name, self.message, self.log = call, code, name, message, log
        super().__init__(f"{call} failed: {code} ({name}: {message})" + (f"; JIT log: {log}" if log else ""))

    def to_dict(self) -> dict:
        d = {"call": self.call, "code": self.code, "name": self.name, "message": self.message}
        if self.log:
            d["log"] = self.log
        return d


def version_str(v: int) -> str:
    """13000 -> '13.0' (cuDriverGetVersion's encoding: 1000 * major + 10 * minor)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


# cuda.h's names and texts for the codes a failing start gives, for a libcuda that cannot name them itself: the toolkit's
# stub libcuda answers every call, cuGetErrorName included, with 34 (seen on an H200, session 35: "CUDA_ERROR_34:
# unknown error")
KNOWN_ERRORS = {
    3: ("CUDA_ERROR_NOT_INITIALIZED", "initialization error"),
    34: ("CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"),
    35: ("CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient for CUDA runtime version"),
    46: ("CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"),
    100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"),
    222: ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."),
    802: ("CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"),
    804: ("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"),
    999: ("CUDA_ERROR_UNKNOWN", "unknown error"),
}


class Driver:
    def __init__(self, path: str = LIBCUDA):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise DriverLoadError(f"cannot load {path}: {e}") from e
        self.path = path
        self._ctx_dev: Optional[int] = None

    # ---------------------------------------------------------------- errors
    def error_name(self, code: int) -> str:
        p = ctypes.c_char_p()
        if self._fn("cuGetErrorName")(ctypes.c_int(code), ctypes.byref(p)) == 0 and p.value:
            return p.value.decode()
        return KNOWN_ERRORS.get(code, (f"CUDA_ERROR_{code}",))[0]

    def error_string(self, code: int) -> str:
        p = ctypes.c_char_p()
        if self._fn("cuGetErrorString")(ctypes.c_int(code), ctypes.byref(p)) == 0 and p.value:
            return p.value.decode()
        return KNOWN_ERRORS[code][1] if code in KNOWN_ERRORS else "unknown error"

    def _fn(self, name: str):
        try:
            return getattr(self.lib, name)
        except AttributeError as e:
            raise CudaError(name, -1, "SYMBOL_NOT_FOUND", f"{self.path} has no symbol {name}") from e

    def _call(self, name: str, *args, log: Callable[[], str] = lambda: "") -> None:
        rc = self._fn(name)(*args)
        if rc != CUDA_SUCCESS:
            raise CudaError(name, rc, self.error_name(rc), self.error_string(rc), log())

    # ---------------------------------------------------------------- driver and devices
    def init(self) -> None:
        self._call("cuInit", ctypes.c_uint(0))

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self._call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def device_count(self) -> int:
        n = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, ordinal: int = 0) -> int:
        d = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(d), ctypes.c_int(ordinal))
        return d.value

    def attribute(self, dev: int, attr: int) -> int:
        v = ctypes.c_int()
        self._call("cuDeviceGetAttribute", ctypes.byref(v), ctypes.c_int(attr), ctypes.c_int(dev))
        return v.value

    def compute_capability(self, dev: int) -> tuple:
        return (self.attribute(dev, ATTR_COMPUTE_CAPABILITY_MAJOR), self.attribute(dev, ATTR_COMPUTE_CAPABILITY_MINOR))

    def name(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, ctypes.c_int(256), ctypes.c_int(dev))
        return buf.value.decode(errors="replace")

    def total_mem(self, dev: int) -> int:
        v = ctypes.c_size_t()
        self._call("cuDeviceTotalMem_v2", ctypes.byref(v), ctypes.c_int(dev))
        return v.value

    # ---------------------------------------------------------------- between devices (no context needed)
    def pci_bus_id(self, dev: int) -> str:
        """'0000:00:06.0' (cuDeviceGetPCIBusId: domain, bus, device, function; lower-case hex)."""
        buf = ctypes.create_string_buffer(64)
        self._call("cuDeviceGetPCIBusId", buf, ctypes.c_int(64), ctypes.c_int(dev))
        return buf.value.decode(errors="replace").lower()

    def uuid(self, dev: int) -> str:
        """'GPU-3cf3053a-1dca-59d4-1825-812007e0dc7d', as nvidia-smi -L prints it (cuDeviceGetUuid)."""
        raw = (ctypes.c_ubyte * 16)()
        name = "cuDeviceGetUuid_v2" if hasattr(self.lib, "cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
        self._call(name, raw, ctypes.c_int(dev))
        h = bytes(raw).hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def can_access_peer(self, dev: int, peer: int) -> bool:
        v = ctypes.c_int()
        self._call("cuDeviceCanAccessPeer", ctypes.byref(v), ctypes.c_int(dev), ctypes.c_int(peer))
        return bool(v.value)

    def p2p_attribute(self, attr: int, src: int, dst: int) -> int:
        """cuDeviceGetP2PAttribute: P2P_PERFORMANCE_RANK, P2P_ACCESS_SUPPORTED, P2P_NATIVE_ATOMIC_SUPPORTED."""
        v = ctypes.c_int()
        self._call("cuDeviceGetP2PAttribute", ctypes.byref(v), ctypes.c_int(attr), ctypes.c_int(src),
                   ctypes.c_int(dst))
        return v.value

    # ---------------------------------------------------------------- context
    @contextlib.contextmanager
    def context(self, dev: int, release: bool = True):
        """Retain the device's primary context (what the runtime API and torch use) and make it current.
        `release=False` leaves it to the process's exit (a child about to exit saves the ~0.1 s a release
        costs per GPU; the driver frees it when the process ends)."""
        ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), ctypes.c_int(dev))
        try:
            self._call("cuCtxSetCurrent", ctx)
            yield ctx
        finally:
            if release:
                self._fn("cuDevicePrimaryCtxRelease_v2")(ctypes.c_int(dev))

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    def mem_info(self) -> tuple:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # ---------------------------------------------------------------- modules and launches
    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """cuModuleLoadDataEx with an error-log buffer, so a PTX JIT failure says why."""
        mod = ctypes.c_void_p()
        data = image + b"\0" if _is_text(image) and not image.endswith(b"\0") else image
        size = 16384
        log = ctypes.create_string_buffer(size)
        opts = (ctypes.c_int * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(size))
        buf = ctypes.create_string_buffer(data, len(data))
        self._call("cuModuleLoadDataEx", ctypes.byref(mod), buf, ctypes.c_uint(2), opts, vals,
                   log=lambda: log.value.decode(errors="replace").strip())
        return mod

    def function(self, mod, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(fn), mod, name.encode())
        return fn

    def unload(self, mod) -> None:
        self._call("cuModuleUnload", mod)

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(max(1, nbytes)))
        return p.value

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def htod(self, ptr: int, data) -> None:
        b = bytes(data)
        self._call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), ctypes.c_char_p(b), ctypes.c_size_t(len(b)))

    def dtoh(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self._call("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes))
        return buf.raw

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self._call("cuMemsetD8_v2", ctypes.c_uint64(ptr), ctypes.c_ubyte(value), ctypes.c_size_t(nbytes))

    def launch(self, fn, grid: Sequence[int], block: Sequence[int], args: Sequence, shared: int = 0,
               stream: Optional[int] = None) -> None:
        """Launch `fn`; `args` are ctypes values in the kernel's parameter order (c_uint64 for pointers)."""
        g = list(grid) + [1] * (3 - len(grid))
        b = list(block) + [1] * (3 - len(block))
        holders = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_uint64(a) for a in args]
        params = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p)
                                                             for h in holders])
        self._call("cuLaunchKernel", fn, *[ctypes.c_uint(x) for x in g], *[ctypes.c_uint(x) for x in b],
                   ctypes.c_uint(shared), ctypes.c_void_p(stream or 0), params, ctypes.c_void_p(0))

    # ---------------------------------------------------------------- timing
    def event(self) -> ctypes.c_void_p:
        e = ctypes.c_void_p()
        self._call("cuEventCreate", ctypes.byref(e), ctypes.c_uint(0))
        return e

    def time_ms(self, work: Callable[[], None], repeat: int = 1) -> float:
        """Milliseconds per call of `work()` (which enqueues GPU work), timed with CUDA events."""
        start, stop = self.event(), self.event()
        try:
            self._call("cuEventRecord", start, ctypes.c_void_p(0))
            for _ in range(repeat):
                work()
            self._call("cuEventRecord", stop, ctypes.c_void_p(0))
            self._call("cuEventSynchronize", stop)
            ms = ctypes.c_float()
            # CUDA 12.8 added cuEventElapsedTime_v2 (same arguments); older drivers only have the first
            name = "cuEventElapsedTime_v2" if hasattr(self.lib, "cuEventElapsedTime_v2") else "cuEventElapsedTime"
            self._call(name, ctypes.byref(ms), start, stop)
            return ms.value / max(1, repeat)
        finally:
            self._fn("cuEventDestroy_v2")(start)
            self._fn("cuEventDestroy_v2")(stop)


def _is_text(image: bytes) -> bool:
    """PTX is text; cubins and fatbins are binary (they start with ELF or the fatbin magic)."""
    return not (image[:4] == b"\x7fELF" or image[:4] == b"\x50\xed\x55\xba")
