"""Reading the bench child's marked output back, including what a crashed or killed child left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cudadoctor.child.records import parse_marked

MARK = "@@CUDADOCTOR-BENCH@@"

#: what the child was doing after each record (for a timeout or a crash)
NEXT = {
    "": "starting the interpreter",
    "start": "import torch",
    "import": "CUDA initialisation",
    "device": "the first measurement",
}
NEXT_DRIVER = dict(NEXT, start="loading libcuda.so.1 (cuInit)")


def parse_records(stdout: str) -> list:
    """Every marked JSON record in `stdout`, in order; junk lines and a torn last line are skipped."""
    return parse_marked(stdout, MARK, key="stage")


@dataclass
class BenchRun:
    """What one bench child reported."""

    python: str = ""
    backend: str = "torch"  # "torch" (torch_bench.py) or "driver" (driver_bench.py)
    python_version: str = ""
    env: dict = field(default_factory=dict)
    torch_installed: Optional[bool] = None
    torch_version: str = ""
    torch_cuda: Optional[str] = None
    torch_debug: Optional[bool] = None
    import_error: str = ""
    device: dict = field(default_factory=dict)  # name, capability, total_bytes, l2_bytes, plan, uuid
    measures: dict = field(default_factory=dict)  # id -> record
    errors: dict = field(default_factory=dict)  # id -> error text
    began: list = field(default_factory=list)  # ids of the steps the child started
    done: bool = False
    crash: str = ""
    seconds: Optional[float] = None
    last_stage: str = ""

    @property
    def unfinished(self) -> str:
        """The step the child was in when it stopped ('' when it finished or had not begun one)."""
        return "" if self.done or not self.began else self.began[-1]

    def doing(self) -> str:
        step = self.unfinished
        if step:
            return f"measuring {step}"
        table = NEXT_DRIVER if self.backend == "driver" else NEXT
        return table.get(self.last_stage, f"after {self.last_stage}")


def build_run(records: list) -> BenchRun:
    r = BenchRun()
    for rec in records:
        s = rec.get("stage")
        if s not in ("crash", "done"):
            r.last_stage = s
        if s == "start":
            r.python = rec.get("python") or ""
            r.python_version = rec.get("version") or ""
            r.env = dict(rec.get("env") or {})
            r.backend = rec.get("backend") or "torch"
        elif s == "import":
            r.torch_installed = bool(rec.get("installed"))
            if rec.get("installed") is False and not rec.get("not_found"):
                r.torch_installed = True  # present but broken
            r.import_error = rec.get("error") or ""
            r.torch_version = rec.get("version") or ""
            r.torch_cuda = rec.get("cuda")
            r.torch_debug = rec.get("debug")
        elif s == "device":
            r.device = {k: v for k, v in rec.items() if k != "stage"}
        elif s == "begin":
            r.began.append(str(rec.get("id", "")))
        elif s == "measure" and rec.get("id"):
            r.measures[str(rec["id"])] = rec
        elif s == "error" and rec.get("id"):
            r.errors[str(rec["id"])] = str(rec.get("error", ""))
        elif s == "done":
            r.done = True
            r.seconds = rec.get("seconds")
        elif s == "crash":
            r.crash = str(rec.get("error", ""))
    return r
