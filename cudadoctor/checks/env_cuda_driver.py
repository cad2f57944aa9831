"""Variables the CUDA driver itself reads as it starts (CUDA_DEVICE_ORDER, CUDA_FORCE_PTX_JIT): their values as CUDA
really treats them, seen on an H200 (driver 580.159.04, torch 2.11.0+cu130, session 35):

- CUDA_DEVICE_ORDER: only FASTEST_FIRST and PCI_BUS_ID, exactly. Anything else, lower case, a trailing space or an
  empty value included, and CUDA does not start: cudaGetDeviceCount() returns 101 (invalid device ordinal), so
  torch.cuda.is_available() is False.
- CUDA_FORCE_PTX_JIT: only "1" (not 2, true, yes or empty): the driver ignores every compiled kernel (SASS) and
  JIT-compiles PTX, so code that ships no PTX this GPU can JIT fails with "no kernel image is available" (torch's own
  elementwise ops, Triton's kernels) or CUBLAS_STATUS_INTERNAL_ERROR at cublasCreate.
"""

from __future__ import annotations

import re

from cudadoctor.checks.common import earlier_findings, env_vars, q
from cudadoctor.model import Finding, Fix, Status

DOCS_ENV = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars"
DEVICE_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")
FORCE_PTX_JIT = "CUDA_FORCE_PTX_JIT"

# what code without PTX for this GPU gives under CUDA_FORCE_PTX_JIT=1 (the H200's torch 2.11: an elementwise op "no kernel
# image", cublasCreate CUBLAS_STATUS_INTERNAL_ERROR; Triton "no kernel image"; the driver API 209); PTX that cannot be
# JIT-compiled (218, 222) too. Any other error is not blamed on the variable.
FORCED_JIT_ERRORS = re.compile(
    r"no kernel image is available|NO_BINARY_FOR_GPU|device kernel image is invalid|CUBLAS_STATUS_INTERNAL_ERROR|"
    r"CUBLAS_STATUS_NOT_INITIALIZED|\b(?:209|218|222)\b|INVALID_PTX|UNSUPPORTED_PTX|PTX JIT", re.I)


CR = "\r"  # a carriage return CUDA reads at the end of a value (seen on the H200: 'PCI_BUS_ID\r' gives 101 too)


def env_with_crs(ctx) -> dict:
    """The env fact's values as CUDA reads them: a carriage return the fact recorded put back at the end (the shown
    values leave it out; a .env file with Windows line endings puts it there)."""
    env = env_vars(ctx)
    f = ctx.fact("env").value
    for k in (getattr(f, "carriage_returns", None) or []):
        if isinstance(k, str) and k in env:
            env[k] = env[k] + CR
    return env


def device_order_invalid(env: dict) -> bool:
    return "CUDA_DEVICE_ORDER" in env and env["CUDA_DEVICE_ORDER"] not in DEVICE_ORDERS


def device_order_fix(value: str) -> Fix:
    near = value.strip().upper()
    cmd = f"export CUDA_DEVICE_ORDER={near}" if near in DEVICE_ORDERS else (
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID  # nvidia-smi's order; or: unset CUDA_DEVICE_ORDER (FASTEST_FIRST)")
    if CR in value:  # where it came from: a file with Windows line endings
        cmd += "  # and save the .env / --env-file it came from with Unix line endings (dos2unix FILE)"
    return Fix("Set it to FASTEST_FIRST or PCI_BUS_ID exactly (upper case, no spaces), or unset it:", (cmd,), DOCS_ENV)


def device_order_finding(value: str, cuda_started: bool) -> Finding:
    """FAIL unless CUDA was seen to start with it (torch.cuda OK here): driver 580 refuses such values (101)."""
    if cuda_started:
        return Finding(
            "env.cuda-device-order", Status.WARN,
            f"CUDA_DEVICE_ORDER={value!r} is not FASTEST_FIRST or PCI_BUS_ID (this driver accepted it)",
            detail="CUDA documents only the two values; CUDA started here, but driver 580 refuses any other value "
                   "(error 101 at cudaGetDeviceCount(), seen on an H200), so another machine or driver may not.",
            fix=device_order_fix(value), evidence={"CUDA_DEVICE_ORDER": value})
    return Finding(
        "env.cuda-device-order", Status.FAIL,
        f"CUDA_DEVICE_ORDER={value!r} is not FASTEST_FIRST or PCI_BUS_ID: CUDA does not start (error 101)",
        detail="CUDA accepts only the two values, exactly; with any other (lower case, an empty value or a trailing "
               "space too) cudaGetDeviceCount() fails with 101, 'invalid device ordinal', and torch.cuda.is_available() "
               "is False (seen on an H200, driver 580).",
        fix=device_order_fix(value), evidence={"CUDA_DEVICE_ORDER": value}, affects="every CUDA program")


def forced_ptx_jit(env: dict) -> bool:
    return env.get(FORCE_PTX_JIT) == "1"


FORCE_PTX_JIT_FIX = Fix("Unset it (it is meant for testing PTX, not for running):", (f"unset {FORCE_PTX_JIT}",), DOCS_ENV)


def force_ptx_jit_finding(failed_here: list) -> Finding:
    """FAIL where an earlier step's kernels failed under it (`failed_here`: those steps), else WARN: code that ships PTX
    for this GPU still runs, more slowly."""
    return Finding(
        "env.cuda-force-ptx-jit", Status.FAIL if failed_here else Status.WARN,
        "CUDA_FORCE_PTX_JIT=1: CUDA ignores every compiled kernel and JIT-compiles PTX instead"
        + (f" ({', '.join(failed_here)} failed under it)" if failed_here else ""),
        detail="Code that ships no PTX this GPU can JIT-compile fails: torch's own kernels and cuBLAS ('no kernel "
               "image is available', CUBLAS_STATUS_INTERNAL_ERROR), Triton's kernels, most CUDA extensions; what "
               "does run starts slowly (seen on an H200 with torch 2.11).",
        fix=FORCE_PTX_JIT_FIX, evidence={FORCE_PTX_JIT: "1"}, affects="every CUDA program")


def forced_ptx_jit_failure(fid: str, what: str, err: str, ev: dict, py: str = "") -> Finding:
    """A kernel that failed while CUDA_FORCE_PTX_JIT=1: that variable is the cause (other steps see the same)."""
    cmds = (f"unset {FORCE_PTX_JIT}",) + ((f"{q(py)} -c 'import torch; print(torch.ones(4, device=\"cuda\") + 1)'",)
                                          if py else ())
    return Finding(fid, Status.FAIL, f"{what} failed under CUDA_FORCE_PTX_JIT=1: {err}",
                   "CUDA_FORCE_PTX_JIT=1 makes CUDA ignore compiled kernels and JIT-compile PTX; this code has none "
                   "for this GPU, so it cannot run while the variable is set (see the environment step).",
                   Fix("Unset CUDA_FORCE_PTX_JIT and run it again:", cmds, DOCS_ENV),
                   dict(ev, **{FORCE_PTX_JIT: "1"}), "every CUDA program")


def jit_disabled(env: dict) -> bool:
    """CUDA_DISABLE_PTX_JIT=1: PTX-only code fails 'PTX JIT compilation was disabled' (seen on the H200 with a
    compute_80-only kernel), unless the JIT cache already holds it (it then ran); code with SASS is untouched (torch)."""
    return env.get("CUDA_DISABLE_PTX_JIT") == "1"


def disable_jit_finding() -> Finding:
    return Finding(
        "env.cuda-disable-ptx-jit", Status.WARN,
        "CUDA_DISABLE_PTX_JIT=1: code with only PTX for this GPU fails ('PTX JIT compilation was disabled')",
        detail="Binaries with SASS for the GPU run as before (torch's wheels); a binary or extension built only as PTX "
               "for it (probe.scan lists them) fails, unless the JIT cache already holds it from an earlier run (seen on "
               "an H200: the same kernel failed cold and ran warm).",
        fix=Fix("Unset it unless you are testing that every binary has SASS:", ("unset CUDA_DISABLE_PTX_JIT",), DOCS_ENV),
        evidence={"CUDA_DISABLE_PTX_JIT": "1"})


def cuda_driver_findings(ctx, env: dict) -> list:
    """`env`: the values as CUDA reads them; torch.cuda, torch.op and torch.triton are judged before this step."""
    out = []
    if device_order_invalid(env):
        tc = ctx.results.get("torch.cuda")
        out.append(device_order_finding(env["CUDA_DEVICE_ORDER"], tc is not None and tc.status is Status.OK))
    if forced_ptx_jit(env):
        failed = [sid for sid in ("torch.op", "torch.triton") if any(
            f.evidence.get(FORCE_PTX_JIT) == "1" and f.status is Status.FAIL for f in earlier_findings(ctx, sid))]
        out.append(force_ptx_jit_finding(failed))
    if jit_disabled(env):
        out.append(disable_jit_finding())
    return out
