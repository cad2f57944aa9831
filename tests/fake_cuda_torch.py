"""The real torch probe (cudadoctor/child/torch_probe.py) run in a child against a CPU torch dressed up as a
CUDA torch on an H200, misbehaving the way the real one did on the GPU machine (tests/data/h200x2).

A `sitecustomize` on the child's PYTHONPATH imports this venv's real (CPU-only) torch and patches its CUDA
entry points; tensors stay on the CPU, so the probe's arithmetic and checks really run. Scenarios:

- healthy: everything answers; cuDNN compiled 9.19.0 = runtime 9.19.0.
- alloc: torch.cuda.init() raises the ValueError torch 2.11 raised for
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe; any CUDA call after that kills the interpreter with
  SIGSEGV (as the real one did: c13_alloc_step.txt).
- cudnn: runtime 9.14.0 under compiled 9.19.0; torch.backends.cudnn.version() raises torch's RuntimeError.
- oom / busy: the first tensor.cuda() raises torch.AcceleratorError with the real message.
- segv-matmul: the interpreter dies (SIGSEGV) in the matmul.
- conv: cuDNN's convolution raises CUDNN_STATUS_EXECUTION_FAILED.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudadoctor.facts.torch import PROBE_SCRIPT

DATA = Path(__file__).parent / "data" / "h200x2"


def _verbatim(name: str, start: str) -> str:
    """The error message from a recorded file: the line starting `start` and the lines after it, up to the rc line."""
    lines = (DATA / name).read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if start in line)
    out = []
    for line in lines[i:]:
        if line.startswith("rc=") or (out and " RAISES " in line) or (out and line.startswith("Traceback")):
            break
        out.append(line)
    return "\n".join(out).strip()


def messages() -> dict:
    alloc = _verbatim("c13_alloc_plain.txt", "ValueError:").split(": ", 1)[1]
    cudnn = _verbatim("c13_cudnn_step.txt", "cudnn.version RAISES").split("RuntimeError ", 1)[1]
    oom = _verbatim("c13_oom_plain.txt", "torch.AcceleratorError:").split(": ", 1)[1]
    return {"alloc": alloc, "cudnn": cudnn, "oom": oom,
            "busy": "CUDA error: CUDA-capable device(s) is/are busy or unavailable\n" + oom.split("\n", 1)[1].replace(
                "cudaErrorMemoryAllocation", "cudaErrorDevicesUnavailable")}


SITECUSTOMIZE = r'''
import os, signal, types
import torch

SCEN = os.environ["FAKE_CUDA"]
MSG = {k: os.environ.get("FAKE_CUDA_" + k.upper(), "") for k in ("alloc", "cudnn", "oom", "busy")}
state = {"init_failed": False, "initialized": False, "cuda_calls": 0, "convs": 0}
Err = getattr(torch, "AcceleratorError", RuntimeError)


def crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def lazy_init():
    """torch's lazy CUDA init, run by the first CUDA-initialising call (as torch.cuda._lazy_init)."""
    if state["initialized"]:
        return
    if SCEN == "alloc":
        state["init_failed"] = True
        raise ValueError(MSG["alloc"])
    state["initialized"] = True


def guard():
    if state["init_failed"]:
        crash()  # a CUDA call after torch's lazy init raised: the real interpreter segfaulted here
    lazy_init()


torch.version.cuda = "13.0"
torch._C._cuda_getArchFlags = lambda: "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2


def init():
    guard()


class Props:
    name, major, minor, total_memory, multi_processor_count = "NVIDIA H200", 9, 0, 143155 << 20, 132
    uuid = "3cf3053a-1dca-59d4-1825-812007e0dc7d"


def props(i):
    if not state["init_failed"]:  # after a failed init the real get_device_properties answered (c13_alloc_step.txt)
        lazy_init()
    return Props()


def cuda(self, *a, **k):
    guard()
    state["cuda_calls"] += 1
    if SCEN in ("oom", "busy"):
        raise Err(MSG[SCEN])
    if SCEN == "segv-matmul" and state["cuda_calls"] == 2:
        crash()
    return self


torch.cuda.init = init
torch.cuda.get_device_properties = props
torch.cuda.synchronize = lambda *a, **k: guard()
torch.Tensor.cuda = cuda
torch.backends.cudnn.is_available = lambda: True
torch._C._cudnn = types.SimpleNamespace(getCompileVersion=lambda: (9, 19, 0),
                                        getRuntimeVersion=lambda: (9, 14, 0) if SCEN == "cudnn" else (9, 19, 0))


def cudnn_version():
    if SCEN == "cudnn":
        raise RuntimeError(MSG["cudnn"])
    return 91900


torch.backends.cudnn.version = cudnn_version
real_conv = torch.nn.functional.conv2d


def conv2d(*a, **k):
    state["convs"] += 1
    if SCEN == "conv" and state["convs"] == 1:
        raise RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")
    return real_conv(*a, **k)


torch.nn.functional.conv2d = conv2d
try:
    import torch.cuda.nccl
    torch.cuda.nccl.version = lambda: (2, 28, 9)
except Exception:
    pass
'''


def run_probe(folder: Path, scenario: str, *args: str, env: dict = None) -> subprocess.CompletedProcess:
    """The real probe script in a child whose torch behaves as `scenario`; its stdout and return code."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CUDADOCTOR_", "FAKE_CUDA"))}
    e.update(PYTHONPATH=str(folder), FAKE_CUDA=scenario, **{f"FAKE_CUDA_{k.upper()}": v for k, v in messages().items()})
    e.update(env or {})
    return subprocess.run([sys.executable, PROBE_SCRIPT, *args], env=e, capture_output=True, text=True, timeout=300)
