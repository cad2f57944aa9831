"""Step 4, `torch.op`: what a program meets at its first CUDA calls, in the child: torch's lazy CUDA
initialisation, torch.ones(1).cuda(), a 64x64 matmul (cuBLAS) and a 3x3 convolution (cuDNN), each
checked against the CPU and each error kept verbatim. A probe that died or hung in one of them is
this step's failure (torch.cuda keeps what torch answered before)."""

from __future__ import annotations

import re

from cudadoctor.checks.common import env_vars, first_line, q
from cudadoctor.checks.environment import check_alloc_conf
from cudadoctor.checks.holders import holders_fix, is_full, memory_line, nvml_gpu, op_gpu, others_on
from cudadoctor.checks.env_cuda_driver import FORCED_JIT_ERRORS, forced_ptx_jit, forced_ptx_jit_failure
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import FactState, Finding, Fix, Status

SLOW_S = 10.0
#: stages of the probe that belong to this step (see facts/torch.py)
OP_PARTS = ("init", "devices", "cudnn", "op", "conv")
ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
RE_OOM = re.compile(r"out of memory", re.I)
RE_BUSY = re.compile(r"busy or unavailable", re.I)  # cudaErrorDevicesUnavailable (46), exclusive compute mode
ONES = "import torch; print(torch.ones(1).cuda())"


def _first(text: str) -> str:
    return first_line(text, "unknown error")


def _bad_alloc_conf(ctx: Context) -> tuple:
    """(variable, value, its problems) for an allocator setting torch cannot parse, else ('', '', [])."""
    env = env_vars(ctx)
    for name in ALLOC_VARS:
        if env.get(name):
            probs = check_alloc_conf(env[name])
            if probs:
                return name, env[name], probs
    return "", "", []


def _alloc_fix(name: str) -> Fix:
    return Fix(f"Give {name} values torch can parse (comma-separated key:value), or unset it:",
               (f"export {name}=expandable_segments:True", f"unset {name}"),
               "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf")


def _py(ctx: Context) -> str:
    t = ctx.fact("torch").value
    return (t.python if t is not None else "") or "python"


def first_use_failed(ctx: Context, t) -> Outcome:
    """is_available() said True, but torch's lazy CUDA initialisation raised: every program's first CUDA call does."""
    err = t.first_use_error
    name, value, probs = _bad_alloc_conf(ctx)
    ev = {"torch.cuda.init()": err}
    if name:
        ev[name] = value
        detail = (f"torch cannot parse {name}={value!r} ({'; '.join(probs)}), so its CUDA initialisation raises at "
                  "the first CUDA call of every program, although torch.cuda.is_available() is True.")
        fix = _alloc_fix(name)
    elif RE_OOM.search(err) or RE_BUSY.search(err):
        return _held(ctx, t, err, "torch.cuda.init()", ev)
    else:
        detail = ("torch.cuda.is_available() is True, but torch's CUDA initialisation raises: every program fails "
                  "at its first CUDA call with this error.")
        fix = Fix("Reproduce it and explain the error:",
                  (f"{q(_py(ctx))} -c 'import torch; torch.cuda.init()'", f"cudadoctor explain {q(_first(err)[:200])}"))
    return Outcome(f"the first CUDA call raises {_first(err)[:90]}", [Finding(
        "torch.op.first-use-failed", Status.FAIL, f"torch.cuda.init() (the first CUDA call) raises {_first(err)}",
        detail, fix, ev, "every torch program")])


def died(ctx: Context, t) -> Outcome:
    """The probe died or hung inside one of this step's stages."""
    hung = t.stopped_kind == "timeout"
    name, value, probs = _bad_alloc_conf(ctx)
    ev = {"torch probe": t.stopped, "while": t.stopped_doing}
    if name:
        ev[name] = value
        detail = (f"torch cannot parse {name}={value!r} ({'; '.join(probs)}): its first CUDA call raises a "
                  "ValueError, and CUDA calls after that can crash the interpreter, as here.")
        fix = _alloc_fix(name)
    elif hung:
        detail = ("A first CUDA call that never returns usually means a wedged driver or GPU (see the driver step "
                  "and the kernel log) or a GPU held by a stuck process.")
        fix = Fix("Reproduce it with a timeout and look at the driver log:",
                  (f"timeout 120 {q(_py(ctx))} -c {q(ONES)}", "sudo dmesg | grep -iE 'xid|nvrm' | tail -20",
                   "nvidia-smi"))
    else:
        detail = ("The interpreter died inside CUDA (torch.cuda answered before, so torch and the driver load): "
                  "mismatched CUDA libraries (see the libraries step) or the driver.")
        fix = Fix("Reproduce it and get the native backtrace:",
                  (f"{q(_py(ctx))} -X faulthandler -c {q(ONES)}", "sudo dmesg | tail -20"))
    fid = "torch.op.hung" if hung else "torch.op.crashed"
    return Outcome(("hung" if hung else "crashed") + f" during {t.stopped_doing or t.stopped_part}", [Finding(
        fid, Status.FAIL, t.stopped, detail, fix, ev, "torch")])


def _held(ctx: Context, t, err: str, call: str, ev: dict) -> Outcome:
    """Out of memory, or busy in an exclusive compute mode: name the processes that hold the GPU."""
    idx = op_gpu(ctx)
    g = nvml_gpu(ctx, idx) if idx is not None else None
    procs = others_on(ctx, idx)
    oom = bool(RE_OOM.search(err))
    where = f"GPU {idx}" if idx is not None else "the GPU"
    if g is not None and memory_line(g):
        ev[f"GPU {idx} memory"] = memory_line(g)
    if g is not None and g.compute_mode:
        ev[f"GPU {idx} compute mode"] = g.compute_mode
    for p in procs:
        ev[f"PID {p.pid}"] = p.label()
    held = ", ".join(p.label() for p in procs)
    if oom:
        fid = "torch.op.out-of-memory"
        why = (f"{where} is full ({memory_line(g)})" if is_full(g) else f"{where} has too little free memory") + (
            f": {held} hold{'s' if len(procs) == 1 else ''} it" if procs else
            ": NVML lists no other process on it (another container's processes may be hidden from NVML here)")
    else:
        fid = "torch.op.gpu-busy"
        mode = g.compute_mode if g is not None and g.compute_mode else "exclusive"
        why = f"{where} runs in compute mode {mode}, one process at a time" + (
            f", and {held} already uses it" if procs else "")
    detail = (f"Every program that uses {where} now fails the same way ('{_first(err)}'): "
              + ("the memory is taken by other processes, not lost; it comes back when they end."
                 if oom else "the GPU admits one process at a time and another one has it."))
    fix = holders_fix(ctx, idx if idx is not None else 0, procs, f"{q(_py(ctx))} your_program.py")
    if not oom:
        fix = Fix(fix.text, fix.commands + (
            f"sudo nvidia-smi -i {idx if idx is not None else 0} -c DEFAULT  # (admin) let processes share the GPU",),
            fix.docs)
    return Outcome(f"{call} failed: {_first(err)[:60]} ({where} held by others)" if procs else
                   f"{call} failed: {_first(err)[:90]}", [Finding(
                       fid, Status.FAIL, f"{call} failed with {_first(err)}: {why}", detail, fix, ev, "torch")])


def _conv(ctx: Context, t) -> list:
    """The cuDNN conv's failure, or nothing (it passed, was skipped or was not run)."""
    c = t.conv
    if c is None or c.skipped or c.ok:
        return []
    ev = {"error": f"{c.error_type}: {c.error}" if c.error_type else c.error, "seconds": c.seconds}
    cud = t.cudnn
    if cud is not None:
        ev["cuDNN compiled / loaded"] = f"{cud.compiled or '?'} / {cud.runtime or '?'}"
    return [Finding(
        "torch.op.cudnn-failed", Status.FAIL, f"a 3x3 convolution through cuDNN failed: {_first(c.error)}",
        "torch itself works on the GPU (the op passed), but cuDNN does not: convolutional models, and RNNs through "
        "cuDNN, fail the same way. The libraries step says which cuDNN is loaded.",
        Fix("Reproduce it and see which cuDNN torch loads:",
            (f"{q(_py(ctx))} -c 'import torch; x = torch.ones(1, 3, 8, 8).cuda(); "
             "print(torch.nn.functional.conv2d(x, torch.ones(4, 3, 3, 3).cuda()).sum())'",
             "cudadoctor libs")), ev, "torch")]


@step("torch.op", "minimal GPU op", 40, facts=("torch", "nvml", "gpu_processes", "env"), requires=("torch.cuda",))
def check_torch_op(ctx: Context) -> Outcome:
    """torch's CUDA init, torch.ones(1).cuda(), a 64x64 matmul and a cuDNN conv, checked; errors kept verbatim."""
    tf = ctx.fact("torch")
    t = tf.value
    py = _py(ctx)
    if t is not None and t.first_use_error:
        return first_use_failed(ctx, t)
    if t is not None and t.stopped and t.stopped_part in OP_PARTS:
        return died(ctx, t)
    op = t.op if t is not None else None
    if op is None:
        if tf.state is FactState.NOT_FOUND:  # torch.cuda warned (no torch here): nothing to run the op with
            return Outcome("no torch to run it with", [Finding(
                "torch.op.not-run", Status.SKIP, "the op was not run: torch is not installed in the target")])
        if tf.state in (FactState.TIMEOUT, FactState.FAILED):
            return Outcome("the probe stopped before the op", [Finding(
                "torch.op.not-run", Status.FAIL, tf.error, "The torch probe ended before it reached the op.",
                Fix("See the torch.cuda step.", ("cudadoctor check --only torch.cuda -v",)))])
        return Outcome("not run", [Finding("torch.op.not-run", Status.SKIP, "the op was not run (--no-gpu-ops)")])
    ev = {"error": f"{op.error_type}: {op.error}" if op.error else "", "seconds": op.seconds}
    if not op.ok:
        first = _first(op.error)
        call = {"ones": "torch.ones(1).cuda()", "matmul": "a 64x64 matmul (cuBLAS)"}.get(
            op.part, "torch.ones(1).cuda() / matmul")
        if RE_OOM.search(op.error or "") or RE_BUSY.search(op.error or ""):
            return _held(ctx, t, op.error, call, ev)
        if forced_ptx_jit(env_vars(ctx)) and FORCED_JIT_ERRORS.search(op.error or ""):  # (session 35, H200)
            return Outcome(f"failed under CUDA_FORCE_PTX_JIT=1: {first[:70]}",
                           [forced_ptx_jit_failure("torch.op.failed", call, first, ev, py)])
        nki = "no kernel image" in (op.error or "")
        return Outcome(f"failed: {first[:90]}", [Finding(
            "torch.op.failed", Status.FAIL, f"{call} failed: {first}",
            ("torch has no kernel image for this GPU (see the compute capability step)." if nki else
             "The GPU cannot run even a trivial op; the error text is the evidence."),
            Fix("Reproduce it synchronously and explain the error:",
                (f"CUDA_LAUNCH_BLOCKING=1 {q(py)} -c {q(ONES)}",
                 f"cudadoctor explain {q(first[:200])}")), ev, "torch")])
    conv = t.conv
    parts = "torch.ones(1).cuda() + 64×64 matmul" + (" + 3×3 conv (cuDNN)" if conv is not None and conv.ok else "")
    secs = (op.seconds or 0.0) + (conv.seconds or 0.0 if conv is not None and conv.ok else 0.0)
    summary = f"{parts} in {secs:.2f} s"
    bad = _conv(ctx, t)
    if bad:
        return Outcome(f"cuDNN conv failed: {_first(conv.error)[:80]}", bad)
    if conv is not None and conv.skipped:
        ev["conv"] = f"not run: {conv.skipped}"
    if op.seconds is not None and op.seconds > SLOW_S:
        return Outcome(summary + " (slow)", [Finding(
            "torch.op.slow", Status.WARN, f"the first GPU op took {op.seconds:.1f} s",
            "A first op this slow usually means kernels are JIT-compiled from PTX (no SASS for this GPU), a cold "
            "or unwritable CUDA JIT cache, or a GPU shared with heavy work.",
            Fix("Check the compute capability step, the JIT cache and what else runs on the GPU:",
                ("echo $CUDA_CACHE_PATH $CUDA_CACHE_DISABLE", "nvidia-smi")), ev, "torch")])
    return Outcome(summary, [Finding("torch.op.ok", Status.OK, summary, evidence=ev)])
