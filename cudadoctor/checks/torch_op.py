"""Step 4, `torch.op`: a minimal GPU op, synchronised and timed, in the child."""

from __future__ import annotations

from cudadoctor.checks.common import q
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import FactState, Finding, Fix, Status

SLOW_S = 10.0


@step("torch.op", "minimal GPU op", 40, facts=("torch",), requires=("torch.cuda",))
def check_torch_op(ctx: Context) -> Outcome:
    """torch.ones(1).cuda() and a 64x64 matmul, checked against the CPU; the error kept verbatim."""
    tf = ctx.fact("torch")
    t = tf.value
    py = (t.python if t is not None else "") or "python"
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
        first = (op.error or "").strip().splitlines()[0] if op.error else "unknown error"
        nki = "no kernel image" in (op.error or "")
        return Outcome(f"failed: {first[:90]}", [Finding(
            "torch.op.failed", Status.FAIL, f"torch.ones(1).cuda() / matmul failed: {first}",
            ("torch has no kernel image for this GPU (see the compute capability step)." if nki else
             "The GPU cannot run even a trivial op; the error text is the evidence."),
            Fix("Reproduce it synchronously and explain the error:",
                (f"CUDA_LAUNCH_BLOCKING=1 {q(py)} -c 'import torch; print(torch.ones(1).cuda())'",
                 f"cudadoctor explain {q(first[:200])}")), ev, "torch")])
    summary = f"torch.ones(1).cuda() + 64×64 matmul in {op.seconds:.2f} s"
    if op.seconds is not None and op.seconds > SLOW_S:
        return Outcome(summary + " (slow)", [Finding(
            "torch.op.slow", Status.WARN, f"the first GPU op took {op.seconds:.1f} s",
            "A first op this slow usually means kernels are JIT-compiled from PTX (no SASS for this GPU), a cold "
            "or unwritable CUDA JIT cache, or a GPU shared with heavy work.",
            Fix("Check the compute capability step, the JIT cache and what else runs on the GPU:",
                ("echo $CUDA_CACHE_PATH $CUDA_CACHE_DISABLE", "nvidia-smi")), ev, "torch")])
    return Outcome(summary, [Finding("torch.op.ok", Status.OK, summary, evidence=ev)])
