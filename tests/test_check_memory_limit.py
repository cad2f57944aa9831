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


def torch_under(limits: dict) -> FakeCmd:
    out = []
    for line in torch_stages(available=False, count=0, init_error=ERR).splitlines():
        rec = json.loads(line[len(MARK):]) if line.startswith(MARK) else None
        if rec and rec.get("stage") == "python":
            rec["rlimits"] = limits
            line = MARK + " " + json.dumps(rec)
        out.append(line)
    return FakeCmd("\n".join(out) + "\n")


def finding(limits: dict):
    return steps(check(h200(torch=torch_under(limits))))["torch.cuda"].findings[0]


def test_a_virtual_memory_limit_is_named_with_its_value_and_lifted():
    f = finding({"as": 16000000 * 1024, "data": None})
    assert f.id == "torch.cuda.address-space-limit" and f.status.value == "fail"
    assert "ulimit -v 16000000 (15.3 GiB)" in f.summary
    assert "ulimit -v unlimited; ulimit -d unlimited" in f.fix.commands


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
