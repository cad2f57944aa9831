"""Build the probe kernels for chosen architectures: nvcc when present, NVRTC when not. Cached.

Cache: `cudadoctor.paths.cache_dir()/probes/<key>.<ext>`, the key a SHA-256 of (source, compiler
identity, flags). Every artifact is written to a temporary file in the cache folder and moved into
place with os.replace, so two concurrent runs never see (or leave) a half-written artifact.
Every compiler run has a timeout; a timeout or a compile error is a result, never an exception.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.compat import Arch, parse_arch, ptx_jits_on, sass_runs_on
from cudadoctor.system.files import atomic_write

CACHE_SUBDIR = "probes"
NVCC_TIMEOUT = 180.0
NVRTC_TIMEOUT = 120.0

# Arch-specific (`a`) targets nvcc 12.x/13.x offers (nvcc docs, "GPU feature list"); `--list-gpu-code`
# does not print them, so a build is simply attempted and nvcc's refusal recorded.
ARCH_SPECIFIC_CCS = {(9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1)}


@dataclass(frozen=True)
class BuildSpec:
    """One build of one kernel source: `targets` are (virtual arch, real code) pairs for -gencode."""

    name: str  # "native", "ptx-older", "sass-foreign", "ptx-newer", "arch-specific"
    source: str  # file name in probe_kernels/, e.g. "minimal.cu"
    targets: tuple  # (("compute_90", "sm_90"),) ; code may be "compute_80" for PTX only
    purpose: str = ""

    @property
    def images(self) -> tuple:
        """(sass, ptx) arch names the build should carry."""
        sass = tuple(c for _, c in self.targets if c.startswith("sm_"))
        ptx = tuple(c for _, c in self.targets if c.startswith("compute_"))
        return sass, ptx

    def nvcc_flags(self) -> list:
        out = []
        for arch, code in self.targets:
            out += ["-gencode", f"arch={arch},code={code}"]
        return out


@dataclass
class Built:
    spec: BuildSpec
    path: str = ""  # the artifact (fatbin for nvcc, cubin or PTX for NVRTC)
    compiler: str = ""  # "nvcc 13.0 (V13.0.88)" / "nvrtc 13.0"
    cached: bool = False
    seconds: float = 0.0
    error: str = ""  # compile error, verbatim tail
    unsupported: bool = False  # the compiler does not know this target
    compiler_failed: bool = False  # the compiler ran and failed (not: cudadoctor's cache could not be used)

    @property
    def ok(self) -> bool:
        return bool(self.path) and not self.error


@dataclass
class Compiler:
    kind: str  # "nvcc" or "nvrtc"
    path: str  # nvcc binary or libnvrtc.so
    version: str = ""  # "13.0"
    identity: str = ""  # full identity for the cache key
    codes: list = field(default_factory=list)  # sm_XY nvcc can build (from --list-gpu-code)
    host_programs: bool = False  # can build runtime-API host programs (nvcc + a host compiler)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.version}".strip()


# ---------------------------------------------------------------- planning


def _cc_arch(cc: tuple) -> str:
    return f"{cc[0]}{cc[1]}"


def supported_ccs(compiler: Optional[Compiler]) -> list:
    codes = (compiler.codes if compiler and compiler.codes else
             ["sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120"])
    archs = [parse_arch(c) for c in codes]
    return sorted({a.cc for a in archs if a and not a.variant})


def plan(cc: tuple, compiler: Optional[Compiler] = None, quick: bool = False) -> list:
    """The builds that prove the compatibility rule on a GPU of compute capability `cc`.

    native: SASS for cc. ptx-older: PTX only, for the newest arch below cc (driver JIT).
    sass-foreign: SASS for an arch this GPU cannot run (an older major if the compiler has one,
    else a newer one): must give "no kernel image". ptx-newer: PTX for a newer arch than cc: also
    "no kernel image". arch-specific: sm_XYa where it exists. `quick`: native + sass-foreign.
    """
    ccs = supported_ccs(compiler)
    x = _cc_arch(cc)
    out = [BuildSpec("native", "minimal.cu", ((f"compute_{x}", f"sm_{x}"),), "SASS for this GPU")]
    foreign = ([c for c in ccs if c[0] < cc[0]] or [None])[-1] or next((c for c in ccs if c[0] > cc[0]), None)
    if foreign:
        f = _cc_arch(foreign)
        out.append(BuildSpec("sass-foreign", "minimal.cu", ((f"compute_{f}", f"sm_{f}"),),
                             "SASS only, for an arch this GPU cannot run"))
    if quick:
        return out
    older = [c for c in ccs if c < tuple(cc)]
    if older:
        o = _cc_arch(older[-1])
        out.insert(1, BuildSpec("ptx-older", "minimal.cu", ((f"compute_{o}", f"compute_{o}"),),
                                "PTX only, for an older arch (driver JIT)"))
    newer = [c for c in ccs if c > tuple(cc)]
    if newer:
        n = _cc_arch(newer[0])
        out.append(BuildSpec("ptx-newer", "minimal.cu", ((f"compute_{n}", f"compute_{n}"),),
                             "PTX only, for a newer arch"))
    if tuple(cc) in ARCH_SPECIFIC_CCS:
        out.append(BuildSpec("arch-specific", "minimal.cu", ((f"compute_{x}a", f"sm_{x}a"),),
                             "arch-specific SASS (sm_XYa)"))
    return out


def kernel_specs(cc: tuple) -> list:
    """Native builds of the GEMM and attention probes."""
    x = _cc_arch(cc)
    t = ((f"compute_{x}", f"sm_{x}"),)
    return [BuildSpec("gemm", "gemm.cu", t, "naive and tiled GEMM"),
            BuildSpec("attention", "attention.cu", t, "fused attention")]


def arch_can_run(name: str, cc: tuple) -> bool:
    a: Optional[Arch] = parse_arch(name)
    if not a:
        return False
    return sass_runs_on(a, cc) if a.kind == "sm" else ptx_jits_on(a, cc)


# ---------------------------------------------------------------- cache


def cache_root(cache_dir: Optional[str] = None) -> str:
    if cache_dir:
        return os.path.join(cache_dir, CACHE_SUBDIR)
    from cudadoctor.paths import cache_dir as user_cache

    return os.path.join(str(user_cache()), CACHE_SUBDIR)


def cache_key(source: bytes, identity: str, flags: list) -> str:
    h = hashlib.sha256()
    h.update(source)
    h.update(b"\0" + identity.encode() + b"\0")
    h.update(json.dumps(list(flags)).encode())
    return h.hexdigest()[:40]


# ---------------------------------------------------------------- compilers

_RE_RELEASE = re.compile(r"release\s+(\d+\.\d+)\s*,\s*(V[\w.]+)")


def find_nvcc(system) -> Optional[str]:
    for cand in [system.which("nvcc")] + [os.path.join(system.env[v], "bin", "nvcc")
                                          for v in ("CUDA_HOME", "CUDA_PATH") if system.env.get(v)] + [
            "/usr/local/cuda/bin/nvcc"]:
        if cand and system.is_executable(cand):
            return cand
    return None


def nvcc_compiler(system, nvcc: str, timeout: float = 20.0) -> Optional[Compiler]:
    r = system.run([nvcc, "--version"], timeout=timeout)
    m = _RE_RELEASE.search(r.stdout or "")
    if r.returncode != 0 or not m:
        return None
    codes_r = system.run([nvcc, "--list-gpu-code"], timeout=timeout)
    codes = [c.strip() for c in (codes_r.stdout or "").split() if c.strip().startswith("sm_")]
    host = bool(system.which("g++") or system.which("c++") or system.which("clang++"))
    return Compiler("nvcc", nvcc, m.group(1), f"nvcc {m.group(1)} {m.group(2)}", codes, host)


def nvrtc_candidates(system, site_packages: list) -> list:
    """libnvrtc.so* from a toolkit (CUDA_HOME, /usr/local/cuda) or the nvidia-cuda-nvrtc wheel."""
    dirs = [os.path.join(system.env[v], d) for v in ("CUDA_HOME", "CUDA_PATH") if system.env.get(v)
            for d in ("lib64", "lib")]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    for sp in site_packages:
        nv = os.path.join(sp, "nvidia")
        for sub in system.listdir(nv):
            dirs.append(os.path.join(nv, sub, "lib"))
    out = []
    for d in dirs:
        for n in system.listdir(d):
            if n.startswith("libnvrtc.so") and "builtins" not in n:
                p = os.path.join(d, n)
                if p not in out:
                    out.append(p)
    # prefer the versioned name (libnvrtc.so.13) over the dev symlink
    return sorted(out, key=lambda p: (not re.search(r"\.so\.\d+$", p), p))


def nvrtc_compiler(system, lib: str, timeout: float = 30.0) -> Optional[Compiler]:
    r = system.run([system.own_python(), "-m", "cudadoctor.probes.nvrtc_compile", "--lib", lib, "--version"],
                   timeout=timeout)
    try:
        d = json.loads((r.stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if not d.get("ok"):
        return None
    codes = [f"sm_{a}" for a in d.get("archs", [])]
    return Compiler("nvrtc", lib, d["version"], f"nvrtc {d['version']} {os.path.realpath(lib)}", codes, False)


def pick_compiler(system, prefer: str = "auto", site_packages: Optional[list] = None) -> tuple:
    """(Compiler or None, why-not text). prefer: 'auto' (nvcc, then NVRTC), 'nvcc' or 'nvrtc'."""
    why = []
    if prefer in ("auto", "nvcc"):
        nvcc = find_nvcc(system)
        c = nvcc_compiler(system, nvcc) if nvcc else None
        if c:
            return c, ""
        why.append("no working nvcc" if not nvcc else f"{nvcc} --version failed")
    if prefer in ("auto", "nvrtc"):
        libs = nvrtc_candidates(system, site_packages or [])
        for lib in libs:
            c = nvrtc_compiler(system, lib)
            if c:
                return c, ""
        why.append("no usable libnvrtc (toolkit or the nvidia-cuda-nvrtc wheel)" if not libs
                   else f"libnvrtc at {libs[0]} did not load")
    return None, "; ".join(why)


def prepare_cache_root(root: str) -> str:
    """Create the cache folder; '' when usable, else why not (a file in the way, no permission)."""
    try:
        os.makedirs(root, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            return f"the build cache {root} is not writable; set CUDADOCTOR_CACHE_DIR to a folder you own"
    except OSError as e:
        return (f"the build cache {root} cannot be used ({e.strerror or e}); "
                "set CUDADOCTOR_CACHE_DIR to a folder you own")
    return ""


def cached_artifact_ok(path: str) -> bool:
    """A cached build is used only when it still reads as a whole CUDA binary: a truncated file (disk
    full, a killed older version) is rebuilt rather than launched."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    if not data:
        return False
    if path.endswith(".ptx"):
        return b".target" in data and data.rstrip().endswith(b"}")
    from cudadoctor.probes.fatbin import BinaryFormatError, read_bytes

    try:
        arch = read_bytes(data, path)
    except (BinaryFormatError, ValueError, IndexError):
        return False
    return bool(arch.sass or arch.ptx)


# ---------------------------------------------------------------- building


def build(system, compiler: Compiler, spec: BuildSpec, kernels_dir: str, use_cache: bool = True,
          cache_dir: Optional[str] = None, timeout: Optional[float] = None) -> Built:
    src_path = os.path.join(kernels_dir, spec.source)
    source = system.read_bytes(src_path)
    if source is None:
        return Built(spec, compiler=compiler.label, error=f"cannot read {src_path}")
    if compiler.kind == "nvcc":
        flags = ["-fatbin", *spec.nvcc_flags()]
        ext = "fatbin"
    else:
        if len(spec.targets) != 1:
            return Built(spec, compiler=compiler.label, error="NVRTC builds one target at a time")
        code = spec.targets[0][1]
        flags = [f"--gpu-architecture={code}", "-default-device"]
        ext = "cubin" if code.startswith("sm_") else "ptx"
    key = cache_key(source, compiler.identity, flags)
    root = cache_root(cache_dir)
    dest = os.path.join(root, f"{spec.source.rsplit('.', 1)[0]}-{key}.{ext}")
    if use_cache and cached_artifact_ok(dest):
        return Built(spec, dest, compiler.label, cached=True)
    t0 = time.monotonic()
    problem = prepare_cache_root(root)
    if problem:
        return Built(spec, compiler=compiler.label, error=problem)
    if compiler.kind == "nvcc":
        with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as tmp:
            out = os.path.join(tmp, f"out.{ext}")
            r = system.run([compiler.path, *flags, "-o", out, src_path], timeout=timeout or NVCC_TIMEOUT, cwd=tmp)
            if r.timed_out:
                return Built(spec, compiler=compiler.label, seconds=time.monotonic() - t0,
                             error=f"nvcc gave no answer within {timeout or NVCC_TIMEOUT:g} s", compiler_failed=True)
            if r.returncode != 0 or not os.path.isfile(out):
                how = f"killed by {r.signal_name}" if r.signal_name else f"exit code {r.returncode}"
                msg = (r.stderr or r.stdout or "").strip()
                msg = f"{how}: {msg}" if msg else (r.describe() if not r.started else how)
                return Built(spec, compiler=compiler.label, seconds=time.monotonic() - t0, error=msg[-800:],
                             unsupported=bool(re.search(r"[Uu]nsupported gpu architecture|is not defined for option",
                                                        msg)), compiler_failed=True)
            with open(out, "rb") as f:
                data = f.read()
    else:
        r = system.run([system.own_python(), "-m", "cudadoctor.probes.nvrtc_compile", "--lib", compiler.path,
                        "--name", spec.source, *[f"--opt={o}" for o in flags]],
                       timeout=timeout or NVRTC_TIMEOUT, input_bytes=source)
        if r.timed_out:
            return Built(spec, compiler=compiler.label, seconds=time.monotonic() - t0,
                         error=f"NVRTC gave no answer within {timeout or NVRTC_TIMEOUT:g} s")
        try:
            d = json.loads((r.stdout or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            return Built(spec, compiler=compiler.label, seconds=time.monotonic() - t0,
                         error=f"the NVRTC child gave no result: {r.describe()}")
        if not d.get("ok"):
            log = d.get("log") or d.get("error") or ""
            return Built(spec, compiler=compiler.label, seconds=time.monotonic() - t0, error=log[-800:],
                         unsupported="invalid value for --gpu-architecture" in log)
        data = base64.b64decode(d["image"])
    atomic_write(dest, data, make_dirs=True)
    return Built(spec, dest, compiler.label, cached=False, seconds=time.monotonic() - t0)


def build_host_program(system, compiler: Compiler, spec: BuildSpec, kernels_dir: str, use_cache: bool = True,
                       cache_dir: Optional[str] = None, timeout: Optional[float] = None) -> Built:
    """The runtime-API program (runtime_launch.cu) for the same targets: the path users hit."""
    host_spec = BuildSpec(spec.name, "runtime_launch.cu", spec.targets, spec.purpose)
    if compiler.kind != "nvcc" or not compiler.host_programs:
        return Built(host_spec, compiler=compiler.label, error="needs nvcc and a host C++ compiler")
    src_path = os.path.join(kernels_dir, host_spec.source)
    source = system.read_bytes(src_path)
    if source is None:
        return Built(host_spec, compiler=compiler.label, error=f"cannot read {src_path}")
    flags = host_spec.nvcc_flags()
    key = cache_key(source, compiler.identity, ["exe", *flags])
    root = cache_root(cache_dir)
    dest = os.path.join(root, f"runtime_launch-{key}")
    if use_cache and os.path.isfile(dest) and os.access(dest, os.X_OK) and (os.path.getsize(dest) or 0) > 1024:
        return Built(host_spec, dest, compiler.label, cached=True)
    t0 = time.monotonic()
    problem = prepare_cache_root(root)
    if problem:
        return Built(host_spec, compiler=compiler.label, error=problem)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as tmp:
        out = os.path.join(tmp, "prog")
        r = system.run([compiler.path, *flags, "-o", out, src_path], timeout=timeout or NVCC_TIMEOUT, cwd=tmp)
        if r.timed_out or r.returncode != 0 or not os.path.isfile(out):
            msg = f"nvcc gave no answer within {timeout or NVCC_TIMEOUT:g} s" if r.timed_out else (
                r.stderr or r.stdout or r.describe()).strip()[-800:]
            return Built(host_spec, compiler=compiler.label, seconds=time.monotonic() - t0, error=msg)
        os.chmod(out, 0o755)
        os.replace(out, dest)  # same filesystem (tmp is inside root): atomic
    return Built(host_spec, dest, compiler.label, cached=False, seconds=time.monotonic() - t0)
