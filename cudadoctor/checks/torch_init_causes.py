"""Why CUDA did not initialise in torch when the driver answers, read from torch's own words and this machine's
facts (seen on an H200, session 35: the messages below are torch 2.11's, verbatim). Each is certain from the message
and the facts, whatever the driver step says (a shadowed libnvidia-ml, for one, does not stop cuInit):

- "Error 34: CUDA driver is a stub library": the CUDA toolkit's link-time stub libcuda (lib64/stubs) was loaded
  instead of the driver's: how it was found (an LD_LIBRARY_PATH folder, the linker cache) comes from the libs fact.
- "Error 101: invalid device ordinal" at cudaGetDeviceCount() with CUDA_DEVICE_ORDER set to anything but FASTEST_FIRST
  or PCI_BUS_ID (env_cuda_driver.py).
"""

from __future__ import annotations

import re
from typing import Optional

from cudadoctor.checks.common import env_vars, is_stubs_dir, ld_entries, ld_without, q
from cudadoctor.checks.env_cuda_driver import device_order_fix, device_order_invalid, env_with_crs
from cudadoctor.checks.libraries import DOCS_LOADER, loaded_stub, stub_fix
from cudadoctor.checks.registry import Context, Outcome
from cudadoctor.model import Finding, Fix, Status

RE_STUB = re.compile(r"\berror 34\b|driver is a stub library|cudaErrorStubLibrary|CUDA_ERROR_STUB_LIBRARY", re.I)
RE_ORDINAL = re.compile(r"\berror 101\b|invalid device ordinal", re.I)
RE_CODE = re.compile(r"Error \d+: [^\n]*")  # torch's "Error N: <CUDA's words>", the part that says what failed


def torch_words(err: str) -> str:
    """torch's "Error N: ..." (its cudaGetDeviceCount() message's long preamble left out), else its first line."""
    m = RE_CODE.search(err)
    return m.group(0) if m else (err.strip().splitlines() or [""])[0][:200]


def stub_outcome(ctx: Context, label: str, py: str, ev: dict, err: str) -> Outcome:
    libs = ctx.fact("libs").value
    s = loaded_stub(libs) if libs is not None else None
    ldp = ld_entries(env_vars(ctx))
    if s is not None:
        found, text, cmds = stub_fix(libs, s)
        where, ev = f" ({s.realpath}, found through {found})", dict(ev, loaded=s.realpath, via=s.via)
    else:  # the libraries were not read: the stubs folders on LD_LIBRARY_PATH, if any
        stubs = {e for e in ldp if is_stubs_dir(e)}
        cmds = (ld_without(ldp, stubs),) if stubs else (
            "ldconfig -p | grep libcuda  # a stubs folder in the linker cache?",)
        where = f" (LD_LIBRARY_PATH holds {', '.join(sorted(stubs))})" if stubs else ""
        text = "Keep the stub out of the loader's way so the driver's libcuda.so.1 is found:"
    return Outcome("torch loaded the CUDA toolkit's stub libcuda", [Finding(
        "torch.cuda.stub-libcuda", Status.FAIL,
        f"{label} loaded the CUDA toolkit's stub libcuda, not the driver's{where}: {torch_words(err)}",
        "The stub in the toolkit's lib64/stubs exists only for linking; loaded at run time every CUDA call fails "
        "with error 34.",
        Fix(text,
            tuple(cmds) + (f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'",), DOCS_LOADER),
        dict(ev, init_error=err, LD_LIBRARY_PATH=":".join(ldp)), "every CUDA program")])


def device_order_outcome(label: str, py: str, ev: dict, err: str, value: str) -> Outcome:
    fix = device_order_fix(value)
    return Outcome(f"CUDA_DEVICE_ORDER={value!r} stops CUDA", [Finding(
        "torch.cuda.device-order-invalid", Status.FAIL,
        f"{label} cannot start CUDA: CUDA_DEVICE_ORDER={value!r} is not FASTEST_FIRST or PCI_BUS_ID ({torch_words(err)})",
        "CUDA accepts only those two values, exactly (upper case, no spaces); any other makes cudaGetDeviceCount() "
        "fail with 101, 'invalid device ordinal'.",
        Fix(fix.text, fix.commands + (f"{q(py)} -c 'import torch; print(torch.cuda.is_available())'",), fix.docs),
        dict(ev, init_error=err, CUDA_DEVICE_ORDER=value), "every CUDA program")])


def init_cause(ctx: Context, label: str, py: str, ev: dict, err: str) -> Optional[Outcome]:
    """An Outcome naming the cause when torch's initialisation error and the facts show it, else None."""
    if RE_STUB.search(err):
        return stub_outcome(ctx, label, py, ev, err)
    env = env_with_crs(ctx)
    if RE_ORDINAL.search(err) and device_order_invalid(env):
        return device_order_outcome(label, py, ev, err, env["CUDA_DEVICE_ORDER"])
    return None
