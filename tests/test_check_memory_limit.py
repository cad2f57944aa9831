"""CUDA cannot start under a low limit on the process's virtual memory (ulimit -v) or data size (ulimit -d). Seen on
the H200 (session 34, tests/data/h200/s34_ulimit_v_check.txt): under `ulimit -v 16000000` torch raised "Unexpected
error from cudaGetDeviceCount() ... Error 2: out of memory" with the GPU empty and nvidia-smi fine; `check` said only
"CUDA did not initialise" and sent the user to `explain`, which then blamed the batch size."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from fakes.system import FakeCmd
from helpers import check, steps
from scenarios import MARK, h200, torch_stages

from explain_sets import SCANNER, SIGS, answer
from cudadoctor.explain import rank
from cudadoctor.facts.torch import PROBE_SCRIPT

ERR = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
       "NumCudaDevices() that might have already set an error? Error 2: out of memory")


def torch_under(limits: dict, retry=None) -> FakeCmd:
    out = []
    for line in torch_stages(available=False, count=0, init_error=ERR).splitlines():
        rec = json.loads(line[len(MARK):]) if line.startswith(MARK) else None
        if rec and rec.get("stage") == "python":
            rec["rlimits"] = limits
            line = MARK + " " + json.dumps(rec)
        out.append(line)
        if rec and rec.get("stage") == "cuda" and retry is not None:
            out.append(MARK + " " + json.dumps(dict(retry, stage="limit_retry")))
    return FakeCmd("\n".join(out) + "\n")


def finding(limits: dict, retry=None):
    return steps(check(h200(torch=torch_under(limits, retry))))["torch.cuda"].findings[0]


V16 = 16000000 * 1024  # ulimit -v 16000000, as on the H200
EQUAL = {"made": False, "why": "the hard limits equal the soft ones"}


def test_a_virtual_memory_limit_is_named_with_its_value_and_lifted():
    # the H200's case: `ulimit -v` sets the soft and the hard limit, so the probe cannot prove it
    f = finding({"as": V16, "data": None}, EQUAL)
    assert f.id == "torch.cuda.address-space-limit" and f.status.value == "fail"
    assert "ulimit -v 16000000 (15.3 GiB)" in f.summary and "could not start CUDA without it" in f.detail
    assert "ulimit -v unlimited" in f.fix.commands and not any("-d" in c for c in f.fix.commands[1:2])


def test_a_limit_the_retry_proves_is_said_to_be_proved():
    f = finding({"as": V16}, {"made": True, "ok": True, "raised": ["RLIMIT_AS"]})
    assert f.id == "torch.cuda.address-space-limit" and "the limit is the cause" in f.detail


def test_a_limit_the_retry_clears_is_not_blamed():
    assert finding({"as": V16}, {"made": True, "ok": False, "raised": ["RLIMIT_AS"],
                                 "error": "RuntimeError: ... out of memory"}).id == "torch.cuda.unavailable"


def test_a_huge_unproved_limit_is_not_named():
    assert finding({"as": 2 * 2**40}, EQUAL).id == "torch.cuda.unavailable"


def test_a_data_limit_alone_is_lifted_alone():
    f = finding({"as": None, "data": 8 * 2**30}, EQUAL)
    assert f.id == "torch.cuda.address-space-limit" and f.fix.commands[1] == "ulimit -d unlimited"


def test_without_a_limit_the_same_error_stays_unexplained_here():
    # the GPU's own memory cannot be ruled out without a limit: torch's words and explain, as before
    assert finding({"as": None, "data": None}).id == "torch.cuda.unavailable"


def test_explain_puts_the_limit_first_for_this_message():
    assert answer(ERR)[:1] == ["out-of-memory"]
    m = next(m for m in rank.rank(rank.matches(SIGS, SCANNER.scan_text(ERR))) if m.id == "out-of-memory")
    assert "ulimit -v" in m.causes[0] and "ulimit -v unlimited" in m.fixes[0]


def test_the_probe_reports_its_own_limits():
    lim = 8 * 2**30

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (lim, resource.getrlimit(resource.RLIMIT_AS)[1]))

    p = subprocess.run([sys.executable, PROBE_SCRIPT, "--no-op"], capture_output=True, text=True, timeout=300,
                       preexec_fn=cap)
    rec = next(json.loads(ln[len(MARK):]) for ln in p.stdout.splitlines() if '"stage": "python"' in ln)
    assert rec["rlimits"]["as"] == lim


def cuda_ok_under(limit: int) -> dict:
    """torch.cuda's findings when CUDA started under a virtual memory limit (the probe's own rlimits)."""
    stages = []
    for line in torch_stages().splitlines():
        if not line.startswith(MARK):
            continue
        rec = json.loads(line[len(MARK):])
        if rec.get("stage") == "python":
            rec["rlimits"] = {"as": limit}
        stages.append(MARK + " " + json.dumps(rec))
    r = steps(check(h200(torch=FakeCmd("\n".join(stages) + "\n"))))["torch.cuda"]
    return {f.id: f.status.value for f in r.findings}


def test_a_limit_below_the_gpus_memory_warns_when_cuda_starts():
    # the H200 under ulimit -v 24G: CUDA started, an 8 GiB allocation failed with 139 GiB free (device runs 3 and 4)
    assert cuda_ok_under(24 * 2**30) == {"torch.cuda.ok": "ok", "torch.cuda.memory-limit": "warn"}


def test_a_limit_above_the_gpus_memory_is_not_judged():
    assert cuda_ok_under(256 * 2**30) == {"torch.cuda.ok": "ok"}
