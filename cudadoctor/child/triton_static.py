"""What Triton's build and cache steps will meet in this interpreter, read without running anything on the GPU.

A sibling of triton_probe.py, run in the TARGET interpreter: stdlib only, no CUDA. Every helper answers something
(None / '' where it cannot tell) and never raises: the probe reports each part on its own.
"""

import os
import platform
import shutil
import subprocess
import sys
import tempfile

TRITON_DISTS = ("triton", "pytorch-triton")


def dist_version(name):
    try:
        from importlib.metadata import version

        return str(version(name))
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return ""


def torch_triton_requirements():
    """torch's requirements naming a triton distribution, verbatim ('triton==3.6.0; platform_system == "Linux"'):
    the parent evaluates their markers for this interpreter (marker_env)."""
    try:
        from importlib.metadata import requires

        reqs = requires("torch") or []
    except Exception:  # noqa: BLE001
        return []
    out = []
    for r in reqs:
        name = r.split(";")[0].strip().lower()
        if name.startswith("triton") or name.startswith("pytorch-triton"):
            out.append(str(r))
    return out


def marker_env():
    """The values PEP 508 markers are evaluated against, for this interpreter (what pip would use here)."""
    try:
        impl = sys.implementation
        iv = impl.version
        impl_version = "%d.%d.%d" % (iv.major, iv.minor, iv.micro)
        return {"implementation_name": impl.name, "implementation_version": impl_version, "os_name": os.name,
                "platform_machine": platform.machine(), "platform_release": platform.release(),
                "platform_system": platform.system(), "platform_version": platform.version(),
                "python_full_version": platform.python_version(),
                "platform_python_implementation": platform.python_implementation(),
                "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}
    except Exception:  # noqa: BLE001
        return {}


def c_compiler():
    """The C compiler triton's build step picks: $CC, else gcc, else clang on PATH ('' when none)."""
    cc = os.environ.get("CC")
    if cc:
        return {"cc": cc, "from": "CC", "found": bool(shutil.which(cc) or os.path.isfile(cc))}
    for name in ("gcc", "clang"):
        p = shutil.which(name)
        if p:
            return {"cc": p, "from": "PATH", "found": True}
    return {"cc": "", "from": "", "found": False}


def python_headers():
    try:
        import sysconfig

        scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else None
        if scheme == "posix_local":  # Debian's scheme; triton reads posix_prefix's include
            scheme = "posix_prefix"
        inc = sysconfig.get_paths(scheme=scheme)["include"] if scheme else sysconfig.get_paths()["include"]
    except Exception:  # noqa: BLE001
        inc = ""
    return {"include": inc, "python_h": bool(inc) and os.path.isfile(os.path.join(inc, "Python.h"))}


def libcuda_lookup():
    """Where triton's libcuda_dirs() finds libcuda.so.1: $TRITON_LIBCUDA_PATH, else `/sbin/ldconfig -p`, else
    the LD_LIBRARY_PATH folders holding it."""
    out = {"env": os.environ.get("TRITON_LIBCUDA_PATH", ""), "ldconfig": [], "ld_library_path": [],
           "ldconfig_error": "", "ldconfig_missing": False}
    try:
        p = subprocess.run(["/sbin/ldconfig", "-p"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        text = p.stdout.decode("utf-8", "replace")
        out["ldconfig"] = [ln.split()[-1] for ln in text.splitlines() if "libcuda.so.1" in ln]
        if p.returncode != 0:
            out["ldconfig_error"] = "exit %d: %s" % (p.returncode, p.stderr.decode("utf-8", "replace")[:200])
    except Exception as e:  # noqa: BLE001 - no /sbin/ldconfig (Alpine, NixOS), or it hung
        out["ldconfig_error"] = "%s: %s" % (type(e).__name__, e)
        out["ldconfig_missing"] = isinstance(e, OSError) and not os.path.exists("/sbin/ldconfig")
    for d in (os.environ.get("LD_LIBRARY_PATH") or "").split(":"):
        if d and os.path.exists(os.path.join(d, "libcuda.so.1")):
            out["ld_library_path"].append(d)
    return out


def folder_state(path):
    """Whether Triton can write its compiled kernels under `path` and load them from there: the folder, or its
    nearest existing parent, writable by this user and on a file system that allows running code."""
    full = os.path.abspath(path) if path else ""
    probe = full
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    rec = {"path": path, "exists": bool(full) and os.path.isdir(full), "checked": probe, "writable": None,
           "noexec": None, "relative": bool(path) and not os.path.isabs(path)}
    if probe and os.path.exists(probe):
        try:
            rec["writable"] = os.access(probe, os.W_OK | os.X_OK)
        except Exception:  # noqa: BLE001
            pass
        statvfs = getattr(os, "statvfs", None)  # not on Windows
        if statvfs is not None:
            try:
                rec["noexec"] = bool(statvfs(probe).f_flag & getattr(os, "ST_NOEXEC", 8))
            except Exception:  # noqa: BLE001
                pass
    return rec


def _older_than(version, major_minor):
    try:
        return tuple(int(x) for x in version.split("+")[0].split(".")[:2]) < major_minor
    except ValueError:
        return False


def user_caches(triton_version):
    """The folders the user's own runs compile into: plain Triton's (TRITON_CACHE_DIR, else ~/.triton/cache, or
    $TRITON_HOME/.triton/cache from triton 3.2) and torch.compile's (TORCHINDUCTOR_CACHE_DIR, else
    <tmp>/torchinductor_<user>: torch names it with getpass.getuser(), which fails for a uid with no passwd entry)."""
    home = os.environ.get("TRITON_HOME") if not _older_than(triton_version, (3, 2)) else ""
    home = home or os.path.expanduser("~")
    env = os.environ.get("TRITON_CACHE_DIR")
    triton = folder_state(env if env else os.path.join(home, ".triton", "cache"))
    triton["env"] = "set" if env else ("empty" if env == "" else "")
    ind_env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    user_error = ""
    if ind_env:
        inductor = folder_state(ind_env)
    else:
        try:
            import getpass

            user = getpass.getuser()
        except Exception as e:  # noqa: BLE001 - KeyError: getpwuid(): uid not found (containers' random uids)
            user = ""
            user_error = "%s: %s" % (type(e).__name__, e)
        inductor = folder_state(os.path.join(tempfile.gettempdir(), "torchinductor_" + (user or "unknown")))
    inductor["env"] = "set" if ind_env else ""
    inductor["user_error"] = user_error
    return {"triton": triton, "inductor": inductor}


def usable_folders():
    """Folders where a cache would work (writable, exec allowed): what a fix can point TRITON_CACHE_DIR or
    TORCHINDUCTOR_CACHE_DIR at, best first."""
    cands = []
    xdg = os.environ.get("XDG_CACHE_HOME")
    cands.append(xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache"))
    cands += [tempfile.gettempdir(), "/var/tmp", "/dev/shm"]
    out = []
    for c in cands:
        if not c or not os.path.isabs(c) or c in out:
            continue
        st = folder_state(c)
        if st["exists"] and st["writable"] and st["noexec"] is False:
            out.append(c)
    return out
