"""Make a match concrete: the user's GPU, driver, torch, toolkits and environment.

Two sources: what the pasted text itself says (captures such as sm_120 or 'found version 11040';
used even with --offline) and live facts gathered through cudadoctor.facts (only the facts the
matched signatures list, so torch is imported in a child only when a torch signature matched).
Every helper is total: missing facts give fewer lines, never an exception.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

from cudadoctor import compat
from cudadoctor.explain import versions

MAX_MATCHES = 3  # personalise at most this many matches (the facts of the others are not gathered)
TORCH_FACTS = {"torch"}


@dataclass
class Personal:
    notes: list = field(default_factory=list)  # "on this machine" lines
    commands: list = field(default_factory=list)  # concrete commands, best first


def facts_needed(matches: list, limit: int = MAX_MATCHES) -> list:
    names: list = []
    for m in [m for m in matches if m.strong][:limit]:
        for n in m.signature.facts:
            if n not in names:
                names.append(n)
    return names


def gather(names: list, system=None, opts=None) -> dict:
    """Gather just `names` (and what they need) on this machine."""
    if not names:
        return {}
    from cudadoctor.facts import registry
    from cudadoctor.system.host import HostSystem

    opts = opts or registry.Options(gpu_ops=False, timeout_torch=60.0)
    return registry.gather(system or HostSystem(), names, opts)


def load_matrix():
    try:
        from cudadoctor import matrix

        return matrix.load()
    except Exception:  # noqa: BLE001 - the matrix is optional here
        return None


# ---------------------------------------------------------------- fact readers


def scan_culprits(facts: dict, cc: tuple) -> list:
    """(package, path) of the binaries in the target's site-packages that cannot run on `cc`, from the
    probe_scan fact (NVIDIA's own libraries are not judged by their fatbin there)."""
    info = _val(facts, "probe_scan")
    if info is None or not getattr(info, "files", None):
        return []
    try:
        from cudadoctor.probes.scan import CANNOT_RUN, judge

        return [(j.file.package, j.file.path) for j in judge(info, cc) if j.verdict in CANNOT_RUN]
    except Exception:  # noqa: BLE001 - personalisation is best effort
        return []


def _val(facts: dict, name: str):
    f = facts.get(name)
    return f.value if f is not None and getattr(f, "ok", False) else None


@dataclass
class Gpu:
    name: str
    cc: Optional[tuple]

    @property
    def cc_text(self) -> str:
        return compat.cc_str(self.cc) if self.cc else "?"


def gpus(facts: dict) -> list:
    for src in ("nvml", "nvidia_smi"):
        v = _val(facts, src)
        if v is not None and getattr(v, "gpus", None):
            return [Gpu(g.name, compat.parse_cc(g.compute_capability or "")) for g in v.gpus]
    t = _val(facts, "torch")
    if t is not None and t.devices:
        return [Gpu(d.name, compat.parse_cc(d.capability or "")) for d in t.devices]
    return []


def driver(facts: dict) -> tuple:
    """(driver version, the driver's max CUDA) or ('', '')."""
    n = _val(facts, "nvml")
    if n is not None and n.driver_version:
        return n.driver_version, n.cuda_driver_version or ""
    s = _val(facts, "nvidia_smi")
    if s is not None and s.driver_version:
        return s.driver_version, s.cuda_version or ""
    return "", ""


def torch_info(facts: dict):
    t = _val(facts, "torch")
    return t if t is not None and t.installed else None


def env_vars(facts: dict) -> dict:
    e = _val(facts, "env")
    return dict(e.vars) if e is not None else {}


def arch_name(m, cc) -> str:
    try:
        return m.arch_name(cc) if (m is not None and cc) else ""
    except Exception:  # noqa: BLE001
        return ""


def gpu_line(g: Gpu, m) -> str:
    a = arch_name(m, g.cc)
    return f"GPU: {g.name}, cc {g.cc_text}" + (f" ({a})" if a else "")


def torch_line(t) -> str:
    cuda = f"CUDA {t.cuda}" if t.cuda else ("ROCm " + t.hip if t.hip else "CPU-only build")
    arch = " ".join(t.arch_list) if t.arch_list else "no CUDA archs"
    return f"torch {t.version} ({cuda}) in {t.python}: archs {arch}"


def cuda_of_found(found: str) -> str:
    """torch's 'found version 11040' -> '11.4'."""
    try:
        n = int(found)
    except ValueError:
        return ""
    return f"{n // 1000}.{(n % 1000) // 10}"


def torch_verdict(t, cc) -> str:
    """NATIVE / PTX_JIT / NO_IMAGE for torch's arch list on cc; '' when unknown."""
    if t is None or not t.arch_list or not cc:
        return ""
    sass = [a for a in t.arch_list if a.startswith("sm_")]
    ptx = [a for a in t.arch_list if a.startswith("compute_")]
    return compat.select_image(sass, ptx, cc).verdict


def _torch_fix(m, ccs, drv, drv_cuda, current, python) -> tuple:
    try:
        from cudadoctor.matrix import advice

        text, cmds = advice.torch_fix_commands(m, ccs, drv or None, drv_cuda or None, current or "")
    except Exception:  # noqa: BLE001 - older matrix without advice: a generic answer
        return "", []
    py = python or "python"
    return text, [c.replace("pip install", f"{py} -m pip install", 1) if c.startswith("pip ") else c for c in cmds]


_FRAME = re.compile(r"""(?:File\s+"(?P<py>[^"]+)"|(?P<so>[\w./\\:+-]+\.(?:so|pyd|dll)(?:\.[\d.]+)?))""")
_SKIP_FRAMES = ("/torch/", "\\torch\\", "site-packages/torch", "<frozen", "/lib/python3", "\\lib\\python3")


def culprit_binary(before: str, line: str) -> tuple:
    """(package, path) of the last non-torch frame/library named before the error, or ('', '')."""
    best = ("", "")
    for mt in _FRAME.finditer((before or "")[-6000:] + "\n" + (line or "")):
        path = mt.group("py") or mt.group("so")
        low = path.replace("\\", "/").lower()
        if any(s in low for s in ("/torch/", "site-packages/torch/")) and "torch_" not in low:
            continue
        pkg = ""
        mm = re.search(r"(?:site|dist)-packages/([A-Za-z0-9_.-]+)", path.replace("\\", "/"))
        if mm:
            pkg = mm.group(1).split("/")[0]
            pkg = re.sub(r"\.cpython.*|\.abi3.*|\.so.*|\.py$", "", pkg)
        if pkg or mt.group("so"):
            best = (pkg, path)
    return best


# ---------------------------------------------------------------- per signature


def personalise(match, facts: dict, m=None) -> Personal:
    out = Personal()
    try:
        _from_text(match, out, m)
        fn = _BY_ID.get(match.id, _generic)
        fn(match, facts, m, out)
    except Exception as e:  # noqa: BLE001 - personalisation must never break explain
        out.notes.append(f"(could not personalise: {type(e).__name__}: {e})")
    return out


def _from_text(match, out: Personal, m) -> None:
    # a library name read up to a sentence's full stop ("... libcudnn_cnn_infer.so.8.") is named without it
    c = {k: (v.rstrip(".") if isinstance(v, str) and "lib" in k else v) for k, v in match.captures.items()}
    if "sm" in c:
        cc = compat.parse_cc(c["sm"])
        a = arch_name(m, cc)
        out.notes.append(f"the message names {c['sm']} = cc {compat.cc_str(cc)}" + (f" ({a})" if a else "")
                         if cc else f"the message names {c['sm']}")
    if "cc" in c and "sm" not in c:
        out.notes.append(f"the message names compute capability {c['cc']}")
    if "arch_list" in c:
        out.notes.append(f"the torch in the message has: {c['arch_list'].strip()}")
    if "found" in c and cuda_of_found(c["found"]):
        out.notes.append(f"'found version {c['found']}' = the driver supports up to CUDA {cuda_of_found(c['found'])}")
    if "nvcc" in c:
        out.notes.append(f"the toolkit found by the build is CUDA {c['nvcc']}")
    if "lib" in c:
        out.notes.append(f"library named: {c['lib']}")
    if "torch_lib" in c:  # torch's own, which `import torch` loads (missing-shared-library's import-order hint)
        out.notes.append(f"{c['torch_lib']} is torch's own library, which `import torch` loads: import torch before "
                         f"the extension (python -c 'import torch; import <extension>'); if it then fails with an "
                         f"undefined symbol, the extension was built for another torch")
    short = versions.reading(c, "short_lib")
    if short:
        out.notes.append(f"{short} is empty or cut short: check it with ls -l {short}, then reinstall the package "
                         f"that owns it (dpkg -S {short} or rpm -qf {short}) or rebuild it")
    if "jetson_lib" in c:  # container-toolkit's empty-placeholder patterns: the runtime mounts the host's libraries
        lib = c["jetson_lib"]
        jetson = "aarch64" in lib or "tegra" in lib or not lib.rsplit("/", 1)[-1].startswith(("libcuda.", "libnvidia-"))
        how = ("--runtime nvidia (Jetson does not support --gpus)" if jetson else "--gpus all (or --runtime nvidia)")
        out.notes.append(f"{lib} is one of the libraries the nvidia runtime mounts from the host: start the container "
                         f"with {how}, and for docker build set \"default-runtime\": \"nvidia\" in "
                         f"/etc/docker/daemon.json, then restart docker")
    if "symbol" in c:
        sym = c["symbol"]
        from cudadoctor.probes.torch_names import is_torch_name

        kind = ("a torch C++ symbol: the extension was built for another torch" if is_torch_name(sym)
                else "an nvJitLink symbol: an older libnvJitLink is loaded" if "nvjitlink" in sym.lower() else "")
        out.notes.append(f"missing symbol {sym}" + (f" ({kind})" if kind else ""))
    if "status" in c:
        out.notes.append(f"status: {c['status'].upper()}")
    if "xid" in c:
        from cudadoctor.explain import xid

        out.notes.extend(xid.notes(match) or [f"Xid {c['xid']} in the log"])
    if "compiled" in c and "runtime" in c:
        out.notes.append(f"torch expects cuDNN {c['compiled']}, found {c['runtime']}")
    if "request" in c:
        out.notes.append(f"the failed allocation asked for {c['request']}")
    needs, has = versions.reading(c, "needs_cuda"), versions.reading(c, "has_cuda")  # as driver-too-old's gate
    if needs and has:
        out.notes.append(f"the report shows code built for CUDA {versions.pretty(needs)} and a driver that runs CUDA "
                         f"up to {versions.pretty(has)}")
    gpu, wheel = versions.reading(c, "gpu"), versions.reading(c, "torch_ver")  # torch-arch-unsupported's gate
    toolkit = versions.reading(c, "toolkit")  # no-kernel-image's gate
    if gpu and toolkit and match.gated == "toolkit_lacks_gpu":  # the gate held: the GPU's name means a known cc
        cc = min(versions.gpu_ccs(gpu))
        first = versions.first_toolkit_for(cc)
        first = f" (the first CUDA that can: {first})" if first else ""
        out.notes.append(f"the report names CUDA {versions.pretty(toolkit)} and {gpu} (compute capability "
                         f"{compat.cc_str(cc)}): by the "
                         f"version matrix that toolkit builds no code this GPU runs{first}: a binary built with it "
                         f"has no kernel for this GPU unless it carries PTX")
    if gpu and wheel and match.gated == "wheel_lacks_arch":  # the gate held: every GPU and wheel the report names agree
        cc = versions.gpu_cc_text(gpu)
        what = f"a GPU of compute capability {cc}" if cc else gpu
        if wheel[:1].isdigit():
            out.notes.append(f"the report names torch {wheel} and {what}: by the version matrix that torch has no "
                             f"kernel for this GPU")
        else:  # a torch program, no release named (the gate's fallback reading): most wheels lack the GPU
            lacking, total = versions.wheels_lacking(gpu)
            share = ("no torch wheel in the version matrix has a kernel for this GPU" if lacking == total else
                     f"{lacking} of the {total} torch wheels in the version matrix have no kernel for this GPU; "
                     f"torch.cuda.get_arch_list() says whether yours has one")
            out.notes.append(f"the report runs torch on {what} and names no release: {share}")
    torch_cuda, nvcc = versions.reading(c, "torch_cuda"), versions.reading(c, "nvcc_release")  # nvcc-torch-mismatch's gate
    if torch_cuda and nvcc and versions.differs(torch_cuda, nvcc):
        out.notes.append(f"the report shows torch built for CUDA {versions.pretty(torch_cuda)} and nvcc "
                         f"{versions.pretty(nvcc)}")


def _generic(match, facts, m, out: Personal) -> None:
    for g in gpus(facts):
        out.notes.append(gpu_line(g, m))
    d, dc = driver(facts)
    if d:
        out.notes.append(f"driver {d}" + (f" (supports up to CUDA {dc})" if dc else ""))


def _arch(match, facts, m, out: Personal) -> None:
    t = torch_info(facts)
    gs = gpus(facts)
    d, dc = driver(facts)
    for g in gs:
        out.notes.append(gpu_line(g, m))
    if t is not None:
        out.notes.append(torch_line(t))
    lacking = []
    ccs = [g.cc for g in gs if g.cc]
    if not ccs:
        cc = compat.parse_cc(match.captures.get("sm") or match.captures.get("cc") or "")
        ccs = [cc] if cc else []
    named_gpu = versions.reading(match.captures, "gpu")  # the GPU the report names (the torch-wheel gate's reading)
    if not ccs and named_gpu:
        ccs = sorted(versions.gpu_ccs(named_gpu))
    text_archs = (match.captures.get("arch_list") or "").split()
    for cc in ccs:
        v = torch_verdict(t, cc)
        who = "this torch"
        if not v:
            who = "the torch in the message"
        if not v and text_archs:
            v = compat.select_image([a for a in text_archs if a.startswith("sm_")],
                                    [a for a in text_archs if a.startswith("compute_")], cc).verdict
        if not v and match.id == "torch-arch-unsupported":
            v = compat.NO_IMAGE  # torch itself said so
        if v == compat.NO_IMAGE:
            lacking.append(cc)
            out.notes.append(f"{who} has no kernels for cc {compat.cc_str(cc)}: that is the cause")
        elif v == compat.PTX_JIT:
            out.notes.append(f"{who} runs on cc {compat.cc_str(cc)} only through PTX JIT (slow first start)")
        elif v == compat.NATIVE:
            out.notes.append(f"{who} has native kernels for cc {compat.cc_str(cc)}")
    if match.id == "no-kernel-image" and ccs and t is not None and not lacking:
        pkg, path = culprit_binary(match.before, match.evidence[0].text if match.evidence else "")
        found = scan_culprits(facts, ccs[0])
        if not path and found:  # the traceback named none: the scan of site-packages does
            pkg, path = found[0]
        where = f"{pkg} ({path})" if pkg else (path or "a compiled extension")
        out.notes.append(f"torch itself supports this GPU, so the kernel is missing from {where}")
        for fpkg, fpath in found[:5]:
            out.notes.append(f"scan of site-packages: {fpath} ({fpkg}) has no kernel image for cc "
                             f"{compat.cc_str(ccs[0])}")
        archs = ";".join(compat.cc_str(c) for c in sorted(set(ccs)))
        py = t.python or "python"
        if path:
            out.commands.append(f"cuobjdump --list-elf --list-ptx {path}")
        out.commands.append(f"TORCH_CUDA_ARCH_LIST=\"{archs}\" {py} -m pip install --no-build-isolation "
                            f"--no-cache-dir --force-reinstall {pkg or '<the extension>'}")
        return
    if lacking:
        cuda_torch = t is not None and bool(t.cuda)
        text, cmds = _torch_fix(m, lacking, d, dc, t.version if cuda_torch else "", t.python if t else "")
        if text:
            out.notes.append(text)
        out.commands.extend(cmds)


def _driver_old(match, facts, m, out: Personal) -> None:
    _generic(match, facts, m, out)
    t = torch_info(facts)
    d, dc = driver(facts)
    if t is not None:
        out.notes.append(torch_line(t))
    need = t.cuda if (t is not None and t.cuda) else ""
    if need and m is not None and hasattr(m, "min_driver"):
        md = m.min_driver(need) or {}
        floor = (md.get("minor_compat") or {}).get("linux") or (md.get("full") or {}).get("linux")
        if floor:
            out.notes.append(f"torch's CUDA {need} needs a Linux driver >= {floor}" + (f"; you have {d}" if d else ""))
            try:
                from cudadoctor.matrix import advice

                out.commands.extend(advice.driver_upgrade_commands(floor))
            except Exception:  # noqa: BLE001
                pass
    if d or dc:
        text, cmds = _torch_fix(m, [g.cc for g in gpus(facts) if g.cc], d, dc,
                                t.version if t else "", t.python if t else "")
        if text:
            out.notes.append("or keep the driver: " + text[0].lower() + text[1:])
        out.commands.extend(cmds)


def _cpu_only(match, facts, m, out: Personal) -> None:
    _generic(match, facts, m, out)
    t = torch_info(facts)
    if t is not None:
        out.notes.append(torch_line(t))
        if t.cuda:
            out.notes.append(f"the torch in {t.python} does have CUDA {t.cuda}: the failing program runs another "
                             "interpreter or environment")
            return
    d, dc = driver(facts)
    if d:
        text, cmds = _torch_fix(m, [g.cc for g in gpus(facts) if g.cc], d, dc,
                                t.version if t else "", t.python if t else "")
        if text:
            out.notes.append(text)
        out.commands.extend(c.replace(" -m pip install ", " -m pip install --force-reinstall ", 1) for c in cmds)
    elif facts and not gpus(facts):  # offline (no facts) says nothing about this machine
        out.notes.append("no NVIDIA driver or GPU answered on this machine: run on the CPU or use a GPU machine")


def _toolkit(match, facts, m, out: Personal) -> None:
    tk = _val(facts, "toolkit")
    t = torch_info(facts)
    envs = env_vars(facts)
    if t is not None:
        out.notes.append(torch_line(t))
    installs = list(tk.installs) if tk is not None else []
    for i in installs:
        out.notes.append(f"nvcc {i.version or '?'} at {i.nvcc}" + (f" (found via {', '.join(i.found_via)})" if i.found_via else ""))
    if tk is not None and not installs:
        out.notes.append("no nvcc found on this machine (PATH, CUDA_HOME, /usr/local/cuda*)")
    home = envs.get("CUDA_HOME") or envs.get("CUDA_PATH")
    out.notes.append(f"CUDA_HOME={home}" if home else "CUDA_HOME is not set")
    want = t.cuda if (t is not None and t.cuda) else ""
    if match.id == "nvcc-unsupported-arch":
        for g in gpus(facts):
            out.notes.append(gpu_line(g, m))
            if m is not None and g.cc and hasattr(m, "newest_nvcc_for_cc"):
                try:
                    row = m.arch_for_cc(g.cc) or {}
                    if row.get("nvcc_first"):
                        out.notes.append(f"cc {g.cc_text} needs nvcc >= {row['nvcc_first']}")
                except Exception:  # noqa: BLE001
                    pass
    if want:
        major = want.split(".")[0]
        same = [i for i in installs if (i.version or "").split(".")[0] == major and i.root]
        if same:
            root = same[-1].root
            out.commands.append(f"export CUDA_HOME={root} PATH={root}/bin:$PATH")
        else:
            out.notes.append(f"no toolkit with torch's CUDA major ({want}) is installed")
            try:
                from cudadoctor.matrix import advice

                out.commands.extend(advice.toolkit_install_commands(want))
            except Exception:  # noqa: BLE001
                pass


def _visible(match, facts, m, out: Personal) -> None:
    envs = env_vars(facts)
    gs = gpus(facts)
    cvd = envs.get("CUDA_VISIBLE_DEVICES")
    out.notes.append(f"CUDA_VISIBLE_DEVICES={cvd!r} in this shell" if cvd is not None else "CUDA_VISIBLE_DEVICES is not set in this shell")
    if gs:
        out.notes.append(f"{len(gs)} GPU(s) on this machine: valid device indices are 0..{len(gs) - 1}")
    if cvd is not None:
        out.commands.append("unset CUDA_VISIBLE_DEVICES")
    order = envs.get("CUDA_DEVICE_ORDER")
    if order is not None and order not in ("FASTEST_FIRST", "PCI_BUS_ID"):  # CUDA does not start (101)
        out.notes.append(f"CUDA_DEVICE_ORDER={order!r} in this shell: not FASTEST_FIRST or PCI_BUS_ID, so CUDA does not start")
        out.commands.append("unset CUDA_DEVICE_ORDER")


def _driver_stack(match, facts, m, out: Personal) -> None:
    km = _val(facts, "kernel_module")
    ud = _val(facts, "userspace_driver")
    smi = _val(facts, "nvidia_smi")
    if km is not None and km.version:
        out.notes.append(f"loaded kernel module: {km.version} ({km.flavour or 'unknown flavour'})")
    if ud is not None:
        if ud.libnvidia_ml_version:
            out.notes.append(f"libnvidia-ml on disk: {ud.libnvidia_ml_version}")
        if ud.libcuda_version:
            out.notes.append(f"libcuda on disk: {ud.libcuda_version} ({ud.libcuda})")
        if km is not None and km.version and ud.libnvidia_ml_version and km.version != ud.libnvidia_ml_version:
            out.notes.append(f"they differ ({km.version} vs {ud.libnvidia_ml_version}): reboot to load the new module")
            out.commands.append("sudo reboot")
    if smi is not None and smi.message:
        out.notes.append(f"nvidia-smi says: {smi.message.strip().splitlines()[0]}")
    plat = _val(facts, "platform")
    if plat is not None and plat.container:
        out.notes.append(f"running inside a container ({plat.container}): the driver comes from the host")
    kmf = facts.get("kernel_module")  # (session 32) only where it was looked for: offline, nothing was
    if match.id == "no-driver-or-device" and kmf is not None and not gpus(facts):
        from cudadoctor.model import FactState  # (here, not at import: explain's start-up does without it)

        if kmf.state is FactState.NOT_FOUND:
            out.notes.append("no NVIDIA kernel module is loaded on this machine")


def _libraries(match, facts, m, out: Personal) -> None:
    envs = env_vars(facts)
    ld = envs.get("LD_LIBRARY_PATH", "")
    t = torch_info(facts)
    if t is not None:
        out.notes.append(torch_line(t))
        if t.cudnn_version:
            out.notes.append(f"torch loads cuDNN {t.cudnn_version}")
    if not ld:
        out.notes.append("LD_LIBRARY_PATH is not set in this shell")
        return
    parts = [p for p in ld.split(":") if p]
    out.notes.append(f"LD_LIBRARY_PATH has {len(parts)} entries: {ld}")
    bad = [p for p in parts if "stubs" in p or "/compat" in p
           or (match.id in ("undefined-symbol", "cudnn-version-mismatch") and re.search(r"cuda|cudnn", p, re.I))]
    if bad:
        out.notes.append("suspicious entries: " + ", ".join(bad))
        from cudadoctor.checks.common import ld_without

        out.commands.append(ld_without(parts, set(bad)))


_UNDEF_FILE = re.compile(r"(/[^\s:'\"]+\.so[\w.]*)\s*:\s*undefined symbol")


def _undefined_symbol(match, facts, m, out: Personal) -> None:
    """The library facts, then, when the extension the message names is on this machine, that file read against the
    torch this interpreter imports (probes/torch_links.py, as `check`'s torch.ext step does): what it lacks and the
    reinstall or rebuild its owner needs."""
    _libraries(match, facts, m, out)
    t = torch_info(facts)
    texts = [h.text for h in match.evidence] + [match.before or ""]
    path = next((mt.group(1) for x in texts for mt in _UNDEF_FILE.finditer(x or "")), "")
    if t is None or not t.file or not path:
        return
    from cudadoctor.system.host import HostSystem

    system = HostSystem()
    if not system.exists(path):
        out.notes.append(f"{path} is not on this machine (the message came from elsewhere)")
        return
    from cudadoctor.checks.torch_ext import relink_fix
    from cudadoctor.probes.owners import Owners
    from cudadoctor.probes.scan import linked_file, site_packages
    from cudadoctor.probes.torch_links import judge_links
    from cudadoctor.probes.where import Root

    py, sites, _ = site_packages(system, t.python or "python")
    d_root = next((s for s in sites if path.startswith(s.rstrip("/") + "/")), "")
    mt = re.match(r"(.*/(?:site|dist)-packages)/", path)
    if not d_root and mt:  # another environment's site folder: its installers' records still name the owner
        d_root = mt.group(1)
        sites = sites + [d_root]
        other = next((c for c in (re.sub(r"/lib/python[\d.]+/(?:site|dist)-packages$", "/bin/python", d_root),)
                      if c != d_root and system.is_executable(c)), "")
        if other:  # its own interpreter installs into it; its torch may differ from this one's
            out.notes.append(f"{path} belongs to the environment of {other}, not to {py}: read here against torch "
                             f"{t.version}; `cudadoctor check --python {other}` reads it against that environment's "
                             f"own torch")
            py = other
    root = Root(d_root, "site-packages" if d_root else "", via="site" if d_root else "")
    lf = linked_file(system, path, root, Owners(system, sites) if sites else None)
    if lf is None:  # not a torch extension (a CUDA library's own symbol): the library notes above are the reading
        return
    links = judge_links(system, [lf], t.file, sites, t.version, t.cuda, py, torch_hip=t.hip,
                        python_version=t.python_version)
    if links.error or not links.files:
        return
    e = links.files[0]
    who = f"{e.dist} {e.version}".strip() or os.path.basename(path)
    if e.missing_libs:
        out.notes.append(f"on this machine {who} needs {', '.join(e.missing_libs)}, which torch {t.version} does not ship")
    elif e.missing_count:
        built = f", the build for torch {e.built_for}" if e.built_for else ""
        out.notes.append(f"on this machine {who}{built} calls {e.missing_count} torch function(s) torch {t.version} "
                         f"does not export (read from its symbol table, as the loader resolves it)")
    else:
        out.notes.append(f"on this machine {path} finds every torch function it calls in torch {t.version}: the "
                         f"message came from another torch or environment")
        return
    fix = relink_fix(e, py, t.version)
    out.commands.extend(c for c in fix.commands if c not in out.commands)


def _wsl(match, facts, m, out: Personal) -> None:
    plat = _val(facts, "platform")
    if plat is not None:
        out.notes.append("this machine is WSL" + (f"{plat.wsl_version}" if plat.wsl_version else "")
                         if plat.is_wsl else "this machine is not WSL (the text came from elsewhere)")
    ld = env_vars(facts).get("LD_LIBRARY_PATH", "")
    if plat is not None and plat.is_wsl and "/usr/lib/wsl/lib" not in ld:
        out.notes.append("/usr/lib/wsl/lib is not on LD_LIBRARY_PATH")
        out.commands.append("export LD_LIBRARY_PATH=/usr/lib/wsl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    _generic(match, facts, m, out)


def _fabric(match, facts, m, out: Personal) -> None:
    _generic(match, facts, m, out)
    n = _val(facts, "nvml")
    if n is not None and n.fabric_manager:
        out.notes.append(f"NVML fabric state: {n.fabric_manager}")
    d, _ = driver(facts)
    if d:
        branch = d.split(".")[0]
        out.commands.append(f"sudo apt install nvidia-fabricmanager-{branch}   # must be exactly {d}")
        out.commands.append("sudo systemctl enable --now nvidia-fabricmanager")


def _oom(match, facts, m, out: Personal) -> None:
    n = _val(facts, "nvml")
    if n is not None and n.gpus:
        for g in n.gpus:
            used = f"{g.memory_used_mib} MiB used of {g.memory_total_mib} MiB" if g.memory_total_mib else ""
            procs = f", {len(g.processes)} process(es) on it" if g.processes else ""
            out.notes.append(f"GPU {g.index} {g.name}: {used}{procs}")
    else:
        _generic(match, facts, m, out)


_BY_ID = {
    "torch-arch-unsupported": _arch,
    "no-kernel-image": _arch,
    "driver-too-old": _driver_old,
    "torch-cpu-only": _cpu_only,
    "nvcc-torch-mismatch": _toolkit,
    "cuda-home-missing": _toolkit,
    "nvcc-unsupported-arch": _toolkit,
    "host-compiler-unsupported": _toolkit,
    "visible-devices": _visible,
    "nvml-driver-mismatch": _driver_stack,
    "system-driver-mismatch": _driver_stack,
    "no-driver-or-device": _driver_stack,
    "driver-install": _driver_stack,
    "nvml-unknown-error": _driver_stack,
    "missing-shared-library": _libraries,
    "undefined-symbol": _undefined_symbol,
    "cudnn-version-mismatch": _libraries,
    "cuda-stub-library": _libraries,
    "forward-compat": _libraries,
    "wsl": _wsl,
    "fabric-manager": _fabric,
    "out-of-memory": _oom,
}
