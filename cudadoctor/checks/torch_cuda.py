"""Step 2, `torch.cuda`: does the target interpreter's torch see CUDA, and if not, why."""

from __future__ import annotations

import re

from cudadoctor.checks.common import (
    cu_tag,
    driver_view,
    major_minor,
    q,
    runtime_fix,
    torch_base_version,
    visible_ordinals,
)
from cudadoctor.checks.env_pointer import with_working_env
from cudadoctor.checks.libraries import WHEELS, wheel_for
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.checks.torch_init_causes import init_cause
from cudadoctor.facts.health_types import DeviceNodes
from cudadoctor.facts.libs import family_of
from cudadoctor.model import FactState, Finding, Fix, Status

INDEX = "https://download.pytorch.org/whl/"
GET_STARTED = "https://pytorch.org/get-started/locally/"
RE_FOUND_VERSION = re.compile(r"too old \(found version (\d+)\)")


def pip_torch(python: str, version: str, tag: str) -> str:
    pin = f"torch=={version}" if version else "torch"
    return f"{q(python)} -m pip install --force-reinstall {pin} --index-url {INDEX}{tag}"


def rec_tag(r: dict) -> str:
    """The cuXYZ tag of a matrix recommendation row."""
    return str(r.get("cu_tag") or r.get("cu") or r.get("variant") or "")


def suggested_tag(ctx: Context, driver_cuda: str, torch_version: str = "") -> str:
    """The CUDA wheel variant to suggest: among this torch release's variants (the matrix), the newest
    the driver runs (minor-version compatibility within a major), else PyPI's default; without the
    release in the matrix, the matrix's recommendation for this GPU and driver."""
    m = ctx.matrix
    drv = major_minor(driver_cuda)
    variants = []
    if torch_version and hasattr(m, "torch_variants"):
        try:
            variants = [v for v in (m.torch_variants(torch_version) or []) if v.get("role") != "experimental"] or \
                list(m.torch_variants(torch_version) or [])
        except Exception:  # noqa: BLE001 - the matrix is best effort here
            variants = []
    if variants:
        runnable = [v for v in variants if drv and major_minor(v.get("cuda")) and major_minor(v.get("cuda"))[0] <= drv[0]]
        if runnable:
            return rec_tag(max(runnable, key=lambda v: major_minor(v.get("cuda"))))
        default = next((v for v in variants if v.get("pypi_default")), variants[-1])
        return rec_tag(default)
    if hasattr(m, "recommend_torch"):
        dv = driver_view(ctx)
        ccs = [g.cc for g in dv.gpus if g.cc]
        try:
            recs = m.recommend_torch(ccs[0] if ccs else None, dv.version or None) or []
        except Exception:  # noqa: BLE001
            recs = []
        if recs:
            return rec_tag(recs[0])
    return cu_tag(driver_cuda) if driver_cuda else "cu126"


def wheel_of(soname: str, t) -> str:
    """The installed pip package that ships a library torch could not load ("nvidia-cudnn-cu13 9.19.0.56"), else the
    one torch's wheel tag names; '' when neither tells (cuDNN's and NCCL's names carry torch's CUDA major)."""
    base = WHEELS.get(family_of(soname), "")
    have = sorted(n for n in t.nvidia_packages if base and (n == base or n.startswith(base + "-cu")))
    if have:
        return f"{have[0]} {t.nvidia_packages[have[0]]}"
    tag = re.search(r"\+cu(\d{2,3})", t.version or "")
    if tag or not soname.startswith(("libcudnn", "libnccl")):
        return wheel_for(soname, tag.group(1)[:-1] if tag else "")
    return ""


@step("torch.cuda", "torch sees CUDA", 20, facts=("torch", "nvidia_smi", "nvml", "kernel_module", "platform",
                                                  "other_envs", "device_nodes", "env", "libs"))
def check_torch_cuda(ctx: Context) -> Outcome:
    """torch in the target interpreter: installed, CUDA build, is_available(), device_count(); why not."""
    tf = ctx.fact("torch")
    t = tf.value
    py = (t.python if t is not None and t.python else "") or tf.source.split(" ")[0] or "python"
    ev = {"interpreter": py}

    if tf.state is FactState.TIMEOUT:
        return Outcome("the torch probe hung", [Finding(
            "torch.cuda.probe-hung", Status.FAIL, tf.error,
            "Importing torch or initialising CUDA did not finish. A hang in CUDA initialisation usually means a "
            "wedged driver or GPU (see the driver step), a GPU held by a stuck process, or a very slow network "
            "filesystem for site-packages.",
            Fix("Reproduce it with a timeout and look at the driver log:",
                (f"timeout 120 {q(py)} -c 'import torch; print(torch.cuda.is_available())'",
                 "sudo dmesg | grep -iE 'xid|nvrm' | tail -20", "nvidia-smi")), ev, "torch")])
    if tf.state is FactState.FAILED and (t is None or not t.installed or not t.import_error):
        if "does not exist" in tf.error or "could not start" in tf.error:
            return Outcome("the target interpreter cannot run", [Finding(
                "torch.cuda.python-missing", Status.FAIL, tf.error, "",
                Fix("Point --python at an existing interpreter (the one your program uses):",
                    ("which -a python python3", "cudadoctor check --python /path/to/venv/bin/python")), ev, "torch")])
        if t is None or not t.stage:
            return Outcome("the target interpreter cannot run the probe", [Finding(
                "torch.cuda.python-unusable", Status.FAIL, tf.error,
                "The interpreter ended before reporting anything, so it never reached torch: it may be too old "
                "(the probe needs Python 3.6 or newer), not a Python at all, or broken.",
                Fix("Run it yourself:", (f"{q(py)} --version", f"{q(py)} -c 'import sys; print(sys.version)'")),
                ev, "torch")])
        return Outcome("the torch probe crashed", [Finding(
            "torch.cuda.probe-crashed", Status.FAIL, tf.error,
            "The interpreter died while using torch. A crash (SIGSEGV/SIGABRT) inside CUDA initialisation points "
            "at the driver or at mismatched CUDA libraries (see the libraries step).",
            Fix("Reproduce it and get the native backtrace:",
                (f"{q(py)} -X faulthandler -c 'import torch; torch.cuda.init(); print(torch.cuda.device_count())'",
                 "sudo dmesg | tail -20")), ev, "torch")])
    if tf.state is FactState.NOT_FOUND or t is None:
        return with_working_env(ctx, Outcome(f"torch is not installed in {py}", [Finding(
            "torch.cuda.not-installed", Status.WARN, f"torch is not installed in {py}",
            "Nothing to check for torch in this interpreter. If your program runs in another environment "
            "(venv, conda, Jupyter kernel), point cudadoctor at it.",
            Fix("Check the interpreter your program really uses, or install a CUDA build of torch here:",
                ("cudadoctor envs  # every Python environment here, and which one has torch with CUDA",
                 "cudadoctor check --python /path/to/that/python",
                 pip_torch(py, "", suggested_tag(ctx, driver_view(ctx).cuda)))), ev, "torch")]))
    if t.import_error:
        # (session 32) also a damaged copy ("file too short", "invalid ELF header"), named by its full path
        lib = re.search(r"(?:^|[\s/'\"])(lib[\w.+-]+\.so[\w.]*): (?:cannot open shared object file|file too short|"
                        r"invalid ELF header|wrong ELF class)", t.import_error)
        ev["import error"] = t.import_error
        fix_cmds = [f"{q(py)} -m pip install --force-reinstall torch=={torch_base_version(t.version)}"
                    if t.version else f"{q(py)} -m pip install --force-reinstall torch"]
        wheel = ""
        if lib:
            wheel = wheel_of(lib.group(1), t)
            fix_cmds.insert(0, f"ldconfig -p | grep {lib.group(1).split('.so')[0]}")
            fix_cmds.insert(1, "echo $LD_LIBRARY_PATH  # a stale entry here can shadow the pip nvidia-* libraries")
            if wheel:  # the pip package that ships it: is it there, and whole?
                fix_cmds.insert(0, f"{q(py)} -m pip show -f {wheel.split()[0]} | grep -E "
                                   f"'^(Version|Location)|{lib.group(1).split('.so')[0]}'")
        return Outcome("import torch fails", [Finding(
            "torch.cuda.import-failed", Status.FAIL, f"import torch fails: {t.import_error[:200]}",
            (f"A CUDA library torch needs ({lib.group(1)}) cannot be loaded" + (
                f": torch's own copy comes from the pip package {wheel}, so it is missing or damaged, or another copy "
                "is found first; reinstalling torch reinstalls it." if wheel else ".") if lib else
             "torch is installed but cannot be imported."),
            Fix("Find the missing piece, or reinstall torch with its CUDA libraries:", tuple(fix_cmds)), ev, "torch")])

    ev.update({"torch": t.version, "torch.version.cuda": t.cuda or "None"})
    dv = driver_view(ctx)
    label = f"torch {t.version}"
    if t.available:
        n = t.device_count or 0
        summary = f"{label} · {n} device{'s' if n != 1 else ''}"
        vis = visible_ordinals(t.visible_devices, len(dv.gpus), [g.uuid for g in dv.gpus])
        if vis is not None and dv.gpus and n < len(dv.gpus):
            summary += f" of {len(dv.gpus)} (CUDA_VISIBLE_DEVICES={t.visible_devices})"
        capped = memory_cap(t, py)
        return Outcome(summary, [Finding("torch.cuda.ok", Status.OK, summary, evidence=ev)] + capped)

    # is_available() is False: say why, from the facts
    if t.cpu_only:
        tag = suggested_tag(ctx, dv.cuda, torch_base_version(t.version))
        why_more = "" if dv.present else " (and this machine has no working NVIDIA driver either: see the driver step)"
        return with_working_env(ctx, Outcome(f"{label} is a CPU-only build", [Finding(
            "torch.cuda.cpu-only", Status.FAIL, f"{label} is a CPU-only build (torch.version.cuda is None){why_more}",
            "A CPU-only wheel was installed, typically because pip resolved torch from PyPI's CPU build or an "
            "index without CUDA wheels, or a dependency reinstalled torch.",
            Fix(f"Reinstall torch {torch_base_version(t.version)} built for CUDA ({tag}) in this interpreter:",
                (pip_torch(py, torch_base_version(t.version), tag),
                 f"{q(py)} -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'"), GET_STARTED),
            ev, "torch")]))
    cvd = t.visible_devices
    if cvd is not None and dv.gpus:
        vis = visible_ordinals(cvd, len(dv.gpus), [g.uuid for g in dv.gpus])
        if not vis:
            n = len(dv.gpus)
            return Outcome(f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU", [Finding(
                "torch.cuda.hidden-by-visible-devices", Status.FAIL,
                f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {n} GPU{'s' if n != 1 else ''} the driver sees",
                "CUDA reads CUDA_VISIBLE_DEVICES left to right and stops at the first entry that is not a valid "
                f"device, and a GPU named twice hides them all; valid ordinals here are 0..{n - 1} (or GPU UUIDs, "
                "'GPU-' in upper case).",
                Fix("Unset it, or list GPUs that exist:",
                    ("unset CUDA_VISIBLE_DEVICES", f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(n))}",
                     "nvidia-smi -L  # the GPUs and their UUIDs")), dict(ev, CUDA_VISIBLE_DEVICES=cvd), "torch")])
    if not dv.present:
        return Outcome("no NVIDIA driver", [Finding(
            "torch.cuda.no-driver", Status.FAIL, f"{label} is a CUDA build, but there is no working NVIDIA driver",
            "torch needs the driver's libcuda; the driver step says what is wrong with it.",
            Fix("Fix the driver first (see the driver step), then re-run cudadoctor check.", ("cudadoctor check --only driver",)),
            dict(ev, init_error=t.init_error), "torch")])
    m = RE_FOUND_VERSION.search(t.init_error or "")
    drv = major_minor(dv.cuda)
    tc = major_minor(t.cuda)
    too_old = bool(m) or (drv and tc and tc[0] > drv[0])
    if too_old:
        tag = suggested_tag(ctx, dv.cuda, torch_base_version(t.version)) if dv.cuda else ""
        if tag and drv and tag[2:-1].isdigit() and int(tag[2:-1]) > drv[0]:
            tag = ""  # this release has no variant the driver runs
        need = ""
        if hasattr(ctx.matrix, "min_driver") and t.cuda:
            try:
                row = ctx.matrix.min_driver(t.cuda)
                need = (row or {}).get("linux") or (row or {}).get("minor_version_floor") or ""
            except Exception:  # noqa: BLE001
                need = ""
        return Outcome(f"driver {dv.version} (CUDA {dv.cuda}) is too old for torch CUDA {t.cuda}", [Finding(
            "torch.cuda.driver-too-old", Status.FAIL,
            f"The driver {dv.version} supports CUDA up to {dv.cuda or '?'}; {label} needs CUDA {t.cuda}",
            "A torch wheel built for a newer CUDA major than the driver supports cannot initialise (CUDA error 35, "
            "'driver version is insufficient').",
            Fix("Upgrade the driver" + (f" to {need} or newer" if need else "") +
                f", or install torch built for the driver's CUDA ({tag or 'an older cuXYZ'}):",
                ("nvidia-smi  # 'CUDA Version' is the newest CUDA this driver runs",
                 pip_torch(py, torch_base_version(t.version), tag) if tag else f"{q(py)} -m pip install torch"),
                GET_STARTED), dict(ev, driver=dv.version, driver_cuda=dv.cuda, init_error=t.init_error), "torch")])
    if RE_INIT_OOM.search(t.init_error or "") and (t.address_space_limit or t.data_limit):
        lim = limit_outcome(t, label, py, dict(ev, init_error=t.init_error))
        if lim is not None:
            return lim
    drv_res = ctx.results.get("driver")
    driver_failed = drv_res is not None and drv_res.status in (Status.FAIL, Status.ERROR)
    named = init_cause(ctx, label, py, ev, t.init_error or "")  # certain from torch's words, whatever the driver step says
    if named is not None:
        return named
    if RE_UNKNOWN_ERROR.search(t.init_error or "") and not driver_failed:
        return uvm_outcome(ctx, label, py, dict(ev, init_error=t.init_error))
    if driver_failed:  # the driver step named the cause below torch
        return Outcome("torch.cuda.is_available() is False (see the driver step)", [Finding(
            "torch.cuda.unavailable", Status.FAIL, f"torch.cuda.is_available() is False: {t.init_error or 'no reason given'}",
            f"The driver step failed ({drv_res.summary}): that is the cause; torch's own words are in the evidence.",
            Fix("Fix the driver step first, then re-run:", ("cudadoctor check --only driver", "cudadoctor check")),
            dict(ev, init_error=t.init_error, warnings=t.warnings), "torch")])
    return Outcome("torch.cuda.is_available() is False", [Finding(
        "torch.cuda.unavailable", Status.FAIL, f"torch.cuda.is_available() is False: {t.init_error or 'no reason given'}",
        "torch is a CUDA build and the driver answers, yet CUDA did not initialise; torch's own words are in the "
        "evidence. `cudadoctor explain` recognises most of these messages.",
        Fix("Read torch's reason and explain it:",
            (f"{q(py)} -c 'import torch; torch.cuda.init()'", f"cudadoctor explain {q(t.init_error[:200] or 'is_available False')}")),
        dict(ev, init_error=t.init_error, warnings=t.warnings), "torch")])


# CUDA's initialisation out of memory ("Unexpected error from cudaGetDeviceCount() ... Error 2: out of memory"): with
# an empty GPU, the process's virtual memory limit (seen on an H200 under `ulimit -v 16000000`, session 34)
RE_INIT_OOM = re.compile(r"out of memory|cuda_error_out_of_memory|error 2\b", re.I)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def memory_cap(t, py: str) -> list:
    """CUDA started, but a virtual memory limit (ulimit -v) below a GPU's memory caps what this process can allocate
    on it: device memory is mapped into the process's address space. Seen on the H200 (session 34): under
    `ulimit -v 24G` CUDA started and an 8 GiB allocation failed with 'CUDA out of memory ... 139.12 GiB is free';
    under 32G it worked."""
    lim = t.address_space_limit
    big = max((d.total_memory_mib or 0 for d in t.devices), default=0) * 2**20
    if not lim or not big or lim >= big:
        return []
    return [Finding(
        "torch.cuda.memory-limit", Status.WARN,
        f"ulimit -v {lim // 1024} ({_gib(lim)}) caps this process below one GPU's memory ({_gib(big)})",
        "Device memory is mapped into the process's virtual address space, so allocations fail with 'CUDA out of "
        "memory' while nvidia-smi shows the GPU free, well before the limit (CUDA and torch take a large part of it).",
        Fix("Lift the limit in the shell or job script that starts the program:",
            ("ulimit -v unlimited", f"{q(py)} -c 'import torch; x = torch.empty(2**33, dtype=torch.uint8, device=\"cuda\")'")),
        {"ulimit -v": f"{lim // 1024} KiB"}, "every CUDA program")]


LIMIT_CLAIM = 2**40  # without the retry's proof, a limit of 1 TiB or more is not named as the cause


def limit_outcome(t, label: str, py: str, ev: dict):
    """cudaGetDeviceCount()/cuInit fail with 'out of memory' under a limit on the process's virtual memory (ulimit -v,
    a scheduler's vmem limit) or data size (ulimit -d): CUDA reserves address space for the GPU as it starts, and the
    GPU is not full (`cudadoctor explain` on the message alone would say it is). The probe starts CUDA again with the
    soft limits raised to the hard ones: working there proves the limit (None: not the cause, or nothing to say)."""
    lim = [(n, v) for n, v in (("-v", t.address_space_limit), ("-d", t.data_limit)) if v]
    if t.limit_retry_ok is False:
        return None  # CUDA failed the same way without the soft limits: they are not the cause
    proved = t.limit_retry_ok is True
    if not proved and not any(v < LIMIT_CLAIM for _, v in lim):
        return None
    said = " and ".join(f"ulimit {n} {v // 1024} ({_gib(v)})" for n, v in lim)
    ev = dict(ev, **{f"ulimit {n}": f"{v // 1024} KiB" for n, v in lim},
              **({"retry": t.limit_retry} if t.limit_retry else {}))
    how = ("With the soft limits raised to the hard ones, CUDA started: the limit is the cause. " if proved else
           "The hard limit equals the soft one, so the probe could not start CUDA without it to prove it; " if
           "equal" in t.limit_retry else "")
    return Outcome(f"CUDA cannot start under this process's memory limit ({said})", [Finding(
        "torch.cuda.address-space-limit", Status.FAIL,
        f"{label}: CUDA initialisation fails with 'out of memory' under a limit on the process's memory: {said}",
        how + "CUDA reserves a large range of virtual address space for the GPU as it initialises; a limit set with "
        "`ulimit -v`/`-d` (a login script, a job scheduler's vmem limit) makes that fail although the GPU is empty. "
        "nvidia-smi, which does not start CUDA, still works.",
        Fix("Lift the limit in the shell or job script that starts the program (a hard limit: ask the administrator "
            "or the scheduler for none):",
            ("ulimit -a  # 'virtual memory' and 'data seg size' should say unlimited",
             "; ".join(f"ulimit {n} unlimited" for n, _ in lim),
             f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'")), ev, "every CUDA program")])


# CUDA_ERROR_UNKNOWN (999) from cuInit while the driver answers: torch says "CUDA unknown error - this may be due to an
# incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES", which is seldom the cause
RE_UNKNOWN_ERROR = re.compile(r"cuda unknown error|cuda_error_unknown|cudaerrorunknown|\(999\)|error 999", re.I)
DOCS_UVM = "https://docs.nvidia.com/cuda/cuda-installation-guide-linux/#runfile-verifications"


def uvm_outcome(ctx: Context, label: str, py: str, ev: dict) -> Outcome:
    """cuInit fails with CUDA_ERROR_UNKNOWN though nvidia-smi answers: the unified-memory module (nvidia_uvm), which
    nvidia-smi does not use and CUDA does: its device file is missing (the module not loaded, or a container not given
    it), or the module broke across a suspend and resume. Reproduced on an H200 (session 31): /dev/nvidia-uvm made
    unopenable, cuInit(0) returns 999 and torch raises exactly this while nvidia-smi and NVML are fine."""
    nf = ctx.fact("device_nodes")
    dn = nf.value if nf.ok and nf.value is not None else DeviceNodes()
    plat = ctx.fact("platform").value
    container = plat.container if plat is not None else ""
    uvm = "/dev/nvidia-uvm" in dn.nodes
    if plat is not None and plat.is_wsl:
        return Outcome("CUDA cannot initialise: unknown error (WSL)", [Finding(
            "torch.cuda.wsl-unknown-error", Status.FAIL,
            f"{label}: CUDA initialisation fails with CUDA_ERROR_UNKNOWN (999) under WSL2",
            "WSL2 has no nvidia_uvm and no /dev/nvidia*: CUDA goes through /dev/dxg and the Windows driver. 999 "
            "there follows a Windows driver update or reset, or sleep, until WSL restarts.",
            Fix("Restart WSL (from Windows), and keep the Windows driver current:",
                ("wsl.exe --shutdown", "ls -l /dev/dxg /usr/lib/wsl/lib/libcuda.so.1",
                 f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'"),
                "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"), ev, "every CUDA program")])
    if "/dev/nvidia-uvm" in dn.denied:
        return Outcome("CUDA cannot initialise: /dev/nvidia-uvm refused", [Finding(
            "torch.cuda.uvm", Status.FAIL,
            f"{label}: CUDA initialisation fails with CUDA_ERROR_UNKNOWN (999): the permissions of /dev/nvidia-uvm "
            "do not let this user open it",
            "CUDA opens /dev/nvidia-uvm read-write at initialisation; NVML and nvidia-smi do not, so they work.",
            Fix("See who may open it; the driver makes it 0666 unless told otherwise (a udev rule or image):",
                ("ls -l /dev/nvidia-uvm", "id", "sudo chmod 0666 /dev/nvidia-uvm  # until the next reboot"), DOCS_UVM),
            dict(ev, **{"/dev/nvidia-uvm": "present, refused"}), "every CUDA program")])
    ev = dict(ev, **{"/dev/nvidia-uvm": ("present" if uvm else "missing") if nf.ok else "not read"})
    if container:
        fix = Fix(f"Inside a {container} container the runtime must pass /dev/nvidia-uvm (the host must have it):",
                  ("ls -l /dev/nvidia-uvm  # here and on the host",
                   "sudo modprobe nvidia-uvm && sudo nvidia-modprobe -u -c=0  # on the host, if it is missing there",
                   ) + runtime_fix(container), DOCS_UVM)
    elif nf.ok and not uvm:
        fix = Fix("Load the unified-memory module and create its device file:",
                  ("sudo modprobe nvidia-uvm", "sudo nvidia-modprobe -u -c=0",
                   f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'"), DOCS_UVM)
    else:
        fix = Fix("Reload the unified-memory module (it breaks across a suspend and resume); nothing may be using the "
                  "GPU, else reboot:",
                  ("sudo rmmod nvidia_uvm; sudo modprobe nvidia_uvm  # modprobe also when it was not loaded",
                   f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'",
                   "sudo systemctl enable nvidia-suspend.service nvidia-resume.service  # keeps it working across sleep"),
                  DOCS_UVM)
    where = ("/dev/nvidia-uvm is missing" if nf.ok and not uvm else
             "/dev/nvidia-uvm is there but CUDA cannot use it (the module broke, as across a suspend)" if uvm else
             "the unified-memory module (nvidia_uvm) is the usual cause")
    return Outcome("CUDA cannot initialise: unknown error (nvidia_uvm)", [Finding(
        "torch.cuda.uvm", Status.FAIL,
        f"{label}: CUDA initialisation fails with CUDA_ERROR_UNKNOWN (999) while the driver answers nvidia-smi; {where}",
        "nvidia-smi and NVML work without the nvidia_uvm kernel module, CUDA does not: cuInit returns "
        "CUDA_ERROR_UNKNOWN when /dev/nvidia-uvm cannot be opened (the module is not loaded, or a container was not "
        "given the file) or when the module broke across a suspend and resume. torch's hint about "
        "CUDA_VISIBLE_DEVICES is seldom the cause.", fix, ev, "every CUDA program")])
