"""Step 70: the CUDA-relevant environment variables and the traps they set."""

from __future__ import annotations

import os
import re

from cudadoctor.checks.common import driver_view, earlier_findings, env_vars, is_stubs_dir, ld_entries, ld_without, major_minor, q, visible_ordinals
from cudadoctor.checks.env_container import container_runtime_findings
from cudadoctor.checks.env_cuda_driver import DOCS_ENV, cuda_driver_findings, device_order_invalid, env_with_crs
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.compat import Arch, ptx_jits_on, sass_runs_on
from cudadoctor.model import Finding, Fix, Status

#: what each variable does (shown by `cudadoctor env`); prefixes end with "*"
ENV_DOCS = {
    "CUDA_VISIBLE_DEVICES": "which GPUs CUDA programs see, and their order (ordinals, GPU-/MIG- UUIDs)",
    "CUDA_DEVICE_ORDER": "FASTEST_FIRST (default) or PCI_BUS_ID (the order nvidia-smi uses)",
    "CUDA_HOME": "the toolkit torch.utils.cpp_extension and many builds use",
    "CUDA_PATH": "the toolkit some builds use (CUDA_HOME wins for torch)",
    "CUDA_ROOT": "an older name for the toolkit folder",
    "PATH": "which nvcc a shell runs",
    "LD_LIBRARY_PATH": "folders searched for shared libraries before RUNPATH and the ldconfig cache",
    "LIBRARY_PATH": "folders the linker searches at build time (stubs belong here, not in LD_LIBRARY_PATH)",
    "LD_PRELOAD": "libraries loaded before all others",
    "TORCH_CUDA_ARCH_LIST": "GPU targets for extensions built with torch.utils.cpp_extension",
    "CUDA_LAUNCH_BLOCKING": "1 makes every kernel launch synchronous (for debugging; slow)",
    "CUDA_MODULE_LOADING": "LAZY (default since CUDA 12.2) or EAGER kernel loading",
    "PYTORCH_CUDA_ALLOC_CONF": "torch's CUDA caching allocator options (key:value,key:value)",
    "PYTORCH_ALLOC_CONF": "torch's allocator options (newer name of PYTORCH_CUDA_ALLOC_CONF)",
    "NVIDIA_VISIBLE_DEVICES": "GPUs the NVIDIA container runtime exposes to a container",
    "NVIDIA_DRIVER_CAPABILITIES": "driver libraries the container runtime mounts (compute, utility, ...)",
    "CUDA_CACHE_DISABLE": "1 disables the PTX JIT cache (JIT on every run)",
    "CUDA_CACHE_PATH": "where JIT-compiled kernels are cached (~/.nv/ComputeCache)",
    "CUDA_CACHE_MAXSIZE": "JIT cache size in bytes",
    "CUDA_FORCE_PTX_JIT": "1 ignores SASS and JIT-compiles PTX (testing only)",
    "CUDA_DISABLE_PTX_JIT": "1 refuses to JIT PTX",
    "NCCL_*": "NCCL settings (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_DISABLE turn transports off)",
    "CUDA_*": "other CUDA driver/runtime settings",
    "NVIDIA_*": "NVIDIA container runtime settings",
    "TRITON_*": "Triton settings (TRITON_CACHE_DIR: where kernels are compiled to; TRITON_LIBCUDA_PATH: libcuda's folder)",
    "TORCHINDUCTOR_*": "torch.compile settings (TORCHINDUCTOR_CACHE_DIR: its cache folder)",
    "TORCH_*": "torch settings",
    "PYTORCH_*": "torch settings",
    "CONDA_PREFIX": "the active conda environment (its lib/ can hold CUDA libraries)",
    "VIRTUAL_ENV": "the active virtual environment",
}
ALLOC_KEYS = {
    "max_split_size_mb": "int", "roundup_power2_divisions": "any", "garbage_collection_threshold": "float",
    "expandable_segments": "bool", "pinned_use_cuda_host_register": "bool", "pinned_num_register_threads": "int",
    "release_lock_on_cudamalloc": "bool", "backend": ("native", "cudaMallocAsync"),
    "pinned_use_background_threads": "bool", "max_non_split_rounding_mb": "int",
    "graph_capture_record_stream_reuse": "bool", "per_process_memory_fraction": "float",
    "pinned_reserve_segment_size_mb": "int", "pinned_use_host_register": "bool",
}
NCCL_TRANSPORT_OFF = {"NCCL_P2P_DISABLE": "GPU peer-to-peer (NVLink/PCIe P2P)", "NCCL_SHM_DISABLE": "shared memory",
                      "NCCL_IB_DISABLE": "InfiniBand/RoCE", "NCCL_NVLS_ENABLE": "NVLink SHARP",
                      "NCCL_CUMEM_ENABLE": "cuMem allocations", "NCCL_NET_GDR_LEVEL": "GPUDirect RDMA"}
CONTAINER_DEFAULT_DIRS = ("/usr/local/nvidia/lib", "/usr/local/nvidia/lib64")
DOCS_ALLOC = "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
DOCS_NCCL = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def doc_for(name: str) -> str:
    if name in ENV_DOCS:
        return ENV_DOCS[name]
    for k, v in ENV_DOCS.items():
        if k.endswith("*") and name.startswith(k[:-1]):
            return v
    return ""


def parse_arch_list(value: str) -> list:
    """TORCH_CUDA_ARCH_LIST ('8.0;8.6+PTX 9.0a', 'Ampere') -> [(cc, variant, ptx)] ; names kept as str."""
    out = []
    for tok in re.split(r"[;\s,]+", value.strip()):
        if not tok:
            continue
        ptx = tok.upper().endswith("+PTX")
        base = tok[:-4] if ptx else tok
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", base)
        if m:
            out.append(((int(m.group(1)), int(m.group(2))), m.group(3), ptx))
        else:
            out.append((base, "", ptx))
    return out


def check_alloc_conf(value: str) -> list:
    """Problems in PYTORCH_CUDA_ALLOC_CONF (torch raises at the first CUDA allocation on these)."""
    problems = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if ":" not in item:
            hint = " (use ':' not '=')" if "=" in item else ""
            problems.append(f"'{item}' is not key:value{hint}")
            continue
        k, _, v = item.partition(":")
        k, v = k.strip(), v.strip()
        kind = ALLOC_KEYS.get(k)
        if kind is None:
            problems.append(f"unknown option '{k}'")
        elif kind == "bool" and v not in ("True", "False", "true", "false", "1", "0"):
            problems.append(f"{k} must be True or False, not '{v}'")
        elif kind == "int" and not v.isdigit():
            problems.append(f"{k} must be a whole number, not '{v}'")
        elif kind == "float":
            try:
                float(v)
            except ValueError:
                problems.append(f"{k} must be a number, not '{v}'")
        elif isinstance(kind, tuple) and v not in kind:
            problems.append(f"{k} must be one of {', '.join(kind)}, not '{v}'")
    return problems


def _mig_uuids(ctx: Context) -> list:
    n = ctx.fact("nvml")
    out = []
    if n.value is not None:
        for g in n.value.gpus:
            out.extend(d.get("uuid", "") for d in (g.mig_devices or []) if isinstance(d, dict))
    return [u for u in out if u]


def visible_devices_finding(ctx: Context, value: str) -> Finding:
    dv = driver_view(ctx)
    count = len(dv.gpus)
    uuids = [g.uuid for g in dv.gpus]
    tokens = [t.strip() for t in value.split(",")]
    ev = {"CUDA_VISIBLE_DEVICES": value, "GPUs": count}
    fix_unset = Fix("Unset it to see every GPU, or list GPUs that exist (ordinals 0.."
                    f"{max(count - 1, 0)} or UUIDs from `nvidia-smi -L`).",
                    ("unset CUDA_VISIBLE_DEVICES", "nvidia-smi -L"), DOCS_ENV)
    if value.strip() == "":
        return Finding("env.cuda-visible-devices.empty", Status.FAIL,
                       "CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU",
                       detail="An empty value hides every GPU (torch.cuda.is_available() is False, "
                              "'no CUDA-capable device is detected').", fix=fix_unset, evidence=ev)
    migs = _mig_uuids(ctx)
    good: list = []
    seen: list = []  # the physical GPUs named so far
    bad = twice = ""
    for tok in tokens:
        if dv.gpus_unknown and tok.startswith(("GPU-", "MIG-")):
            good.append(tok)  # nvidia-smi and NVML cannot list the GPUs here: no UUIDs to compare with
            continue
        if tok.startswith("MIG-"):
            if not any(m.lower().startswith(tok.lower()) for m in migs):
                bad = tok
                break
            good.append(tok)
            continue
        if (re.match(r"\d", tok) or tok.startswith("-")) and not count:
            good.append(tok)  # no GPU list to compare with
            continue
        got = visible_ordinals(tok, count, uuids) if count else None
        if not got:
            bad = tok
            break
        if got[0] in seen:  # (session 35, H200) "0,0": CUDA then shows no GPU at all
            twice = tok
            break
        seen.append(got[0])
        good.append(tok)
    if twice:
        return Finding("env.cuda-visible-devices.none", Status.FAIL,
                       f"CUDA_VISIBLE_DEVICES={value} names a GPU twice ('{twice}'): CUDA then shows no GPU",
                       detail="A GPU listed twice (by index or UUID) makes CUDA see none at all (seen on an H200: "
                              "'0,0' gave torch.cuda.device_count() 0), not the list up to the repeat.",
                       fix=fix_unset, evidence=ev)
    if not bad:
        return Finding("env.cuda-visible-devices", Status.OK,
                       f"CUDA_VISIBLE_DEVICES={value}: {len(good)} of {count or '?'} GPUs visible", evidence=ev)
    what = ("-1 hides every GPU" if bad.startswith("-") else
            f"'{bad}' is a MIG instance UUID that does not exist" if bad.upper().startswith("MIG-") else
            f"'{bad}' is not a GPU of this machine ({count} GPU{'s' if count != 1 else ''})")
    if not good:
        return Finding("env.cuda-visible-devices.none", Status.FAIL,
                       f"CUDA_VISIBLE_DEVICES={value} leaves no GPU visible: {what}",
                       detail="The CUDA runtime reads the list left to right and stops at the first entry that is "
                              "not a device; nothing before it means no GPU at all.",
                       fix=fix_unset, evidence=ev)
    return Finding("env.cuda-visible-devices.truncated", Status.WARN,
                   f"CUDA_VISIBLE_DEVICES={value}: only {', '.join(good)} visible; {what}",
                   detail="Entries after the first invalid one are ignored.", fix=fix_unset, evidence=ev)


def stub_named_by_libraries(ctx: Context, fix_cmd: str) -> bool:
    """The libraries step (earlier) failed on a stub libcuda with this same fix (dropping these stubs folders)."""
    return any(f.id == "libs.stub-libcuda" and f.fix is not None and fix_cmd in f.fix.commands
               for f in earlier_findings(ctx, "libraries"))


@step("environment", "environment variables", order=70,
      facts=("env", "torch", "nvidia_smi", "nvml", "kernel_module", "device_nodes", "toolkit", "platform", "libs",
             "userspace_driver"))
def check_environment(ctx: Context) -> Outcome:
    """CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, TORCH_CUDA_ARCH_LIST, allocator and NCCL settings."""
    env = env_vars(ctx)
    findings: list = []
    dv = driver_view(ctx)

    if "CUDA_VISIBLE_DEVICES" in env:
        findings.append(visible_devices_finding(ctx, env["CUDA_VISIBLE_DEVICES"]))
    order = env.get("CUDA_DEVICE_ORDER")
    # (session 35, H200) an invalid CUDA_DEVICE_ORDER stops CUDA (it was called "ignored" here); CUDA_FORCE_PTX_JIT=1
    cuda_env = env_with_crs(ctx)  # the values as CUDA reads them
    findings.extend(cuda_driver_findings(ctx, cuda_env))
    if not device_order_invalid(cuda_env) and len({g.name for g in dv.gpus}) > 1 and order != "PCI_BUS_ID":
        findings.append(Finding("env.cuda-device-order", Status.WARN,
                                "GPUs of different models: CUDA's ordinals may differ from nvidia-smi's",
                                detail="CUDA numbers the fastest GPU first; nvidia-smi numbers by PCI bus.",
                                fix=Fix("Make CUDA number GPUs as nvidia-smi does.",
                                        ("export CUDA_DEVICE_ORDER=PCI_BUS_ID",), DOCS_ENV),
                                evidence={"GPUs": [g.name for g in dv.gpus]}))

    # toolkit variables
    homes = {k: env[k] for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT") if env.get(k)}
    tk = ctx.fact("toolkit")
    if tk.value is not None and tk.value.home and tk.value.home_exists is False:
        findings.append(Finding("env.cuda-home-missing", Status.WARN,
                                f"{tk.value.home_var}={tk.value.home} does not exist",
                                fix=Fix("Point it at an installed toolkit, or unset it.",
                                        tuple(f"export {tk.value.home_var}={q(i.root)}"
                                              for i in tk.value.installs[:1]) or (f"unset {tk.value.home_var}",)),
                                evidence={tk.value.home_var: tk.value.home}))
    if len({os.path.normpath(v) for v in homes.values()}) > 1:
        findings.append(Finding("env.cuda-home-conflict", Status.WARN,
                                "CUDA_HOME, CUDA_PATH and CUDA_ROOT name different toolkits: "
                                + ", ".join(f"{k}={v}" for k, v in homes.items()),
                                detail="torch uses CUDA_HOME, CMake and other builds CUDA_PATH: builds disagree.",
                                fix=Fix("Point them all at one toolkit.",
                                        tuple(f"export {k}={q(next(iter(homes.values())))}" for k in homes)),
                                evidence=homes))
    if tk.value is not None and tk.value.path_nvcc and tk.value.home_nvcc:
        real = {i.nvcc: i for i in tk.value.installs}
        a, b = real.get(tk.value.path_nvcc), None
        for i in tk.value.installs:
            if tk.value.home_nvcc in (i.nvcc,) or tk.value.home_var in i.found_via:
                b = i
        if a and b and a.realpath != b.realpath and a.version != b.version:
            findings.append(Finding("env.path-nvcc", Status.WARN,
                                    f"PATH runs nvcc {a.version} ({a.nvcc}) but {tk.value.home_var} has "
                                    f"nvcc {b.version}", fix=Fix("Put the CUDA_HOME toolkit first on PATH.",
                                                                 (f"export PATH={q(os.path.dirname(b.nvcc))}:$PATH",)),
                                    evidence={"PATH nvcc": a.nvcc, tk.value.home_var: b.nvcc}))

    # library search paths
    ldp = ld_entries(env)
    if ldp:
        libs = ctx.fact("libs")
        # the CUDA base images set /usr/local/nvidia/lib{,64} for the container runtime: not a trap
        system_missing = [e for e in ldp if libs.value is not None and e in libs.value.ld_library_path_missing
                          and e.rstrip("/") not in CONTAINER_DEFAULT_DIRS]
        stubs = [e for e in ldp if is_stubs_dir(e)]
        torch_cuda = major_minor((ctx.fact("torch").value.cuda if ctx.fact("torch").value else None) or "")
        other_tk = []
        for e in ldp:
            m = re.search(r"/cuda-(\d+)\.(\d+)(?:/|$)", e)
            if m and torch_cuda and int(m.group(1)) != torch_cuda[0]:
                other_tk.append(e)
        if stubs and not stub_named_by_libraries(ctx, ld_without(ldp, set(stubs))):  # one fault, one problem
            findings.append(Finding("env.ld-library-path.stubs", Status.FAIL,
                                    f"LD_LIBRARY_PATH holds the toolkit's stubs folder: {', '.join(stubs)}",
                                    detail="The stub libcuda.so found there replaces the driver's at run time "
                                           "(CUDA error 34). Stubs belong in LIBRARY_PATH, for linking only.",
                                    fix=Fix("Remove it from LD_LIBRARY_PATH.",
                                            (ld_without(ldp, set(stubs)),), DOCS_ENV),
                                    evidence={"LD_LIBRARY_PATH": ":".join(ldp)}))
        if other_tk:
            findings.append(Finding("env.ld-library-path.other-toolkit", Status.WARN,
                                    f"LD_LIBRARY_PATH names another CUDA major's libraries: {', '.join(other_tk)} "
                                    f"(torch uses CUDA {torch_cuda[0]}.{torch_cuda[1]})",
                                    detail="Those folders are searched before torch's own libraries.",
                                    fix=Fix("Remove them when running torch.", (ld_without(ldp, set(other_tk)),)),
                                    evidence={"LD_LIBRARY_PATH": ":".join(ldp)}))
        if system_missing:
            findings.append(Finding("env.ld-library-path.missing-dirs", Status.WARN,
                                    f"LD_LIBRARY_PATH names folders that do not exist: {', '.join(system_missing)}",
                                    detail="Harmless to the loader, but usually left over from an uninstalled "
                                           "toolkit or a mistyped path.",
                                    fix=Fix("Remove them.", (ld_without(ldp, set(system_missing)),)),
                                    evidence={"LD_LIBRARY_PATH": ":".join(ldp)}))
    libp = [e for e in env.get("LIBRARY_PATH", "").split(":") if e]
    if libp:
        findings.append(Finding("env.library-path", Status.OK,
                                f"LIBRARY_PATH={':'.join(libp)} (link time only; stubs are fine here)",
                                evidence={"LIBRARY_PATH": ":".join(libp)}))

    # TORCH_CUDA_ARCH_LIST vs this machine's GPUs
    tal = env.get("TORCH_CUDA_ARCH_LIST")
    if tal is not None:
        findings.append(arch_list_finding(tal, [g for g in dv.gpus if g.cc]))

    if env.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"):
        findings.append(Finding("env.cuda-launch-blocking", Status.WARN,
                                "CUDA_LAUNCH_BLOCKING=1: every kernel launch waits for the GPU (much slower)",
                                detail="Meant for locating the kernel behind an asynchronous CUDA error; "
                                       "leave it off for training and benchmarks.",
                                fix=Fix("Unset it when not debugging.", ("unset CUDA_LAUNCH_BLOCKING",), DOCS_ENV),
                                evidence={"CUDA_LAUNCH_BLOCKING": env["CUDA_LAUNCH_BLOCKING"]}))
    cml = env.get("CUDA_MODULE_LOADING")
    if cml is not None:
        st = Status.OK if cml in ("LAZY", "EAGER") else Status.WARN
        findings.append(Finding("env.cuda-module-loading", st,
                                f"CUDA_MODULE_LOADING={cml}" + ("" if st is Status.OK else " is not LAZY or EAGER")
                                + (" (EAGER loads every kernel at start: slower start, more memory)"
                                   if cml == "EAGER" else ""),
                                fix=None if st is Status.OK else Fix("Use LAZY (the default).",
                                                                     ("unset CUDA_MODULE_LOADING",), DOCS_ENV),
                                evidence={"CUDA_MODULE_LOADING": cml}))
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if env.get(name):
            probs = check_alloc_conf(env[name])
            if probs:
                findings.append(Finding("env.alloc-conf", Status.FAIL,
                                        f"{name} has errors: {'; '.join(probs)}",
                                        detail="torch raises an error at its first CUDA call when it cannot "
                                               "parse this variable (a ValueError from torch.cuda.init() on "
                                               "torch 2.11).",
                                        fix=Fix("Use comma-separated key:value pairs, e.g. expandable_segments:True.",
                                                (f"export {name}=expandable_segments:True", f"unset {name}"),
                                                DOCS_ALLOC),
                                        evidence={name: env[name]}))
            else:
                findings.append(Finding("env.alloc-conf", Status.OK, f"{name}={env[name]}",
                                        evidence={name: env[name]}))

    # container runtime variables: read by the runtime when a container starts (env_container.py)
    findings.extend(container_runtime_findings(ctx, env))

    # JIT cache
    if env.get("CUDA_CACHE_DISABLE", "0") not in ("", "0"):
        findings.append(Finding("env.cuda-cache", Status.WARN,
                                "CUDA_CACHE_DISABLE=1: PTX is JIT-compiled again on every run (slow start)",
                                fix=Fix("Unset it.", ("unset CUDA_CACHE_DISABLE",), DOCS_ENV),
                                evidence={"CUDA_CACHE_DISABLE": env["CUDA_CACHE_DISABLE"]}))
    cmax = env.get("CUDA_CACHE_MAXSIZE")
    if cmax is not None and (not cmax.isdigit() or int(cmax) < 64 * 1024 * 1024):
        findings.append(Finding("env.cuda-cache", Status.WARN,
                                f"CUDA_CACHE_MAXSIZE={cmax} is small or invalid: JIT results get evicted",
                                fix=Fix("Allow a bigger cache (bytes).", ("export CUDA_CACHE_MAXSIZE=4294967296",),
                                        DOCS_ENV),
                                evidence={"CUDA_CACHE_MAXSIZE": cmax}))

    # NCCL transports turned off
    off = {k: v for k, v in env.items() if k in NCCL_TRANSPORT_OFF and k.endswith("_DISABLE") and v not in ("0", "")}
    if env.get("NCCL_P2P_LEVEL", "").upper() in ("LOC", "0"):
        off["NCCL_P2P_LEVEL"] = env["NCCL_P2P_LEVEL"]
    if env.get("NCCL_NET", "").lower() == "socket" and "NCCL_IB_DISABLE" not in off:
        off["NCCL_NET"] = env["NCCL_NET"]
    if off:
        findings.append(Finding("env.nccl-transports-off", Status.WARN,
                                "NCCL transports disabled: " + ", ".join(
                                    f"{k}={v} ({NCCL_TRANSPORT_OFF.get(k, 'network' if k == 'NCCL_NET' else 'P2P')})"
                                    for k, v in off.items()),
                                detail="Multi-GPU collectives fall back to slower paths (often several times "
                                       "slower); usually left over from a work-around.",
                                fix=Fix("Unset them unless they work around a known problem here.",
                                        tuple(f"unset {k}" for k in off), DOCS_NCCL),
                                evidence=off))

    if not findings or all(f.status is Status.OK for f in findings):
        n = len([k for k in env if doc_for(k)])
        findings.append(Finding("env.ok", Status.OK, f"{n} CUDA-relevant variables set; no trap found",
                                evidence={k: env[k] for k in sorted(env) if doc_for(k) and k != "PATH"}))
    bad = [f for f in findings if f.status in (Status.FAIL, Status.WARN)]
    return Outcome(bad[0].summary if bad else findings[-1].summary, findings)


def arch_list_finding(value: str, gpus: list) -> Finding:
    entries = parse_arch_list(value)
    ev = {"TORCH_CUDA_ARCH_LIST": value, "GPUs": {g.name: f"{g.cc[0]}.{g.cc[1]}" for g in gpus}}
    unknown = [e[0] for e in entries if isinstance(e[0], str) and e[0].lower() not in (
        "kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "all")]
    if unknown:
        return Finding("env.torch-cuda-arch-list.syntax", Status.WARN,
                       f"TORCH_CUDA_ARCH_LIST has entries torch does not understand: {', '.join(unknown)}",
                       fix=Fix("Use compute capabilities such as 9.0 or 8.6+PTX, separated by ';' or spaces.",
                               (f"export TORCH_CUDA_ARCH_LIST='{_suggest(gpus)}'",)), evidence=ev)
    if not gpus:
        return Finding("env.torch-cuda-arch-list", Status.OK, f"TORCH_CUDA_ARCH_LIST={value}", evidence=ev)
    missing = []
    for g in gpus:
        ok = False
        for cc, var, ptx in entries:
            if not isinstance(cc, tuple):
                ok = True  # an architecture name: torch expands it
                continue
            arch = Arch(cc[0], cc[1], var, "sm")
            if sass_runs_on(arch, g.cc) or (ptx and ptx_jits_on(Arch(cc[0], cc[1], var, "compute"), g.cc)):
                ok = True
        if not ok:
            missing.append(g)
    if missing:
        g = missing[0]
        return Finding("env.torch-cuda-arch-list.mismatch", Status.WARN,
                       f"TORCH_CUDA_ARCH_LIST={value} builds no code that runs on {g.name} "
                       f"(cc {g.cc[0]}.{g.cc[1]})",
                       detail="Extensions built with it (load_inline, pip install of CUDA extensions) fail on this "
                              "GPU with 'no kernel image is available for execution on the device'.",
                       fix=Fix("Include this GPU's compute capability.",
                               (f"export TORCH_CUDA_ARCH_LIST='{_suggest(gpus)}'",),
                               "https://pytorch.org/docs/stable/cpp_extension.html"),
                       evidence=ev, affects="CUDA extensions built here")
    return Finding("env.torch-cuda-arch-list", Status.OK,
                   f"TORCH_CUDA_ARCH_LIST={value} covers " + ", ".join(sorted({g.name for g in gpus})), evidence=ev)


def _suggest(gpus: list) -> str:
    ccs = sorted({g.cc for g in gpus if g.cc})
    return ";".join(f"{a}.{b}" for a, b in ccs) or "8.0;9.0"


