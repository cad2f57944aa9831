"""Issue 17's miss kinds: root cause first, context that pins the environment, words other than the
usual ones, never an empty answer; and the mechanisms behind them (unless, alternatives, gate)."""

from __future__ import annotations

import pytest

from cudadoctor.explain import rank, signatures, versions
from explain_sets import SCANNER, SIGS, answer


def ids(text: str) -> list:
    return answer(text, strict=True)


IMA_UNDER_NCCL = (
    "[rank3]:[E ProcessGroupNCCL.cpp:1414] [PG 2 Rank 3] Process group watchdog thread terminated with exception: "
    "CUDA error: an illegal memory access was encountered\n"
    "[rank0]:[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
    "OpType=ALLREDUCE) ran for 600060 milliseconds before timing out.\n")
NCCL_WITH_PLUGIN_PROBE = (
    "host:1:1 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open "
    "shared object file: No such file or directory\n"
    "host:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]\n"
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error, "
    "NCCL version 2.14.3\n")


@pytest.mark.parametrize("text,first", [
    # an NCCL abort after an illegal memory access: the fault is the cause
    (IMA_UNDER_NCCL, "illegal-memory-access"),
    # NCCL's probe of optional plugins is not a missing library
    (NCCL_WITH_PLUGIN_PROBE, "nccl"),
    # out of memory inside WSL: WSL's pinned-memory / VM limit
    ("RuntimeError: CUDA error: out of memory\nrunning under WSL2 Ubuntu 22.04, pin_memory=True\n", "wsl"),
    # CUDA_VISIBLE_DEVICES pointing past the GPUs, worded as "no device"
    ("CUDA_VISIBLE_DEVICES=3 python train.py\nRuntimeError: CUDA error: no CUDA-capable device is detected\n",
     "visible-devices"),
    # the container CLI names the driver requirement
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown.", "driver-too-old"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "container-toolkit"),
    ("$ docker run -it --rm ghcr.io/x/app:cuda\n/app: error while loading shared libraries: libcuda.so.1: cannot open "
     "shared object file: No such file or directory\n", "container-toolkit"),
    # Windows' TDR wording: a reset while a kernel runs past the watchdog is the launch timeout ...
    ("Display driver nvlddmkm stopped responding and has successfully recovered.\nraising TdrDelay fixed it\n",
     "launch-timeout"),
    # ... without timeout evidence it is a lost device
    ("Display driver nvlddmkm stopped responding and has successfully recovered.\n", "device-lost"),
    # profilers other than Nsight
    ("WARNING: perf_event_paranoid = 4, CPU sampling is not available", "profiler-permission"),
    ("Error: function (*cuptiProfilerBeginSessionPtr)(&beginSessionParams) failed with error 35.",
     "profiler-permission"),
    # bitsandbytes' own words
    ("CUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching in backup paths...",
     "missing-shared-library"),
    # a CPU-only torch in other words
    ("PyTorch version: 2.2.2+cpu\nIs CUDA available: False", "torch-cpu-only"),
    ("CUDA used to build PyTorch: Could not collect\nIs CUDA available: False", "torch-cpu-only"),
    ("`pip install torch` resulted in the CPU version of torch", "torch-cpu-only"),
    # TensorFlow's words for a cuDNN mismatch
    ("E cuda_dnn.cc:522] Loaded runtime CuDNN library: 9.1.0 but source was compiled with: 9.3.0.",
     "cudnn-version-mismatch"),
    # a bare error code
    ("cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient", "driver-too-old"),
    ("Warp CUDA error: Failed to get driver entry point 'cuInit' (CUDA error 34)", "cuda-stub-library"),
    ("RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable", "device-busy"),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
     "'spawn' start method", "cuda-fork"),
    # older torch words for the same thing, CUDA used in a DataLoader transform
    ("used a GPU model inside the DataLoader transform\nRuntimeError: cuda runtime error (3) initialization error at "
     "THCStorage.c:55", "cuda-fork"),
])
def test_root_cause_first(text, first):
    assert ids(text)[:1] == [first], ids(text)


def test_unless_keeps_a_container_that_got_the_gpu_out():
    base = "libcuda.so.1: cannot open shared object file: No such file or directory\n"
    assert ids("$ docker run --rm img\n" + base)[:1] == ["container-toolkit"]
    assert "container-toolkit" not in ids("$ docker run --gpus all --rm img\n" + base)


def test_wsl_as_a_word_not_inside_another():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert ids(oom + "wslink 1.3.0 pypi_0 pypi\n")[:1] == ["out-of-memory"]
    assert ids(oom + "Ubuntu under WSL2\n")[:1] == ["wsl"]
    smi = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert ids("Ubuntu app WSL: nvidia-smi\n" + smi)[:1] == ["wsl"]
    assert ids(smi)[:1] == ["no-driver-or-device"]
    # nvidia-container-cli's debug log names WSL on plain Linux too
    log = "nvc.c:395] dxcore initialization failed, continuing assuming a non-WSL environment\n"
    assert "wsl" not in ids(log + smi)


COLLECT_ENV = ("PyTorch version: 1.6.0\nCUDA used to build PyTorch: 10.2\nIs CUDA available: No\n"
               "| NVIDIA-SMI 418.67       Driver Version: 418.67       CUDA Version: 10.1     |\n")


def test_gate_reads_versions_a_report_shows():
    assert ids(COLLECT_ENV)[:1] == ["driver-too-old"]
    # CUDA 11+ minor version compatibility: a cu121 build runs on a 12.2 driver, and on 12.0 too
    assert "driver-too-old" not in ids("PyTorch version: 2.1.0+cu121\n| Driver Version: 535.1  CUDA Version: 12.2 |")
    assert "driver-too-old" not in ids("torch==2.1.0+cu121\n| Driver Version: 525.60  CUDA Version: 12.0 |")
    assert ids("torch==2.4.0+cu124\n| Driver Version: 470.82  CUDA Version: 11.4 |")[:1] == ["driver-too-old"]
    # the capture-only patterns never make a match on their own
    assert ids("| NVIDIA-SMI 535.1  Driver Version: 535.1  CUDA Version: 12.2 |") == []


@pytest.mark.parametrize("text,want", [("12.4", (12, 4)), ("cu118", (11, 8)), ("102", (10, 2)), ("cu90", (9, 0)),
                                       ("13.0.1", (13, 0)), ("x", None)])
def test_cuda_version(text, want):
    assert versions.cuda_version(text) == want


@pytest.mark.parametrize("needs,has,old", [("12.4", "12.2", False), ("12.1", "11.4", True), ("10.2", "10.1", True),
                                           ("10.1", "10.2", False), ("11.8", "12.0", False), ("?", "12.0", False)])
def test_driver_too_old_rule(needs, has, old):
    assert versions.driver_too_old(needs, has) is old


def test_never_an_empty_answer():
    # nothing matches: the closest causes, low confidence
    text = "my cuda kernel image looks odd"
    found = rank.matches(SIGS, SCANNER.scan_text(text))
    assert found == []
    guesses = rank.fallback(SIGS, found, text)
    assert 1 <= len(guesses) <= rank.FALLBACK_LIMIT
    assert all(0 < conf <= rank.GUESS_MAX for conf, _ in guesses)
    assert answer(text)[:1] == ["no-kernel-image"]
    # a weak match: what it is usually confused with comes next (data: alternatives)
    weak = "torch.cuda.is_available() returns False"
    assert answer(weak)[:3] == ["torch-cpu-only", "driver-too-old", "no-driver-or-device"]
    # a strong match keeps its place; the alternatives only fill the answer behind it
    strong = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert answer(strong)[0] == "no-driver-or-device" and "driver-install" in answer(strong)[:3]


def test_alternatives_name_known_ids():
    known = {s.id for s in SIGS}
    for s in SIGS:
        assert set(s.alternatives) <= known and s.id not in s.alternatives, s.id


def test_bad_gate_is_rejected():
    base = {"id": "x", "title": "t", "layer": "l", "priority": 1, "meaning": "m", "causes": ["c"],
            "confirm": ["c"], "fixes": ["f"], "pattern": [{"contains": ["x"]}], "gate": {"needs": "a"}}
    with pytest.raises(signatures.SignatureError, match="gate"):
        signatures.parse(base, "x.toml")
