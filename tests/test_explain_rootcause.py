"""Issue 17's miss kinds: root cause first, context that pins the environment, words other than the
usual ones, never an empty answer; and the mechanisms behind them (unless, alternatives, gate)."""

from __future__ import annotations

import sys
from unittest import mock
from pathlib import Path

import pytest

from cudadoctor.explain import learned, rank, scan, signatures, versions
from explain_sets import SCANNER, SIGS, answer, named_cases

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


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
    # (session 25) cuDNN's "Could not load library" gives its reason on the line: a library that did not link is an
    # undefined symbol, one not found is a missing library
    ("Could not load library libcudnn_cnn_infer.so.8. Error: /opt/cuda/8.0/lib64/libnvrtc.so: undefined symbol: "
     "nvrtcGetCUBIN", "undefined-symbol"),
    ("Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_ops_infer.so.8: cannot open shared object file: "
     "No such file or directory", "missing-shared-library"),
    # (round 17b) a Mac asked for CUDA: no torch for macOS has it, whatever the app's own message says
    ("Your PyTorch installation is not configured to use CUDA.\nI am trying to run this repo on a Macbook Pro (macOS "
     "Mojave)", "torch-cpu-only"),
    # ... a hint: an error line of another cause still leads
    ("building paddle on Mac OS to use CUDA\nOSError: libcudnn.so.8: cannot open shared object file: No such file or "
     "directory", "missing-shared-library"),
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
    oom = "RuntimeError: CUDA error: out of memory\n"
    assert ids(oom + "wslink 1.3.0 pypi_0 pypi\n")[:1] == ["out-of-memory"]
    assert ids(oom + "Ubuntu under WSL2\n")[:1] == ["wsl"]
    # the caching allocator's own OOM is the GPU's memory, also under WSL: WSL is the differential, not the cause
    # (WSL's limits show as pinned/host allocation failures or a "Killed" load)
    alloc = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert answer(alloc + "Ubuntu under WSL2\n")[:2] == ["out-of-memory", "wsl"]
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
    # a text with no word the guesses read (another script): the usual causes of an unused GPU, at a low confidence
    nothing = "我的显卡不能用了，怎么办"
    assert rank.matches(SIGS, SCANNER.scan_text(nothing)) == []
    assert answer(nothing) == ["torch-cpu-only", "driver-too-old", "no-driver-or-device"]
    assert all(conf < 0.1 for conf, _ in rank.fallback(SIGS, [], nothing))
    # a weak match: the classifier's likeliest other causes come next (learned.py), and without it what the match is
    # usually confused with (data: alternatives)
    weak = "torch.cuda.is_available() returns False"
    assert answer(weak)[0] == "torch-cpu-only" and len(answer(weak)) == 3
    with mock.patch.object(learned, "guess", return_value=[]):
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


# ---- round 3 (tests/data/explain_dev2): wordings that hide their cause, and their differential

ROUND3_WORDINGS = [
    # a driver API entry point missing from libcuda: the driver is older than the program's CUDA
    ('msg="unable to load cuda driver library" library=/usr/lib64/libcuda.so.460.106.00 error="symbol lookup for '
     'cuCtxCreate_v3 failed: /usr/lib64/libcuda.so.460.106.00: undefined symbol: cuCtxCreate_v3"', "driver-too-old"),
    # CUDA_ERROR_UNKNOWN after a suspend is the driver's state, not a lost GPU
    ("After waking from suspend:\npanic: CUDA_ERROR_UNKNOWN\ngithub.com/mumax/3/cuda/cu.CtxCreate(0x2, 0x0)",
     "no-driver-or-device"),
    ("CUDA error DRIVER: '999' in func 'run_single_stream' line 978", "device-lost"),
    # "no kernel image" inside torch's own THC code: torch lacks the arch (a source build without it)
    ("THCudaCheck FAIL file=/home/u/pytorch/aten/src/THC/generic/THCTensorMath.cu line=244 error=48 : no kernel image "
     "is available for execution on the device", "torch-arch-unsupported"),
    ("[yolo_decode.cu:122]:launch failed: no kernel image is available for execution on the device", "no-kernel-image"),
    # the container CLI passing on the host driver's own answer
    ("stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
     "no-driver-or-device"),
    ("stderr: nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
     "object file: no such file or directory: unknown.", "container-toolkit"),
    ("$ docker build .\nNo CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'", "container-toolkit"),
    ("/usr/include/c++/11/bits/std_function.h:435:145: error: parameter packs not expanded with '...':",
     "host-compiler-unsupported"),
    ("RuntimeError: Library cublas64_12.dll is not found or cannot be loaded", "missing-shared-library"),
    ("CMake Error at CMakeLists.txt:3 (project):\n  No CMAKE_CUDA_COMPILER could be found.", "cuda-home-missing"),
    ("include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-250a (size 9637888)", "nccl"),
    ("cuDNN error: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", "cudnn-version-mismatch"),
    ("llama_model_load: error loading model: unable to allocate backend buffer", "out-of-memory"),
    ("torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: device >= 0 && device < "
     "num_gpus INTERNAL ASSERT FAILED", "visible-devices"),
    ("lspci -k\n08:00.0 3D controller: NVIDIA Corporation GK208M\n\tKernel driver in use: nouveau", "no-driver-or-device"),
    ("modprobe: FATAL: Module nvidia not found in directory /lib/modules/5.15.0-91-generic", "driver-install"),
]


@pytest.mark.parametrize("text,top3", [
    # tools that only say CUDA could not be asked: no driver, an old driver, a module that did not load
    ("Unable to query number of CUDA devices! Is an nVidia driver installed?",
     ["no-driver-or-device", "driver-too-old", "driver-install"]),
    # error 100: the driver answered and shows no GPU, so the environment hides it
    ("failed call to cuInit: CUDA_ERROR_NO_DEVICE", ["no-driver-or-device", "visible-devices", "container-toolkit"]),
    # the driver itself does not answer: its install
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
     ["no-driver-or-device", "driver-install", "container-toolkit"]),
    ("ERROR: cuStreamSynchronize() 999", ["device-lost", "launch-timeout", "no-driver-or-device"]),
])
def test_a_wording_brings_its_own_differential(text, top3):
    with mock.patch.object(learned, "guess", return_value=[]):  # the data alone (a weak match also asks learned.py)
        assert answer(text)[:3] == top3
    assert answer(text)[0] == top3[0]


def test_pattern_alternatives_come_before_the_signatures():
    m = rank.matches(SIGS, SCANNER.scan_text("Is an nVidia driver installed?"))[0]
    assert m.id == "no-driver-or-device"
    assert m.alternatives[:2] == ("driver-too-old", "driver-install")
    assert set(m.signature.alternatives) <= set(m.alternatives) and m.id not in m.alternatives


def test_every_signature_names_a_differential_so_an_answer_has_three_causes():
    for s in SIGS:
        assert len(s.alternatives) >= 2, s.id
        for p in s.patterns:
            assert s.id not in p.alternatives, s.id


def test_pattern_alternatives_must_name_known_ids(tmp_path):
    (tmp_path / "x.toml").write_text(
        'id = "x"\ntitle = "t"\nlayer = "l"\npriority = 1\nmeaning = "m"\ncauses = ["c"]\nconfirm = ["c"]\n'
        'fixes = ["f"]\n[[pattern]]\ncontains = ["x"]\nalternatives = ["nope"]\n')
    with pytest.raises(signatures.SignatureError, match="unknown ids"):
        signatures.load_dir(tmp_path)


def test_few_shared_words_still_give_three_causes():
    # only one signature shares words with this text: the classifier's guesses, or without it that signature's
    # differential, fill the answer
    text = "[drm:nv_drm_master_set] *ERROR* [nvidia-drm] [GPU ID 0x00000100] Failed to grab modeset ownership"
    assert rank.matches(SIGS, SCANNER.scan_text(text)) == []
    assert answer(text)[0] == "driver-install" and len(answer(text)) == 3
    with mock.patch.object(learned, "guess", return_value=[]):
        assert answer(text) == ["driver-install", "no-driver-or-device", "nvml-driver-mismatch"]


ROUND3_MORE_WORDINGS = [
    ("W tensorflow/stream_executor/cuda/cuda_driver.cc:269] failed call to cuInit: UNKNOWN ERROR (303)",
     "no-driver-or-device"),
    ("IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion `index out of bounds` failed.",
     "illegal-memory-access"),
]


# Round 4 (issue 17): wordings and context from round 3's fresh set, once it had been scored (in-sample now)
ROUND4_WORDINGS = [
    # "CUDA is not available" in a Docker image / compose set-up: the container got no GPU
    ("CUDA not found in docker image\nI pulled the official docker image but torch.cuda.is_available() = False.",
     "container-toolkit"),
    # ... the same on Colab: a runtime without a GPU
    ("AssertionError: CUDA is not available\nBug report for Colab: http://colab.research.google.com/", "no-driver-or-device"),
    # CUDNN_STATUS_EXECUTION_FAILED from a torch built for CUDA 10 (no sm_86 kernels)
    ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED\nmy environment: pytorch: 1.5.1+cu101", "torch-arch-unsupported"),
    # cudaErrorInitializationError in DataLoader workers, older torch's and c10's words
    ("Getting Cuda error (3): initialization error\nDataLoader(dataset, num_workers=2)", "cuda-fork"),
    ("terminate called after throwing an instance of 'c10::CUDAError' initialization error\nonly with num_workers > 0",
     "cuda-fork"),
    ("Timeout waiting for RPC from GSP!", "xid-event"),
    ("OSError: libcublas.so.11: symbol free_gemm_select version libcublasLt.so.11 not defined in file "
     "libcublasLt.so.11 with link time reference", "undefined-symbol"),
    ("training freezes with 4 GPUs; it works when I set NCCL_P2P_DISABLE=1", "nccl"),
    ("_find_cuda_home() picks the nvcc on PATH (CUDA 10.1) and _check_cuda_version() errors out", "nvcc-torch-mismatch"),
    # the nvcc in the report is not torch's CUDA: a hint (gate), when nothing else is named
    ("pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/cu118\n"
     "Cuda compilation tools, release 11.5, V11.5.119\nninja: build stopped: subcommand failed.", "nvcc-torch-mismatch"),
    ("NVIDIA driver lost after os upgrade and reboot\nrun nvidia-smi: cannot communicate with the driver", "driver-install"),
    ("Downloading torch-1.7.1-cp38-cp38-win_amd64.whl (184.0 MB)\nSuccessfully installed torch-1.7.1\n"
     "CUDA is not available", "torch-cpu-only"),
    ("The latest nvidia-container-toolkit caused inconsistent cuda version and 804 error.", "forward-compat"),
    ("GPU becomes unavailable after some time in Docker container\nnvidia-smi inside the container fails",
     "nvml-unknown-error"),
    ("RuntimeError: No CUDA GPU available", "visible-devices"),
]


ROUND4_WORDINGS_DO_NOT_OVERREACH = [
    # the container was given the GPU: not the toolkit
    ("docker run --gpus all img\ntorch.cuda.is_available() returns False", "container-toolkit"),
    # a CPU wheel named in the container report is the CPU wheel
    ("docker image with torch 2.1.0+cpu\ntorch.cuda.is_available() returns False", "container-toolkit"),
    # an initialization error with no worker process in sight is not a fork
    ("RuntimeError: CUDA error: initialization error", "cuda-fork"),
    # a CUDA wheel for Windows is not the CPU wheel
    ("Downloading torch-2.1.0+cu118-cp310-cp310-win_amd64.whl\nCUDA is not available", "torch-cpu-only"),
    # an nvcc that matches torch's CUDA is no mismatch
    ("torch 2.1.0+cu118\nCuda compilation tools, release 11.8, V11.8.89\nninja: build stopped", "nvcc-torch-mismatch"),
]


@pytest.mark.parametrize("needs,has,diff", [("cu118", "11.5", True), ("cu118", "11.8", False), ("12.1", "11.8", True),
                                            ("x", "11.8", False)])
def test_differs_rule(needs, has, diff):
    assert versions.differs(needs, has) is diff


@pytest.mark.parametrize("text,want", [("cu121", "12.1"), ("12.4", "12.4"), ("102", "10.2"), ("junk", "junk")])
def test_versions_are_shown_as_people_write_them(text, want):
    assert versions.pretty(text) == want


def test_gate_notes_show_versions_not_wheel_tags():
    from cudadoctor.explain import personal

    def notes(text: str, sig: str) -> list:
        found = {m.id: m for m in rank.matches(SIGS, SCANNER.scan_text(text))}
        return personal.personalise(found[sig], {}, personal.load_matrix()).notes

    assert any("built for CUDA 12.1 and a driver that runs CUDA up to 11.4" in n for n in notes(
        "torch 2.3.0+cu121\nCUDA Version: 11.4\n", "driver-too-old"))
    assert any("torch built for CUDA 11.8 and nvcc 11.5" in n for n in notes(
        "torch 2.1.0+cu118\nCuda compilation tools, release 11.5, V11.5.119\n", "nvcc-torch-mismatch"))


# Round 4, from the round-4 tuning set (tests/data/explain_dev3)
ROUND4_TUNING_SET_WORDINGS = [
    # torch's "Found no NVIDIA driver" in a docker-compose run: the container was given no GPU
    ("$ docker-compose run generate\nRuntimeError: Found no NVIDIA driver on your system. Please check that you "
     "have an NVIDIA GPU and installed a driver", "container-toolkit"),
    ("Fatal CUDNN_NOT_SUPPORTED error.", "cublas-cudnn-status"),
    ("Assertion `t >= 0 && t < n_classes` failed.", "illegal-memory-access"),
    ("[Bug]: ncclAllReduce deadlocks on 2x RTX 5880 Ada (PCIe PHB topology, no NVLink)", "nccl"),
    ("collab section isnt working, it is asking for Nvidia driver", "no-driver-or-device"),
    ("Torch does not have CUDA\nthe update dumbed down torch to no cuda", "torch-cpu-only"),
]


ROUND4_TUNING_SET_WORDINGS_DO_NOT_OVERREACH = [
    # the container got the GPU: a missing driver is the host's
    ("docker run --gpus all img\nRuntimeError: Found no NVIDIA driver on your system.", "container-toolkit"),
    # a hang that does not name NCCL is not NCCL's
    ("the training hangs after epoch 3 on one GPU", "nccl"),
]


# Round 4: CUDA's own error names (driver API CUDA_ERROR_*, runtime cudaError*, the math libraries' status
# codes) for causes the signatures already cover, from NVIDIA's error enums rather than from any report
CUDA_ERROR_NAMES = [
    ("cudaErrorInvalidDeviceFunction: invalid device function", "no-kernel-image"),
    ("CUDA_ERROR_ILLEGAL_INSTRUCTION: an illegal instruction was encountered", "illegal-memory-access"),
    ("CUDA_ERROR_MISALIGNED_ADDRESS", "illegal-memory-access"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "xid-event"),
    ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "cublas-cudnn-status"),
    ("CURAND_STATUS_LAUNCH_FAILURE", "cublas-cudnn-status"),
    ("CUDNN_STATUS_ARCH_MISMATCH", "cublas-cudnn-status"),
    ("CUDA driver error: device not ready", "launch-timeout"),
]


def test_arch_mismatch_offers_the_arch_causes_next():
    assert answer("CUDNN_STATUS_ARCH_MISMATCH")[1:3] == ["torch-arch-unsupported", "no-kernel-image"]


# Round 4, from the second tuning set (tests/data/explain_dev4)
ROUND4_SECOND_TUNING_SET_WORDINGS = [
    ("CUDA error: Insufficient CUDA driver: 9020", "driver-too-old"),
    ("nvidia-docker | Error: unsupported CUDA version: driver 7.5 < image 8.0", "driver-too-old"),
    # the only GPU is not NVIDIA's
    ("[ERROR] Cuda device not available\nMy machine is running Linux Mint with an AMD Radeon RX 7900 XTX.",
     "no-driver-or-device"),
    ("I'm using a Rx7900xt from AMD\nCUDA failure 35: CUDA driver version is insufficient for CUDA runtime version",
     "no-driver-or-device"),
    ("CUDA: Not detected: Failed to open dynamic library 'nvcuda.dll': The specified module could not be found.",
     "no-driver-or-device"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount()\nHardware: AWS p4d.24xlarge (8 A100's)", "fabric-manager"),
    ("transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'", "fabric-manager"),
    ("PC cold boots during the MNIST example on the GPU; it appears to be caused by an undersized PSU", "device-lost"),
    ("Check failed: CUDA_SUCCESS == dynload::cuCtxSetCurrent(context) (0 vs. 216)", "device-busy"),
    ("If you only have one GPU, the setup gives: cuda runtime error (38) : no CUDA-capable device is detected",
     "visible-devices"),
    ("error: command '/usr/local/cuda/bin/nvcc' failed with exit status 2", "nvcc-torch-mismatch"),
    ("unable to execute '/usr/local/cuda:/usr/local/cuda-9.0/bin/nvcc': No such file or directory", "cuda-home-missing"),
    ("Screen goes black - CUDA_ERROR_UNKNOWN\nNote: GPU is also driving the display.", "launch-timeout"),
    # GSP timeouts and memory errors are Xid events, not a lost GPU
    ("NVRM: Xid (PCI:0000:0b:00): 119, pid=1, Timeout after 45s of waiting for RPC response from GPU3 GSP!", "xid-event"),
    ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An uncorrectable double bit error (DBE) has been detected", "xid-event"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", "device-lost"),
]


ROUND4_SECOND_TUNING_SET_WORDINGS_DO_NOT_OVERREACH = [
    # an AMD CPU next to an NVIDIA GPU is no missing GPU
    ("AMD Ryzen 9 5950X, GeForce RTX 3090\nRuntimeError: CUDA error: out of memory", "no-driver-or-device"),
    # an AMD GPU driven through ROCm is not a CUDA question
    ("torch on ROCm with a Radeon RX 7900 XTX: HIP error: invalid device function", "no-driver-or-device"),
    # nvcuda.dll named without failing to load
    ("Loaded nvcuda.dll version 546.33", "no-driver-or-device"),
]


def test_a_blank_screen_is_only_a_hint():
    # weak: a lost GPU's words rank above it
    assert answer("CUDA error = 999 at main.cu:196\n(Also my screen goes black for a second)")[:2] == [
        "device-lost", "launch-timeout"]


def test_keywords_only_steer_guesses():
    # round 4: a report with no error text, only the words its cause is described in
    text = "mining rig: the card is not seen when plugged through a riser, fine on the motherboard slot"
    assert ids(text) == []  # keywords never make a match
    assert answer(text)[:1] == ["device-lost"], answer(text)


def test_every_signature_has_keywords():
    for s in SIGS:
        assert s.keywords and all(k == k.lower() for k in s.keywords), s.id


# After round 4's blind set was scored (its misses read; in-sample since)
AFTER_ROUND4_BLIND_SCORING = [
    # an explicit CUDA error code names the mechanism, even in a Docker report
    ("torch.cuda.is_available() return False in latest docker image\nError 804: forward compatibility was attempted on "
     "non supported HW", "forward-compat"),
    ("module 'torch._C' has no attribute '_cuda_setDevice'", "torch-cpu-only"),
    ("FATA[0000] Failed to watch metrics: Error watching fields: Host engine is running as non-root.", "profiler-permission"),
    ("Windows: A TDR has been detected? Volume rendering closes the application", "launch-timeout"),
    ("model = torch.nn.DataParallel(model, device_ids=cfg.GPUS).cuda()\nAssertionError: Invalid device id",
     "visible-devices"),
    ("celery worker: cuda runtime error (3) : initialization error at cutorch/init.c:720", "cuda-fork"),
    ("Unable to find cuda lib under the names [\"cuda\", \"nvcuda\"] on WSL", "wsl"),
    ("Ollama Docker - Failing to use GPU after idle time\nnvcuda failed to get primary device context 800",
     "nvml-unknown-error"),
]


# After the round-5 blind set (tests/data/explain_fresh4) was scored once (in-sample since)
AFTER_ROUND5_BLIND_SCORING = [
    ("NVML ERROR: RM has detected an NVML/RM version mismatch.", "nvml-driver-mismatch"),
    ("nvidia-container-cli: initialization error: cuda error: forward compatibility was attempted on non supported HW"
     "\nerror 804", "forward-compat"),
    ("/root/drivers/NVIDIA-Linux-x86_64-384.111/kernel/common/inc/nv-mm.h:44:9: error: too many arguments to function "
     "'get_user_pages'", "driver-install"),
    ("Error after installation - Nvidia kernel module missing", "driver-install"),
    ("Error using gpuDevice (line 26)\nInvalid CUDA device id: 2. Select a device id from the range 1:1.",
     "visible-devices"),
    ("I ran cuda.cuDeviceGetCount(ct.byref(nGpus)), it returns 34, but the nGpus.value remains 0.", "cuda-stub-library"),
    ("xmr-stak: [CUDA] Error gpu 0: <C:/xmr-stak-master/xmrstak/backend/nvidia/nvcc_code/cuda_extra.cu>:265",
     "launch-timeout"),
]


@pytest.mark.parametrize("text,not_first", [
    # a PSU listed in a spec is no power fault
    ("System: RTX 3090, PSU 1000W, Ryzen 9\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "device-lost"),
    # "one GPU" in passing is no script asking for a second one
    ("RuntimeError: CUDA error: no CUDA-capable device is detected\nI have one GPU, a GTX 1060; nvidia-smi says it "
     "could not communicate with the driver", "visible-devices"),
])
def test_round4_context_words_do_not_hijack_other_causes(text, not_first):
    assert answer(text)[:1] != [not_first], answer(text)


# A review of round 4's patterns (realistic reports where a context or prose pattern put a wrong cause first).
# Context and prose patterns are hints: they never displace another cause's error line.
A_HINT_NEVER_DISPLACES_ANOTHER_CAUSES_ERROR_LINE = [
    ("After apt upgrade, nvidia-smi says: Failed to initialize NVML: Driver/library version mismatch",
     "nvml-driver-mismatch"),
    ("After a kernel update I reinstalled the nvidia driver and nvidia-smi works now, but training fails: "
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("Google Colab, installed torch nightly cu128:\nUserWarning: CUDA initialization: The NVIDIA driver on your "
     "system is too old (found version 12020)", "driver-too-old"),
    ("Running in colab with the NVIDIA driver 535 / T4\nRuntimeError: CUDA error: an illegal memory access was "
     "encountered", "illegal-memory-access"),
    ("Kaggle notebook, GPU P100 accelerator enabled. torch.__version__ 2.1.2+cpu, torch.cuda.is_available() returns "
     "False", "torch-cpu-only"),
    ("GPU: RTX 3090, torch==2.1.2+cu121, driver 535\nRuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when "
     "calling cublasGemmEx", "cublas-cudnn-status"),
    ("AWS p4d.24xlarge\nRuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility "
     "was attempted on non supported HW", "forward-compat"),
    ("NVIDIA A100-SXM4-40GB\nRuntimeError: Unexpected error from cudaGetDeviceCount(). Error 2: out of memory",
     "out-of-memory"),
    ("In my docker container the training runs fine but after a while GPU memory is not available any more:\n"
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "out-of-memory"),
    ("k8s pod: torch.cuda.is_available() returns False\nUserWarning: CUDA initialization: The NVIDIA driver on your "
     "system is too old (found version 11040)", "driver-too-old"),
    ("WSL2 Ubuntu: Could not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open "
     "shared object file", "missing-shared-library"),
    ("Xorg is using 300MiB, the GPU is also used for display\ntorch.cuda.OutOfMemoryError: CUDA out of memory.",
     "out-of-memory"),
    ("PSU: EVGA 1600W (no issues)\nRuntimeError: CUDA error: an illegal memory access was encountered",
     "illegal-memory-access"),
    ("torch +cu121, Cuda compilation tools, release 12.3\n#error -- unsupported GNU version! gcc versions later than "
     "12 are not supported!\nerror: command '/usr/local/cuda/bin/nvcc' failed with exit status 1",
     "host-compiler-unsupported"),
    ("Laptop: Intel Iris Xe + NVIDIA T550 Laptop GPU\ntorch.cuda.OutOfMemoryError: CUDA out of memory", "out-of-memory"),
    ("our cluster sets GPUs to exclusive mode\ntorch.cuda.OutOfMemoryError: CUDA out of memory", "out-of-memory"),
    ("Using cached torch-2.2.1-cp311-cp311-win_amd64.whl.metadata\nRuntimeError: CUDA error: device-side assert "
     "triggered", "illegal-memory-access"),
    ("conda's pytorch doesn't include cuda runtime?\nImportError: libcudnn.so.8: cannot open shared object file: No "
     "such file or directory", "missing-shared-library"),
]


def test_hints_rank_after_direct_matches_and_do_not_use_explains(tmp_path):
    for name, extra in (("a", 'explains = ["b"]\n'), ("b", "")):
        (tmp_path / f"{name}.toml").write_text(
            f'id = "{name}"\ntitle = "t"\nlayer = "l"\npriority = {90 if name == "a" else 10}\nmeaning = "m"\n'
            f'causes = ["c"]\nconfirm = ["c"]\nfixes = ["f"]\nalternatives = ["{"b" if name == "a" else "a"}", '
            f'"{"b" if name == "a" else "a"}"]\n{extra}'
            f'[[pattern]]\ncontains = ["{name}word"]\nweight = 0.9\n' + ("hint = true\n" if name == "a" else ""))
    sigs = signatures.load_dir(tmp_path)
    found = rank.matches(sigs, scan.Scanner(sigs).scan_text("aword bword"))
    assert [m.id for m in found] == ["b", "a"]  # a is a hint: below b's line despite priority and explains
    assert not found[1].direct and found[0].direct
    with pytest.raises(signatures.SignatureError, match="hint"):
        (tmp_path / "b.toml").write_text((tmp_path / "b.toml").read_text() + 'hint = "yes"\n')
        signatures.load_dir(tmp_path)


NVIDIA_ENUM_WORDINGS = [
    # session 21, from NVIDIA's own enums and messages (cuda.h CUresult, nvml.h nvmlReturn_t), not from a set
    ("cuCtxCreate failed: CUDA_ERROR_DEVICE_UNAVAILABLE (46)", "device-busy"),
    ("RuntimeError: CUDA error: uncorrectable NVLink error was detected during the execution", "device-lost"),
    ("cudaErrorNvlinkUncorrectable", "device-lost"),
    ("nvmlInit failed: NVML_ERROR_DRIVER_NOT_LOADED", "no-driver-or-device"),
    ("UserWarning: CUDA initialization: NVIDIA driver on your system is too old (found version 10010)",
     "driver-too-old"),
]


def test_a_modprobe_failure_is_never_left_without_a_guess():
    # no signature matches: the classifier (learned.py) says no driver loaded, the hand-written guess the install
    got = answer("Failed to run `modprobe nvidia`")
    assert len(got) == 3 and "driver-install" in got[:2]
    with mock.patch.object(learned, "guess", return_value=[]):
        assert answer("Failed to run `modprobe nvidia`")[:1] == ["driver-install"]


DRIVER_MESSAGES_FROM_THE_RUNTIME_AND_THE_KERNEL_MODULE = [
    ("RuntimeError: CUDA error: API call is not supported in the installed CUDA driver", "driver-too-old"),
    ("NVRM: The NVIDIA GeForce GT 730 GPU installed in this system is not supported by the 535.54.03 NVIDIA Linux "
     "driver release.\nnvidia-smi: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
     "driver-install"),
]


ROUND6_TUNING_WORDINGS = [
    # round 6, from explain_dev5 (tuning)
    ("nvidia-device-plugin container CrashLoopBackOff\n2017/11/29 01:54:30 Loading NVML\n2017/11/29 01:54:30 could not "
     "load NVML library", "container-toolkit"),
    ("Failed to get convolution algorithm. This is probably because cuDNN failed to initialize, so try looking to see "
     "if a warning log message was printed above.", "cublas-cudnn-status"),
    ("Error: CUDA driver 8.0.0 is not compatible with any supported CUDA toolkit (11.4.4, 11.5.2, 12.3.1)\n"
     "I have also installed Visual Studio 2015 professional with compiler x64.", "driver-too-old"),
]


ROUND7_TUNING_WORDINGS = [
    # round 7, from explain_dev6 (tuning)
    ("Driver does not support the required nvenc API version. Required: 13.0 Found: 12.2", "driver-too-old"),
    ("22:45:40.550: error:   The minimum required Nvidia driver for nvenc is 471.41 or newer", "driver-too-old"),
    ("After resuming from suspension, NVIDIA GPU functionality inside rootless Docker containers stops working, even "
     "though nvidia-smi runs successfully within the container.\nNVIDIA Container Toolkit CLI version 1.17.8",
     "no-driver-or-device"),
    ("The installed Paddle is compiled with CUDNN 8.2, but CUDNN version in your machine is 8.1", "cudnn-version-mismatch"),
    ("tensorflow-gpu v1.4.0\nit gives me a CUDA error saying CUBLAS_STATUS_ALLOC_FAILED", "cublas-cudnn-status"),
    ("CUDA error: the requested functionality is not supported\nin ggml_cuda_op_mul_mat_cublas", "cublas-cudnn-status"),
    ("the crash message on d3d11 is : Device is lost. FAILED 0x887a0005 DXGI_ERROR_DEVICE_REMOVED "
     "(DXGI_ERROR_DEVICE_HUNG)", "launch-timeout"),
    ("`Kernel minimum runtime larger than default TDR` when running expensive hash", "launch-timeout"),
    ("nccl-tests crash when gdr is enabled\nmpirun --allow-run-as-root -np 2 all_reduce_perf -b 8 -e 128M -f 2 -g 8",
     "nccl"),
    ("export CUDA_VISIBLE_DEVICES=1 disables CUDA\non systems with 1 GPU, by default the scripts train on CPU",
     "visible-devices"),
    ("FROM jrottenberg/ffmpeg:4.2-nvidia\nCannot load libcuda.so.1\nFile exists in /usr/local/cuda-10.2/compat/"
     "libcuda.so.1", "container-toolkit"),
]


def test_a_plain_dxgi_removal_is_still_a_lost_device():
    assert answer("DXGI_ERROR_DEVICE_REMOVED")[:1] == ["device-lost"]


def test_nvcc_and_torch_cuda_differing_in_prose():
    text = ("if your device's current nvvc version and torch's compiled cuda version differ- which is totally ok for torch "
            "itself - you will receive an error for mismatched versions for installing extensions")
    assert answer(text)[:1] == ["nvcc-torch-mismatch"]


@pytest.mark.parametrize("name, text, first", [
    # the precision review of rounds 6-7 (a helper that had not written the patterns): each was a hijack before its fix
    ("nvenc without its library", "Ubuntu 22.04, driver 535 installed with nvidia-headless-535-server.\n[h264_nvenc @ 0x55] "
     "Cannot load libnvidia-encode.so.1\n[h264_nvenc @ 0x55] The minimum required Nvidia driver for nvenc is 520.56.06 or "
     "newer", "missing-shared-library"),
    ("paddle's cuDNN warning beside an OOM", "The installed Paddle is compiled with CUDNN 8.2, but CUDNN version in your "
     "machine is 8.1\nResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 2.0GB memory",
     "out-of-memory"),
    ("WSL named on a native host", "Native Ubuntu 24.04 host (I also use WSL on my other Windows laptop, works fine "
     "there).\nError! Bad return status for module build on kernel: 6.8.0-31-generic (x86_64)\nConsult "
     "/var/lib/dkms/nvidia/550.54.14/build/make.log for more information.", "driver-install"),
    ("a microsoft apt repo is not WSL", "Ubuntu 22.04 (installed packages-microsoft-prod.deb for dotnet)\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("overclock, nvlddmkm and DEVICE_HUNG", "Games crash with DXGI_ERROR_DEVICE_HUNG, Event Viewer shows nvlddmkm event 153;"
     " removing the overclock fixed it", "device-lost"),
    ("DEVICE_HUNG beside an illegal access", "DXGI_ERROR_DEVICE_HUNG\nRuntimeError: CUDA error: an illegal memory access "
     "was encountered", "illegal-memory-access"),
    ("no NVLink error in dmesg", "No Xid and no uncorrectable NVLink error in dmesg.\nRuntimeError: CUDA error: an "
     "illegal memory access was encountered", "illegal-memory-access"),
    ("resume from a checkpoint is not sleep", "After resuming training from checkpoint the job fails:\nCUDA error: device "
     "not ready", "launch-timeout"),
    ("nccl-tests reporting a CUDA failure", "nccl-tests all_reduce_perf fails only on node gpu-17:\ngpu-17: Test CUDA "
     "failure common.cu:1000 'unspecified launch failure'", "device-lost"),
    ("no docker here", "On bare-metal Ubuntu (no docker/container), ffmpeg compiled from source:\n[AVHWDeviceContext @ "
     "0x5600] Cannot load libcuda.so.1", None),
    ("a device-side assert poisons cuBLAS", "../aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: "
     "[0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nRuntimeError: CUDA error: device-side assert triggered\n"
     "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "illegal-memory-access"),
    ("WSL's missing API", "WSL2 Ubuntu, latest Windows driver 566.36\nvLLM: RuntimeError: CUDA driver error: API call "
     "is not supported in the installed CUDA driver", "wsl"),
    ("os.environ form", 'single GPU laptop\nos.environ["CUDA_VISIBLE_DEVICES"]="1"\ntorch.cuda.is_available() returns '
     "False", "visible-devices"),
])
def test_round7_precision_review(name, text, first):
    got = answer(text)
    if first is None:  # nothing may claim a container: the text says there is none
        assert "container-toolkit" not in answer(text, strict=True), got
    else:
        assert got[:1] == [first], (name, got)



# Every wording list above (rounds 3-7): the cause named first
@pytest.mark.parametrize("text, first", named_cases(
    ("round3_wordings", ROUND3_WORDINGS),
    ("round3_more_wordings", ROUND3_MORE_WORDINGS),
    ("round4_wordings", ROUND4_WORDINGS),
    ("round4_tuning_set_wordings", ROUND4_TUNING_SET_WORDINGS),
    ("cuda_error_names", CUDA_ERROR_NAMES),
    ("round4_second_tuning_set_wordings", ROUND4_SECOND_TUNING_SET_WORDINGS),
    ("after_round4_blind_scoring", AFTER_ROUND4_BLIND_SCORING),
    ("after_round5_blind_scoring", AFTER_ROUND5_BLIND_SCORING),
    ("a_hint_never_displaces_another_causes_error_line", A_HINT_NEVER_DISPLACES_ANOTHER_CAUSES_ERROR_LINE),
    ("nvidia_enum_wordings", NVIDIA_ENUM_WORDINGS),
    ("driver_messages_from_the_runtime_and_the_kernel_module", DRIVER_MESSAGES_FROM_THE_RUNTIME_AND_THE_KERNEL_MODULE),
    ("round6_tuning_wordings", ROUND6_TUNING_WORDINGS),
    ("round7_tuning_wordings", ROUND7_TUNING_WORDINGS),
))
def test_wordings_put_their_cause_first(text, first):
    assert answer(text)[:1] == [first], answer(text)


# ... and the wordings that must not even match a cause (a low-confidence guess may still name it)
@pytest.mark.parametrize("text, not_first", named_cases(
    ("round4_wordings_do_not_overreach", ROUND4_WORDINGS_DO_NOT_OVERREACH),
    ("round4_tuning_set_wordings_do_not_overreach", ROUND4_TUNING_SET_WORDINGS_DO_NOT_OVERREACH),
    ("round4_second_tuning_set_wordings_do_not_overreach", ROUND4_SECOND_TUNING_SET_WORDINGS_DO_NOT_OVERREACH),
))
def test_wordings_do_not_overreach(text, not_first):
    assert not_first not in ids(text), ids(text)

ROUND8 = [
    # round 8, from the in-sample misses of fresh5 and dev6 (each wording checked both ways)
    ("NCCL: two ranks on one GPU", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid "
     "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\nncclInvalidUsage: This usually reflects invalid "
     "usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 0 and rank 1 both on CUDA device 1a000",
     "device-busy"),
    ("Paddle wheel without the arch", "The GPU architecture in your current machine is Pascal, which is not compatible "
     "with Paddle installation with arch: 70 75 80 86 , it is recommended to install the corresponding wheel package",
     "no-kernel-image"),
    ("an overclocked card crashing", "Random CUDA error while mining on an RTX 3070\nGPU is overclocked: +150 core, +800 "
     "memory\nCUDA error in CudaProgram.cu:388 : unspecified launch failure (719)", "device-lost"),
    ("a clock offset", "Asus Strix 2070\n+125 on Core GPU Boost Clock\n+15 Power Target\n[CUDA] ERROR gpu 0: "
     "kernel.cu: 487", "device-lost"),
    ("OC through a vendor tool", "Max GPU OC through GHelper crashes games on startup with a dxgi error (RTX 4080)",
     "device-lost"),
]


@pytest.mark.parametrize("name, text", [
    # the overclock hint stays silent when the report says the card is not overclocked, or only asks
    ("not overclocked", "The GPU is not overclocked (stock clocks). The program stops at random with CUDA errors."),
    ("an issue template's question", "- Is the CPU or GPU overclocked?\nNo\nThe CUDA program stops at random."),
    ("never overclocked", "RTX 3060, never overclocked it; the CUDA job stops after an hour."),
    ("a clock reading, not an offset", "nvidia-smi -q: Graphics clock 1980 MHz, Memory clock 9501 MHz; CUDA job stops."),
])
def test_the_overclock_hint_needs_an_overclock(name, text):
    assert "device-lost" not in answer(text, strict=True), (name, answer(text, strict=True))


def test_the_overclock_hint_fires_on_its_own():
    assert answer("The GPU is overclocked; the CUDA job stops after an hour.", strict=True)[:1] == ["device-lost"]


def test_duplicate_gpu_is_the_placement_not_generic_nccl():
    got = answer("NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 3b000\nncclInvalidUsage")
    assert got[:1] == ["device-busy"] and "nccl" in got[:3], got


ROUND8_WSL = [
    # inside WSL the Linux side never loads a driver: NVML's "driver not loaded" means the wrong libnvidia-ml (not
    # /usr/lib/wsl/lib's) or a Windows driver without WSL support; a WSL1 kernel has no GPU at all
    ("NVML in WSL", "nvmlInit_v2 unable to detect Nvidia GPU in WSL\nThe nvmlReturn_t returns 9 "
     "(NVML_ERROR_DRIVER_NOT_LOADED)", "wsl"),
    ("ollama's NVML failure in WSL", "I was unable to get Ollama to recognize my RTX 5000 under WSL\ngpu.go:39: CUDA not "
     "detected: nvml vram init failure: 9", "wsl"),
    ("a WSL1 kernel", "uname -r\n4.4.0-19041-Microsoft\nnvidia-smi\nNVIDIA-SMI has failed because it couldn't "
     "communicate with the NVIDIA driver.", "wsl"),
    ("NVML not loaded on a native host", "Ubuntu 22.04 server, after apt upgrade:\nFailed to initialize NVML: Driver "
     "Not Loaded", "no-driver-or-device"),
    ("a WSL2 kernel is not WSL1's", "Linux 5.15.153.1-microsoft-standard-WSL2\nRuntimeError: CUDA error: out of memory",
     "wsl"),
]


def test_an_nvcc_path_with_its_own_quotes_is_a_wrong_cuda_home():
    text = ('unable to execute "\'/usr/local/cuda\'/bin/nvcc": No such file or directory\nerror: command '
            '"\'/usr/local/cuda\'/bin/nvcc" failed with exit status 1')
    assert answer(text)[:1] == ["cuda-home-missing"], answer(text)


ROUND8B = [
    # round 8b, from fresh6's misses after its one scoring (in-sample since); each wording on its own text
    ("CUDA error code 209", "ERROR: CUDA failed at src/prehash.cu: 52\nCUDA error code 209\nMiner is now terminated",
     "no-kernel-image"),
    ("an OpenACC binary without the GPU's cc", "Accelerator Fatal Error: This file was compiled: -acc=gpu -gpu=cc70 "
     "-gpu=cc80 -acc=host or -acc=multicore\nRebuild this file with -gpu=cc89 to use NVIDIA Tesla GPU 0", "no-kernel-image"),
    ("nvidia-modeset at another version", 'my system does not start: "nvidia-modeset: Version mismatch: nvidia.ko(378.13) '
     'nvidia-modeset(375.26)"', "nvml-driver-mismatch"),
    ("no kernel build tree", "cd kernel-open/nvidia/ && ln -sf ../../src/nvidia/_out/Linux_x86_64/nv-kernel.o\nmake[2]: "
     "*** /lib/modules/6.2.0-26-generic/build: No such file or directory.  Stop.", "driver-install"),
    ("an empty CUDA_PATH", "make fails to find nvcc `/bin/sh: line 1: /bin/nvcc: No such file or directory`",
     "cuda-home-missing"),
    ("an empty CUDA_HOME under ninja", "ninja: error: '/lib64/libcudart.so', needed by 'build/ext.so', missing and no "
     "known rule to make it", "cuda-home-missing"),
    ("stubs in the RPATH", "nvprof segfaults\n$ readelf -d `which app` | grep stubs\n 0x000000000000000f (RPATH) Library "
     "rpath: [/opt/cuda-10.2/targets/x86_64-linux/lib/stubs:/opt/lib]", "cuda-stub-library"),
    ("a container run without --gpus", "CUDA not detected when running without --gpus all", "container-toolkit"),
    ("Docker Desktop's WSL2 GPU path", "OS: Windows\nUnexpected error from cudaGetDeviceCount(). Did you run some cuda "
     "functions before calling NumCudaDevices() that might have already set an error? Error 500: named symbol not found",
     "wsl"),
    ("cuDNN's sub-library under WSL", "Could not load library libcudnn_cnn_infer.so.8\nCUDA was already installed on my "
     "Ubuntu WSL Windows 11 installation.", "wsl"),
    ("CTranslate2's library path message", "Please make sure cudnn_ops_infer64_8.dll is in your library path!\nI have "
     "already installed cuda_12.2.1_536.67_windows.exe", "missing-shared-library"),
]


NOT_ROUND8B = [
    # round 8b wordings that must stay silent on the near-miss
    ("a CPU-only run of a CUDA build", "CPU-only code was working, GPU code was running but failing to learn with torch "
     "1.1.0", "torch-cpu-only"),
    ("error 500 on Linux is not WSL's", "Ubuntu 22.04 server\nError 500: named symbol not found", "wsl"),
    ("cuDNN sub-library on a native host", "Ubuntu 22.04 bare metal\nCould not load library libcudnn_cnn_infer.so.8. "
     "Error: libcudnn_cnn_infer.so.8: cannot open shared object file", "wsl"),
    ("stubs named without a loader path", "the toolkit ships lib64/stubs for linking only", "cuda-stub-library"),
]


def test_an_empty_cuda_home_needs_the_root_path():
    assert "cuda-home-missing" not in answer("ninja: error: '/usr/local/cuda/lib64/libcudart.so', needed by 'x.so', "
                                             "missing and no known rule to make it", strict=True)


ROUND8_REVIEW = [
    # the precision review of round 8 (a helper that had not written the patterns, 92 reports; RESULTS.md, round 8):
    # each was a hijack by a round-8 pattern before its narrowing
    ('oc_gpu_oc_profile_isavail', 'torch.cuda.is_available() returns False on my new PC.\nWindows 11, RTX 4070 Ti (running a mild GPU OC profile for gaming), driver 551.23.\nI installed with `pip install torch torchvision` in a fresh venv, Python 3.12.', 'torch-cpu-only'),
    ('oc_none_sysinfo_isavail', 'torch.cuda.is_available() is False\nSystem info:\n- OS: Windows 10 22H2\n- GPU: RTX 3060 12GB\n- Overclock: none\n- torch: installed via pip install torch==2.2.0', 'torch-cpu-only'),
    ('paddle_ada_warning_oom', 'UserWarning: The GPU architecture in your current machine is Ada, which is not compatible with Paddle installation with arch: 70 75 80 86 , it is recommended to install the corresponding wheel package according to the installation information on the official Paddle website.\nW0601 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.9, Driver API Version: 12.2, Runtime API Version: 11.8\nResourceExhaustedError:\nOut of memory error on GPU 0. Cannot allocate 1.953125GB memory on GPU 0, 22.650391GB memory has been allocated and available memory is only 897.937500MB.\nPlease check whether there is any other process using GPU 0.', 'out-of-memory'),
    ('paddle_hopper_warning_illegal', "UserWarning: The GPU architecture in your current machine is Hopper, which is not compatible with Paddle installation with arch: 70 75 80 86\nOSError: (External) CUDA error(700), an illegal memory access was encountered.\n  [Hint: 'cudaErrorIllegalAddress'. The device encountered a load or store instruction on an invalid memory address.]", 'illegal-memory-access'),
    ('native_nvml_not_wsl', '$ nvidia-smi\nFailed to initialize NVML: Driver not loaded\nThis is a bare-metal Ubuntu 22.04 box (not WSL), RTX 3090, driver 535 from the ubuntu repo; it started after the last kernel update.', 'no-driver-or-device'),
    ('wsl1_converted_arch', 'My distro was WSL1 (uname -r: 4.4.0-22621-Microsoft), so I converted it with `wsl --set-version Ubuntu 2`. nvidia-smi works now.\nBut now torch fails:\nGeForce GTX 680 with CUDA capability sm_30 is not compatible with the current PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\nRuntimeError: CUDA error: no kernel image is available for execution on the device', 'torch-arch-unsupported'),
    ('err500_native_windows_mention', 'UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 500: named symbol not found\nUbuntu 18.04 server (bare metal). nvidia-smi: Driver Version: 418.87.01  CUDA Version: 10.1. torch 2.1.0+cu121.\nThe same script works on my Windows laptop.', 'driver-too-old'),
    ('cudnn_native_nvrtc_passing_wsl', 'Native Ubuntu 20.04 (the same code works in WSL on my other machine):\nCould not load library libcudnn_cnn_infer.so.8. Error: libnvrtc.so: cannot open shared object file: No such file or directory', 'missing-shared-library'),
    ('libmod_wsl2_runfile', 'Inside WSL2 Ubuntu I tried to install the NVIDIA driver:\nsudo sh NVIDIA-Linux-x86_64-550.54.14.run\nmake[1]: *** /lib/modules/5.15.133.1-microsoft-standard-WSL2/build: No such file or directory.  Stop.\nERROR: The nvidia kernel module was not created.', 'wsl'),
    ('libmod_container_build', 'In my Dockerfile (FROM nvidia/cuda:12.2.0-devel-ubuntu22.04) I install the driver so the container can use the GPU:\nRUN sh NVIDIA-Linux-x86_64-535.86.10.run --silent\nmake: *** /lib/modules/5.15.0-91-generic/build: No such file or directory.  Stop.\nthen docker run myimage nvidia-smi: command not found', 'container-toolkit'),
    ('unable_execute_gcc_nvcc_later', "nvcc warning : The -std=c++17 flag is not supported with the configured host compiler. unable to execute 'gcc-13' for nvcc: No such file or directory\n#error -- unsupported GNU version! gcc versions later than 12 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check", 'host-compiler-unsupported'),
    ('stub_rpath_link_build_arch', "/usr/local/cuda-11.4/bin/nvcc -gencode arch=compute_90,code=sm_90 -o libtrt_plugins.so plugin.cu -L/usr/local/cuda/lib64/stubs -Xlinker -rpath-link=/usr/local/cuda/lib64/stubs\nnvcc fatal   : Unsupported gpu architecture 'compute_90'", 'nvcc-unsupported-arch'),
    ('stub_docker_env_line_arch', 'docker inspect: "Env": ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/sbin:/usr/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64", "LIBRARY_PATH=/usr/local/cuda/lib64/stubs", "NVIDIA_VISIBLE_DEVICES=all"]\nTesla K80 with CUDA capability sm_37 is not compatible with the current PyTorch installation.\nRuntimeError: CUDA error: no kernel image is available for execution on the device', 'torch-arch-unsupported'),
    ('stub_tried_ld_path_libcudart', "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\nI tried export LD_LIBRARY_PATH=/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH as suggested in another issue, didn't help; the toolkit installed is 12.1.", 'missing-shared-library'),
    ('stub_cmake_library_path_word', 'CMake Error at CMakeLists.txt:20 (find_package):\n  Could not find CUDAToolkit (missing: CUDAToolkit_INCLUDE_DIR). Searched library path /usr/lib/x86_64-linux-gnu and /usr/local/cuda/lib64/stubs\nNo CMAKE_CUDA_COMPILER could be found.', 'cuda-home-missing'),
    ('without_gpus_isavail_cpu_wheel', 'torch.cuda.is_available() is False inside the container even with docker run --gpus all; nvidia-smi works inside.\nDockerfile: FROM python:3.11-slim; RUN pip install torch --index-url https://download.pytorch.org/whl/cpu\nSame result as running without --gpus.', 'torch-cpu-only'),
    ('libmod_non_nvidia_module_in_nvidia_report', 'Trying to get my RTX 2080 working with a prebuilt custom CUDA extension:\nRuntimeError: CUDA error: no kernel image is available for execution on the device\nEarlier in the setup script (unrelated: v4l2loopback for the webcam via dkms):\nmake: *** /lib/modules/6.1.0-18-amd64/build: No such file or directory.  Stop.', 'no-kernel-image'),
    ('nvml_driver_not_loaded_wsl_word_in_path', "$ nvidia-smi\nFailed to initialize NVML: Driver not loaded\nNative Arch Linux. My project folder is ~/code/wsl-migration-tool (it's a tool for moving VMs, nothing to do with WSL)", 'no-driver-or-device'),
    ('oc_hint_vs_cpu_only_hint_afterburner', 'torch.cuda.is_available() returns False. GPU: RTX 3080 with Afterburner OC profile. I installed torch with pip on Windows, Python 3.11.', 'torch-cpu-only'),
    ('wsl_not_used_cudnn_version_mismatch', 'RuntimeError: cuDNN version incompatibility: PyTorch was compiled against (8, 9, 2) but found runtime version (8, 2, 1). PyTorch already comes bundled with cuDNN.\nCould not load library libcudnn_cnn_infer.so.8.\n(Not WSL, native Ubuntu.)', 'cudnn-version-mismatch'),
]


ROUND9B = [
    # round 9b, from fresh7's misses after its one scoring (in-sample since)
    ("a checkpoint saved on another GPU index", "RuntimeError: Attempting to deserialize object on CUDA device 1 but "
     "torch.cuda.device_count() is 1. Please use torch.load with map_location to map your storages to an existing "
     "device.", "visible-devices"),
    ("Rust's NoBinaryForGpu", "thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value: "
     "Cuda(NoBinaryForGpu)', examples/add.rs:10:76", "no-kernel-image"),
    ("xFormers built for another torch", "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was "
     "built for:\n    PyTorch 2.2.0+cu121 with CUDA 1201 (you have 2.1.2+cu121)", "undefined-symbol"),
    ("TF configure missing a CUDA library", "Cuda Configuration Error: Cannot find cuda library libcublas.so.10.1",
     "missing-shared-library"),
    ("no device inside WSL2", "[BUG] Cannot find GPU in WSL2\nnumba.cuda.cudadrv.error.CudaSupportError: Error at driver "
     "init: Call to cuInit results in CUDA_ERROR_NO_DEVICE (100)", "wsl"),
    ("a Windows path mounted in WSL", "File \"/mnt/c/Users/me/proj/.venv/lib/python3.12/site-packages/numba_cuda/"
     "driver.py\", line 258\nCall to cuInit results in CUDA_ERROR_NO_DEVICE (100)", "wsl"),
    ("out of video memory", "My GT1030 has 2GB memory, it stops after a few seconds: Out of video memory", "out-of-memory"),
    ("the NVML stub's warning", "WARNING:\nYou should always run with libnvidia-ml.so that is installed with your\n"
     "NVIDIA Display Driver.\nlibnvidia-ml.so in GDK package is a stub library that is attached only for\nbuild "
     "purposes", "cuda-stub-library"),
]


NOT_ROUND9B = [
    ("no device on a native host", "Ubuntu 22.04 bare metal\nCall to cuInit results in CUDA_ERROR_NO_DEVICE (100)", "wsl"),
    ("no device, WSL only mentioned as not used", "Native Linux, not WSL.\ncudaErrorNoDevice: no CUDA-capable device is "
     "detected", "wsl"),
    ("a deserialize with CUDA unavailable is the CPU wheel's", "RuntimeError: Attempting to deserialize object on a CUDA "
     "device but torch.cuda.is_available() is False.", "visible-devices"),
]


INSTALLER = [
    # session 23, from nvidia-installer's, the kernel's and apt's own messages (not from any set of reports)
    ("the installer and an old module still loaded", "ERROR: An NVIDIA kernel module 'nvidia-drm' appears to already be "
     "loaded in your kernel.  This may be because it is in use", "driver-install"),
    ("the installer and a running X server", "ERROR: You appear to be running an X server; please exit X before "
     "installing.", "driver-install"),
    ("the installer and Secure Boot", "ERROR: The kernel module failed to load. Secure boot is enabled on this system, so "
     "this is likely because it was not signed by a key that is trusted by the kernel.", "driver-install"),
    ("the installer's dkms build", "ERROR: Failed to run `/usr/sbin/dkms build -m nvidia -v 535.54.03 -k "
     "6.2.0-26-generic`", "driver-install"),
    ("nvidia-drm not loading", "ERROR: Unable to load the 'nvidia-drm' kernel module.", "driver-install"),
    ("a module built for another kernel", "[   12.3] nvidia_uvm: Unknown symbol nvUvmInterfaceDeviceCreate (err -2)",
     "driver-install"),
    ("apt and the driver's packages", "E: Unable to correct problems, you have held broken packages.\n"
     " nvidia-driver-535 : Depends: nvidia-dkms-535 (= 535.183.01)", "driver-install"),
    ("apt and cuda-drivers", "cuda-drivers : Depends: nvidia-driver-550 (>= 550.54.15) but it is not going to be "
     "installed", "driver-install"),
]


NOT_INSTALLER = [
    ("a Python extension's undefined symbol", "ImportError: /home/u/ext.so: undefined symbol: _ZN3c10\nnvidia-smi shows "
     "driver 535", "driver-install"),
    ("apt and the toolkit's packages", "The following packages have unmet dependencies:\n cuda-toolkit-12-4 : Depends: "
     "cuda-nsight-systems-12-4 but it is not going to be installed", "driver-install"),
    ("an X server named in passing", "I am running an X server on the host\nRuntimeError: CUDA error: out of memory",
     "driver-install"),
]


def test_guess_words_false_keeps_a_patterns_words_out_of_the_guesses(tmp_path):
    base = ('id = "{i}"\ntitle = "t"\nlayer = "l"\npriority = 10\nmeaning = "m"\ncauses = ["c"]\nconfirm = ["c"]\n'
            'fixes = ["f"]\nalternatives = ["{o}", "{o}"]\n[[pattern]]\ncontains = ["zebra quokka"]\n{extra}')
    (tmp_path / "a.toml").write_text(base.format(i="a", o="b", extra="guess_words = false\n"))
    (tmp_path / "b.toml").write_text(base.format(i="b", o="a", extra=""))
    sigs = signatures.load_dir(tmp_path)
    docs = rank._vocab(sigs)[0]
    assert "quokka" not in docs[0] and "quokka" in docs[1]
    assert answer_of(sigs, "my quokka is sad")[:1] == ["b"]
    with pytest.raises(signatures.SignatureError, match="guess_words"):
        (tmp_path / "a.toml").write_text(base.format(i="a", o="b", extra='guess_words = "no"\n'))
        signatures.load_dir(tmp_path)


def answer_of(sigs: tuple, text: str) -> list:
    return rank.answer_ids(sigs, rank.matches(sigs, scan.Scanner(sigs).scan_text(text)), text)


CONTAINER_RUNTIME = [
    # session 23, from libnvidia-container's, the CDI runtime's, NGC images' and Kubernetes' own messages
    ("a GPU index the host does not have", "docker: Error response from daemon: failed to create task: nvidia-container-cli:"
     " device error: 1: unknown device: unknown.", "visible-devices"),
    ("a GPU UUID the host does not have", "nvidia-container-cli: device error: GPU-1c5ae3a8-1234: unknown device: unknown",
     "visible-devices"),
    ("CDI devices without a spec", "Error: failed to start containers: nvidia: unresolvable CDI devices nvidia.com/gpu=all",
     "container-toolkit"),
    ("NGC's banner", "WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.\n   Use the "
     "NVIDIA Container Toolkit to start this container with GPU support", "container-toolkit"),
    ("a pod no node can place", "Warning  FailedScheduling  0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
     "container-toolkit"),
]


NOT_CONTAINER_RUNTIME = [
    ("another device error", "nvidia-container-cli: device error: failed to open /dev/nvidia-uvm: permission denied",
     "visible-devices"),
    ("GPU functionality named in a changelog", "v2.1: GPU functionality will not be available on macOS builds\n"
     "RuntimeError: CUDA error: out of memory", "container-toolkit"),
]


@pytest.mark.parametrize("name, text, first", INSTALLER + CONTAINER_RUNTIME)
def test_the_tools_own_messages(name, text, first):
    assert answer(text, strict=True)[:1] == [first], (name, answer(text, strict=True))


@pytest.mark.parametrize("name, text, not_id", NOT_INSTALLER + NOT_CONTAINER_RUNTIME)
def test_the_tools_messages_do_not_hijack(name, text, not_id):
    assert not_id not in answer(text, strict=True), (name, answer(text, strict=True))


ROUND10B = [
    # round 10b, from fresh8's misses after its one scoring (in-sample since)
    ("a wheel and a GPU the matrix says it lacks", "## Environment\n- GPU: NVIDIA GeForce GTX 1050 (compute capability "
     "6.1)\n- PyTorch: 2.8.0+cu128\ntorch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
     "device", "torch-arch-unsupported"),
    ("a release named with its CUDA", "The container uses PyTorch 2.9+ with CUDA 12.8. GPUs like the GTX 1070 (Pascal, "
     "compute capability 6.1) get this error:\nCUDA error: no kernel image is available for execution on the device",
     "torch-arch-unsupported"),
    ("a bare release none of whose wheels has the GPU", "CUDA error: no kernel image is available for execution on the "
     "device\nRTX 5090, torch 2.5.1", "torch-arch-unsupported"),
    ("TensorRT's cuDNN line", "[TRT] TensorRT was linked against cuDNN 8.9.0 but loaded cuDNN 8.8.0",
     "cudnn-version-mismatch"),
    ("Torch-TensorRT's cuDNN line", "I got the warning: tensorrt is linked to cuDNN 8.6.0 but cuDNN 8.5.0 is loaded",
     "cudnn-version-mismatch"),
    ("a wrapper's cuDNN arch mismatch", "INFO:root:Initializing CuDNN backend...\nERROR: Arch mismatch\n in create at "
     "/home/b/.julia/v0.3/Mocha/src/cuda/cudnn.jl:43", "cublas-cudnn-status"),
    ("falls off the bus", "GPU falls off the bus (Xid 79) on RTX 4080 when the game starts", "device-lost"),
    ("torch's error retold", "Why do I get CUDA error: illegal memory access at the maxpool2d step?",
     "illegal-memory-access"),
    ("flash-attn's nvcc check", "RuntimeError: FlashAttention is only supported on CUDA 11.6 and above.  Note: make sure "
     "nvcc has a supported version by running nvcc -V.\ntorch.__version__  = 2.3.1+cu121", "nvcc-torch-mismatch"),
    ("Whisper on the CPU", "I have a 3060: UserWarning: FP16 is not supported on CPU; using FP32 instead",
     "torch-cpu-only"),
    ("OpenMM's device index", "simtk.openmm.OpenMMException: Illegal value for DeviceIndex: 6", "visible-devices"),
    ("a load killed in WSL", "Can't load llama 30b in WSL\nLoading model ...\nKilled", "wsl"),
    ("no devices in WSL", "WSL: Number of devices is 0\nRunning the default CUDA example in WSL fails to detect the GPU.",
     "wsl"),
]


NOT_ROUND10B = [
    ("an extension's no kernel image on a GPU the wheel has", "my_ext.so: CUDA error: no kernel image is available for "
     "execution on the device\nbuilt with -gencode arch=compute_61,code=sm_61; torch 2.8.0+cu128 on an RTX 4090",
     "torch-arch-unsupported"),
    ("a bare release one of whose wheels has the GPU", "CUDA error: no kernel image is available for execution on the "
     "device\nGTX 1080, torch 2.8", "torch-arch-unsupported"),
    ("the wheel with its CUDA that has the GPU", "torch 2.7, cuda 12.8 on RTX 5090\nCUDA error (flash_fwd_launch_template"
     ".h:175): no kernel image is available for execution on the device", "torch-arch-unsupported"),
    ("a wheel and GPU named without the error", "RTX 5090 with torch 2.5.1: CUDA out of memory. Tried to allocate 2 GiB",
     "torch-arch-unsupported"),
    ("Xid 154 in a summary", "dmesg: Xid 48: uncorrectable double-bit ECC\n - Xid 94 bursts + Xid 154 (GPU recovery "
     "action)", "device-lost"),
    ("killed outside WSL", "Ubuntu 22.04 native\nLoading model ...\nKilled", "wsl"),
    ("an arch mismatch outside cuDNN", "ValueError: arch mismatch between the checkpoint and the config", "cublas-cudnn-status"),
]


ROUND11B = [
    # round 11b, from fresh9's misses after its one scoring (in-sample since)
    ("PTX for a newer GPU", "I'm trying to run PTX compiled with sm_13 on a 8800GTS that supports sm_10:\nptxas fatal   : "
     "SM version specified by .target is higher than default SM version assumed\nerror   : Ptx compilation failed: "
     "gpu='sm_10', device code='cuModuleLoadDataEx_92'", "no-kernel-image"),
    ("the watchdog's registry key", "My GeForce gives an error after 2 seconds when I run a CUDA program. I read that you "
     "can use the TdrLevel key in HKEY_LOCAL_MACHINE\\System\\CurrentControlSet\\Control\\GraphicsDrivers.",
     "launch-timeout"),
    ("a kernel upgrade broke the driver", "Upgrading from Linux kernel 3.0.0-24 to -25 broke the 295.59 driver. The "
     "system just hung; rebuilding the driver from the rescue shell did nothing.", "driver-install"),
]


NOT_ROUND11B = [
    ("the watchdog's keys set, another error", "I already set TdrDelay=60 and TdrLevel=0 in the registry; still:\n"
     "RuntimeError: CUDA error: an illegal memory access was encountered", "launch-timeout"),
    ("a kernel upgrade broke something else", "The new kernel broke my wifi driver. Separately:\nRuntimeError: CUDA "
     "error: out of memory", "driver-install"),
]


ROUND12B = [
    # round 12b, from fresh10's misses after its one scoring (in-sample since); texts written here, not the reports'
    ("torch's THC kernel, CUDA 8's wording", "RuntimeError: cuda runtime error (8) : invalid device function at "
     "/opt/conda/conda-bld/pytorch_1503970438496/work/torch/lib/THC/generic/THCTensorCopy.cu:21\nGPU: GeForce GT 630M",
     "torch-arch-unsupported"),
    ("torch's THC kernel, a Windows build", "RuntimeError: cuda runtime error (8) : invalid device function at "
     "C:\\w\\b\\windows\\pytorch\\torch\\lib\\thc\\generic/THCTensorMath.cu:15", "torch-arch-unsupported"),
    ("a bus error inside NCCL", "[node1:412 :0:498] Caught signal 7 (Bus error: nonexistent physical address)\n"
     "==== backtrace ====\n 2 0x0000000000075a8d ncclGroupEnd()  ???:0\n 5 0x00000000000489b1 ???()  "
     "/usr/lib/x86_64-linux-gnu/libnccl.so.2:0", "nccl"),
    ("CMake finds no CUDA compiler", "-- Looking for a CUDA compiler\n-- Looking for a CUDA compiler - NOTFOUND\n"
     "but nvcc --version says: Cuda compilation tools, release 11.8, V11.8.89", "cuda-home-missing"),
    ("CUDA_HOME at the bin folder", "python setup.py build_ext: error: command '/usr/local/cuda-11.8/bin/bin/nvcc' "
     "failed with exit status 1", "cuda-home-missing"),
    ("Omniverse's driver check", "Isaac Sim 4.5 on a g4dn node: [carb.scenerenderer-rtx.plugin] rtx driver "
     "verification failed. The minimum Omniverse RTX requirement on Linux Installed driver: 525.60 The unsupported "
     "driver range: [0.0, 535.129) The recommended drivers: 535.161.07", "driver-too-old"),
    ("NixOS' driver package", "error: builder for '/nix/store/x3k1-nvidia-x11-550.78-6.9.1.drv' failed with exit code 2",
     "driver-install"),
    ("an application's own driver check", "[render] fatal: this application requires NVIDIA driver version "
     "525.60.13 or later (detected 470.182.03)", "driver-too-old"),
    ("DALI's cuInit in a child process", "I start the pipeline in a multiprocessing.Process:\n[/opt/dali/dali/core/"
     "device_guard.cc:33] Assert on \"cuInitChecked()\" failed: Failed to load libcuda.so. Check your library paths "
     "and if the driver is installed correctly.", "cuda-fork"),
]


NOT_ROUND12B = [
    ("an extension's invalid device function", "RuntimeError: CUDA error: invalid device function at "
     "/home/me/proj/my_ext/src/nms_kernel.cu:103", "torch-arch-unsupported"),
    ("a DataLoader's bus error", "ERROR: Unexpected bus error encountered in worker. This might be caused by "
     "insufficient shared memory (shm).\nNCCL_DEBUG=INFO set", "nccl"),
    ("CMake finds nvcc", "-- Looking for a CUDA compiler - /usr/local/cuda/bin/nvcc\n-- The CUDA compiler "
     "identification is NVIDIA 12.4.131\nRuntimeError: CUDA error: out of memory", "cuda-home-missing"),
    ("a newer driver in Omniverse's known-issues range", "The currently installed NVIDIA graphics driver is unsupported "
     "or has known issues. The unsupported driver range: [545.0, 546.0)", "driver-too-old"),
    ("NixOS' driver package built", "nvidia-x11-550.78-6.9.1 built fine\nRuntimeError: CUDA error: out of memory",
     "driver-install"),
    ("a compatibility table quoted beside another error", "CUDA 12.2 needs driver 535 or later and I have 550.54.\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "driver-too-old"),
    ("nvidia-smi's header", "| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4 |\n"
     "RuntimeError: CUDA error: an illegal memory access was encountered", "driver-too-old"),
    ("DALI's cuInit with no driver", "docker run without --gpus:\nAssert on \"cuInitChecked()\" failed: Failed to load "
     "libcuda.so. Check your library paths and if the driver is installed correctly.", "cuda-fork"),
]


ROUND13B = [
    # round 13b, from fresh11's misses after its one blind scoring (in-sample since); texts written here
    ("modpost refuses the NVIDIA module", "make[2]: *** [scripts/Makefile.modpost:145: Module.symvers] Error 1\n"
     "ERROR: modpost: GPL-incompatible module nvidia.ko uses GPL-only symbol 'rcu_read_unlock_strict'", "driver-install"),
    ("a stale CDI spec", "Error: crun: cannot stat `/usr/lib64/libnvidia-ml.so.535.104.05`: No such file or directory: "
     "OCI runtime attempted to invoke a command that was not found", "container-toolkit"),
    ("nvcc inside a newer libstdc++", "/usr/include/c++/15.1.1/bits/stl_algobase.h(1024): error: identifier "
     "\"__builtin_is_constant_evaluated\" is undefined", "host-compiler-unsupported"),
    ("ldd cannot find a CUDA library", "$ ldd my_op.so\n\tlibcublasLt.so.11 => not found\n\tlibc.so.6 => "
     "/lib/x86_64-linux-gnu/libc.so.6", "missing-shared-library"),
    ("old TensorFlow without cuDNN", "I tensorflow/stream_executor/cuda/cuda_dnn.cc:1062] Unable to load cuDNN DSO.",
     "missing-shared-library"),
    ("NCCL's socket of no family", "misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address with family 0 "
     "is neither AF_INET(2) nor AF_INET6(10)", "nccl"),
    ("Kaldi finds no GPU", "ERROR (nnet3-train:SelectGpuId():cu-device.cc:223) No CUDA GPU detected!", "no-driver-or-device"),
    ("CMake's arch list", "CMake Error at /usr/share/cmake-3.22/Modules/CMakeDetermineCUDACompiler.cmake:277 "
     "(message):\n  CMAKE_CUDA_ARCHITECTURES must be valid if set.", "nvcc-unsupported-arch"),
]


ROUND14B = [
    # round 14b, from fresh12's misses after its one blind scoring (in-sample since); texts written here
    ("memcheck behind an unspecified launch failure", "CUDA error: unspecified launch failure\n$ compute-sanitizer ./app\n"
     "========= Invalid __shared__ write of size 8 bytes\n=========     at 0x3f0 in reduce_kernel", "illegal-memory-access"),
    ("memcheck's out-of-range local address", "cudaDeviceSynchronize returned 719\n========= Out-of-range Shared or Local "
     "Address\n=========     at 0x000001a8 in scan_kernel", "illegal-memory-access"),
    ("pynvml's driver-not-loaded", "  File \"/usr/lib/python3/dist-packages/pynvml.py\", line 310, in _nvmlCheckReturn\n"
     "pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "no-driver-or-device"),
    ("joblib workers after CUDA in the parent", "joblib.Parallel(n_jobs=4)(delayed(train)(i) for i in range(4))\n"
     "RuntimeError: cuda runtime error (3) : initialization error at /pytorch/aten/src/THC/THCGeneral.cpp:50",
     "cuda-fork"),
    ("an unspecified launch failure, memcheck clean", "CUDA error: unspecified launch failure\n========= ERROR SUMMARY: "
     "0 errors\nXid 79: GPU has fallen off the bus", "device-lost"),
    ("a driver that does not build for a kernel", "nvidia-dkms 470.256.02 does not compile with kernel 6.12 on Arch",
     "driver-install"),
]


ROUND15B = [
    # round 15b, from fresh13's misses after its one blind scoring (in-sample since); texts written here
    ("locate_cuda's message", "  File \"setup.py\", line 52, in locate_cuda\nOSError: The nvcc binary could not be "
     "located in your $PATH. Either add it to your path, or set $CUDAHOME", "cuda-home-missing"),
    ("Paddle's device id check", "ValueError: (InvalidArgument) Device id must be less than GPU count, but received id "
     "is: 1. GPU count is: 1.", "visible-devices"),
    ("set_device under Slurm", "srun --ntasks-per-gpu=1 python train.py\n  File \"train.py\", line 12, in setup\n"
     "    torch.cuda.set_device(int(os.environ['SLURM_LOCALID']))\n  File \".../torch/cuda/__init__.py\", line 408, in "
     "set_device\n    torch._C._cuda_setDevice(device)", "visible-devices"),
]


NOT_ROUNDS_13B_TO_15B = [
    ("set_device under Slurm, then an OOM", "srun python train.py  # torch.cuda.set_device(local_rank)\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB", "visible-devices"),
    ("locate_cuda's message retold", "Setting CUDAHOME made the nvcc binary could not be located error go away; now:\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda-home-missing"),
    ("Paddle's device check retold", "I fixed the device id must be less than gpu count error; now:\nRuntimeError: "
     "CUDA error: an illegal memory access was encountered", "visible-devices"),
    ("a user's own module that does not build", "my out-of-tree module does not build with kernel 6.8, nvidia is fine:\n"
     "RuntimeError: CUDA error: out of memory", "driver-install"),
    ("g++'s own error in libstdc++", "/usr/include/c++/11/bits/stl_vector.h:1123:9: error: no matching function for "
     "call to 'swap'\nRuntimeError: CUDA error: out of memory", "host-compiler-unsupported"),
    ("ldd cannot find libcuda (the driver)", "\tlibcuda.so.1 => not found\nnvidia-smi: command not found",
     "missing-shared-library"),
    ("a container cannot stat another file", "Error: crun: cannot stat `/data/models/llama.bin`: No such file or "
     "directory\nRuntimeError: CUDA error: out of memory", "container-toolkit"),
]


@pytest.mark.parametrize("name, text, first",
                         ROUND8 + ROUND8_WSL + ROUND8B + ROUND8_REVIEW + ROUND9B + ROUND10B + ROUND11B + ROUND12B
                         + ROUND13B + ROUND14B + ROUND15B)
def test_rounds_8_to_15_wordings(name, text, first):
    assert answer(text)[:1] == [first], (name, answer(text))


@pytest.mark.parametrize("name, text, not_id",
                         NOT_ROUND8B + NOT_ROUND9B + NOT_ROUND10B + NOT_ROUND11B + NOT_ROUND12B + NOT_ROUNDS_13B_TO_15B)
def test_rounds_8_to_15_wordings_do_not_hijack(name, text, not_id):
    assert answer(text, strict=True)[:1] != [not_id], (name, answer(text, strict=True))


with open(Path(__file__).parent / "data" / "explain_review" / "r10.toml", "rb") as _f:
    REVIEW_R10 = tomllib.load(_f)["case"]


@pytest.mark.parametrize("case", REVIEW_R10, ids=lambda c: c["name"])
def test_round10_precision_review(case):
    # each was a hijack by a round-10 pattern before its narrowing (tests/data/explain_review/r10.toml)
    assert answer(case["text"])[:1] == [case["expect"]], (case["name"], answer(case["text"]))


with open(Path(__file__).parent / "data" / "explain_review" / "older.toml", "rb") as _f:
    REVIEW_OLDER = tomllib.load(_f)["case"]


@pytest.mark.parametrize("case", REVIEW_OLDER, ids=lambda c: c["name"])
def test_older_patterns_precision_review(case):
    # passing mentions (an environment dump, a harmless warning, a banner, prose) never outrank another cause's
    # error line; the true positives stay (tests/data/explain_review/older.toml)
    assert answer(case["text"])[:1] == [case["expect"]], (case["name"], answer(case["text"]))


REVIEW_R12_TO_R14 = []
for _name in ("r12.toml", "r13.toml", "r14.toml", "late.toml", "s25.toml"):
    with open(Path(__file__).parent / "data" / "explain_review" / _name, "rb") as _f:
        REVIEW_R12_TO_R14 += tomllib.load(_f)["case"]


@pytest.mark.parametrize("case", REVIEW_R12_TO_R14, ids=lambda c: c["name"])
def test_rounds_12_to_14_precision_reviews(case):
    # hijacks and false strict matches by rounds 12b's to 14b's first patterns, and the true positives they and the
    # narrowings fixed (tests/data/explain_review/r12.toml, r13.toml, r14.toml, late.toml, s25.toml)
    if "not_strict" in case:
        assert case["not_strict"] not in answer(case["text"], strict=True), (case["name"], answer(case["text"], strict=True))
    else:
        assert case["expect"] in answer(case["text"])[:case.get("within", 1)], (case["name"], answer(case["text"]))


H200X2 = Path(__file__).parent / "data" / "h200x2"


def test_real_nccl_shm_failure_is_nccl_and_a_dataloader_shm_failure_is_not():
    # recorded on 2x H200 with a 1 MB /dev/shm (tests/data/h200x2/README.md, session 24)
    nccl = (H200X2 / "r12_nccl_shm_full.txt").read_text()
    assert answer(nccl, strict=True)[:1] == ["nccl"], answer(nccl, strict=True)
    loader = (H200X2 / "r12_dataloader_shm_full.txt").read_text()
    assert "nccl" not in answer(loader, strict=True), answer(loader, strict=True)
    assert answer((H200X2 / "r12_nccl_shm_cumem_ok.txt").read_text(), strict=True) == []


@pytest.mark.parametrize("text", [
    "Detected GPU driver 460.32.03 is older than the minimum supported 470.57",
    "Your graphics driver 391.35 is too old; version 418 or newer is required.",
    "Minimum required Nvidia driver is 570.0 or newer",
])
def test_applications_own_driver_checks_are_matched_not_only_guessed(text):
    # the family of applications' own minimum-driver messages (session 24): a match (a hint), not only a guess
    assert answer(text, strict=True)[:1] == ["driver-too-old"], answer(text, strict=True)


def test_real_ldd_listing_of_a_missing_cudart_is_a_missing_library():
    # recorded with the real loader (tests/data/libs/README.md, session 24)
    text = (Path(__file__).parent / "data" / "libs" / "r14_ldd_cudart_not_found.txt").read_text()
    assert "libcudart.so.13 => not found" in text
    assert answer(text, strict=True)[:1] == ["missing-shared-library"], answer(text, strict=True)


@pytest.mark.parametrize("name", ["r14_global_oob_717.txt", "r14_global_oob_sanitizer.txt", "r14_shared_oob_700.txt",
                                  "r14_shared_oob_sanitizer.txt"])
def test_real_out_of_bounds_kernels_are_illegal_memory_access(name):
    # recorded on an H200 (tests/data/h200/README.md, session 24): 717 alone, and 719 beside memcheck's finding, are the
    # kernel's bad access, not a lost GPU
    text = (Path(__file__).parent / "data" / "h200" / name).read_text()
    assert answer(text, strict=True) == ["illegal-memory-access"], answer(text, strict=True)


@pytest.mark.parametrize("text,strict", [
    # clang compiling CUDA itself (LLVM's DiagnosticDriverKinds.td wordings), round 19 (fresh17, in-sample)
    ("clang-18: error: GPU arch sm_35 is supported by CUDA versions between 7.0 and 11.8 (inclusive), but installation "
     "at /usr/local/cuda-12.4 is 12.4; use '--cuda-path' to specify a different CUDA install, pass a different GPU "
     "arch with '--cuda-gpu-arch', or pass '--no-cuda-version-check'", True),
    ("clang: error: Unsupported CUDA gpu architecture: sm_61", True),
    # an AMD architecture there is a HIP source compiled as CUDA: no nvcc/toolkit arch problem
    ("clang++: error: unsupported CUDA gpu architecture: gfx1150", False),
])
def test_clangs_own_cuda_arch_errors(text, strict):
    assert ("nvcc-unsupported-arch" in answer(text, strict=True)) is strict


LIBCUDA_MISSING = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n"


@pytest.mark.parametrize("text,first", [
    # round 21 (fresh19, in-sample): the driver's own libraries (libcuda, libnvidia-ml) come with the driver, not the
    # toolkit: missing where the program runs is the driver's layer
    (LIBCUDA_MISSING, "no-driver-or-device"),
    ("Error using gpuDevice (line 26)\nThere is a problem with the CUDA driver or with this GPU device.\nCaused by:\n"
     "    The CUDA driver could not be loaded. The library name used was 'nvcuda.dll'. The error was:\n"
     "    The specified module could not be found.", "no-driver-or-device"),
    ("pynvml.nvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found", "no-driver-or-device"),
    # a toolkit library is still a missing CUDA library
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory", "missing-shared-library"),
    ("OSError: libcudnn_ops_infer.so.8: cannot open shared object file", "missing-shared-library"),
    # where a container or WSL is the setting, theirs ranks first
    ("$ docker run -it myimage python -c 'import torch'\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("Running in WSL2 (Ubuntu 22.04)\n" + LIBCUDA_MISSING, "wsl"),
    # a Kubernetes pod without libcuda was not given the GPU (session 27, fresh16/fresh18 in-sample)
    ("TensorFlow on kubernetes with the device plugin:\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("docker run --runtime nvidia works, but in a kubernetes pod:\n" + LIBCUDA_MISSING, "container-toolkit"),
    # (session 27 review) NVML's library too, and the other words for a cluster
    ("OSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n(gpustat)",
     "no-driver-or-device"),
    ("$ kubectl logs gpu-pod\nOSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory",
     "container-toolkit"),
    ("k3s node, pod with nvidia.com/gpu: 1\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("I1120 main.go:256] Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: cannot open "
     "shared object file: No such file or directory", "container-toolkit"),
    # the other containers, and an image build (no GPU in `docker build`'s RUN steps)
    ("Step 8/24 : RUN python3 -c \"import tensorflow\"\n ---> Running in 08e7f4469a36\n" + LIBCUDA_MISSING,
     "container-toolkit"),
    ("$ singularity exec image.sif python train.py\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("$ apptainer run --bind /data ./pytorch_latest python train.py\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("srun --container-image=nvcr.io#nvidia/pytorch:24.01-py3 python t.py\n" + LIBCUDA_MISSING, "container-toolkit"),
    ("root@pve:~# pct enter 101 (proxmox LXC)\nnvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: "
     "cannot open shared object file: No such file or directory", "container-toolkit"),
    # WSL pinned by its Windows drive mount
    ("user@DESKTOP-ABC123:/mnt/c/Users/me/project$ python train.py\n" + LIBCUDA_MISSING, "wsl"),
])
def test_the_drivers_own_libraries_missing_is_the_drivers_layer(text, first):
    assert ids(text)[:1] == [first], ids(text)


@pytest.mark.parametrize("text", [
    # the unversioned libcuda.so is a developer symlink that WSL and some images lack while the driver works
    "Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared object file: No such file "
    "or directory",
    # TensorFlow's start-up warning on a CPU-only run, before the real error
    "W tensorflow/stream_executor/platform/default/dso_loader.cc:60] Could not load dynamic library 'libcuda.so.1'; "
    "dlerror: libcuda.so.1: cannot open shared object file: No such file or directory",
])
def test_not_the_drivers_layer_for_a_symlink_or_a_warning(text):
    assert "no-driver-or-device" not in ids(text), ids(text)


@pytest.mark.parametrize("text,strict", [
    # Kokkos's start-up check (Kokkos_Cuda_Instance.cpp), round 21 (fresh19, in-sample)
    ("Kokkos::Cuda::initialize ERROR: likely mismatch of architecture", True),
    ("Kokkos::Cuda::initialize ERROR: running kernels compiled for compute capability 9.0 on device with compute "
     "capability 8.9 is not supported by CUDA!", True),
    # Kokkos <= 3.0 (kokkos#1944)
    ("Kokkos::Cuda::initialize ERROR: running kernels compiled for compute capability 0.0 (< 5.0) on device with "
     "compute capability 5.0 (>=5.0), this would give incorrect results!", True),
    # its warning (older code on a newer GPU runs) is not the error
    ("Kokkos::Cuda::initialize WARNING: running kernels compiled for compute capability 6.1 on device with compute "
     "capability 8.6 , this will likely reduce potential performance.", False),
])
def test_kokkos_arch_mismatch_is_no_kernel_image(text, strict):
    assert ("no-kernel-image" in ids(text)) is strict, ids(text)


@pytest.mark.parametrize("text,strict", [
    # cuBLAS's log line for CUBLAS_STATUS_INVALID_VALUE, round 21 (fresh19, in-sample)
    (" ** On entry to GEMM_EX  parameter number 9 had an illegal value\nCUBLAS error: 7", True),
    ("cublasSgemm failed\n ** On entry to SGEMM  parameter number 13 had an illegal value", True),
    ("THCudaCheck FAIL file=THCBlas.cu\n ** On entry to SGEMV  parameter number 6 had an illegal value", True),
    # CPU BLAS (OpenBLAS) prints the same words: not a CUDA matter
    ("Android openblas:\n ** On entry to SGEMM  parameter number 13 had an illegal value", False),
    # LAPACK routines are not cuBLAS's, even where CUDA is named (numpy's own wording)
    ("ValueError: On entry to DLASCL parameter number 4 had an illegal value\ntorch 2.1.0+cu121, CUDA available: True",
     False),
])
def test_cublas_invalid_value_log_line(text, strict):
    assert ("cublas-cudnn-status" in ids(text)) is strict, ids(text)


# torch's newer capability check (torch/cuda/__init__.py `_warn_unsupported_code`, read in the 2.13 wheel): session 28
TORCH_CC_WARN = ("UserWarning: Found GPU0 NVIDIA GeForce GTX 1060 6GB which is of compute capability (CC) 6.1.\n"
                 "The following list shows the CCs this version of PyTorch was built for and the hardware CCs it "
                 "supports:\n- 7.5 which supports hardware CC >=7.5,<8.0\n- 8.0 which supports hardware CC >=8.0,<9.0 "
                 "except {8.7}\n")


@pytest.mark.parametrize("text,first", [
    (TORCH_CC_WARN + "Your installed torch==2.14.0+cu130 does not include kernels for this GPU. Reinstall the same "
     "version against a CUDA build that does, e.g.:\ntorch.AcceleratorError: CUDA error: no kernel image is available "
     "for execution on the device", "torch-arch-unsupported"),
    # a release the version matrix does not know yet: torch's own words decide, not the matrix
    (TORCH_CC_WARN.replace("GTX 1060 6GB", "RTX 5090").replace("6.1.", "12.0.") + "No published PyTorch CUDA builds "
     "for release 2.19.0+cu134 support this GPU. Visit https://pytorch.org/get-started/locally/ to find a compatible "
     "release.\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "torch-arch-unsupported"),
    # the paste begins after the "Found GPU0" line
    ("Your installed torch==2.19.0+cu134 does not include kernels for this GPU. Reinstall the same version against a "
     "CUDA build that does, e.g.:\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "torch-arch-unsupported"),
    # Orin's 8.7: the aarch64 wheels' sm_80 kernels run there and the warning is reported harmless; the OOM is the fault
    ("UserWarning: Found GPU0 Orin which is of compute capability (CC) 8.7.\nNo published PyTorch CUDA builds for "
     "release 2.13.0+cu130 support this GPU.\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "out-of-memory"),
    # Orin named by its board where the paste starts below the "Found GPU0" line
    ("Jetson AGX Orin 32GB, JetPack 6.2\nUserWarning: Your installed torch==2.9.0 does not include kernels for this "
     "GPU.\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    # about a GPU other than GPU0 (a display card beside the compute GPU): only a hint beside the real error
    (TORCH_CC_WARN.replace("GPU0", "GPU1") + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "out-of-memory"),
])
def test_torch_newer_capability_warning(text, first):
    assert ids(text)[:1] == [first], ids(text)


@pytest.mark.parametrize("text,first", [
    # Jetson boards are not read for the wheel gate: the matrix's arch lists are the x86_64 wheels' (the cu130 aarch64
    # build has Thor's sm_110), and Tegra GPUs do not run other kernels of their major (review s28)
    ("Jetson AGX Thor, JetPack 7.0, torch 2.9.0+cu130 (pip, aarch64)\nFile \"/opt/v/mmcv/ops/nms.py\", line 27\n"
     "RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    # NVIDIA's own builds ("a0+<hash>.nvYY.MM", "+nvYY.MM") are not the PyPI wheels the matrix lists: they prove nothing
    ("RTX 5090, torch 2.5.0a0+872d972e41.nv24.08\nRuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "no-kernel-image"),
    ("RTX 5090, torch-2.0.0+nv23.05\nRuntimeError: CUDA error: no kernel image is available for execution on the "
     "device", "no-kernel-image"),
    # the PyPI wheel of that release does prove it
    ("RTX 5090, torch 2.5.0\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
     "torch-arch-unsupported"),
])
def test_the_wheel_gate_reads_only_wheels_and_gpus_the_matrix_describes(text, first):
    assert ids(text)[:1] == [first], ids(text)


@pytest.mark.parametrize("text,first", [
    # the L4T images' 0-byte placeholders that the nvidia runtime mounts JetPack's libraries over (fresh20, in-sample)
    ("./segnet-console: error while loading shared libraries: /usr/lib/aarch64-linux-gnu/libnvinfer.so.7: file too "
     "short\ndocker image that I use: dustynv/jetson-inference:r32.4.4", "container-toolkit"),
    ("root@2705d68d0852:/# in the container built FROM dustynv/jetson-inference\n/usr/lib/aarch64-linux-gnu/"
     "libcublas.so  file not recognized: File truncated", "container-toolkit"),
    # the driver's own library empty in an x86 container (R3Det_Tensorflow#78, review s28)
    ("docker run -it tf-image python demo.py\nImportError: /usr/lib/x86_64-linux-gnu/libcuda.so.1: file too short",
     "container-toolkit"),
    # a JetPack 4 (r32) image, whose CUDA comes only from the host through the runtime
    ("root@e22d0ae5ddbc:/# python\nStatus: Downloaded newer image for dustynv/ros:noetic-pytorch-l4t-r32.5.0\n"
     "OSError: libcurand.so.10: cannot open shared object file: No such file or directory", "container-toolkit"),
    # started with the runtime (a flag, compose, the daemon's default, the project's run script): the host lacks it
    ("docker run --runtime nvidia -it dustynv/jetson-inference:r32.4.4\n./imagenet: error while loading shared "
     "libraries: /usr/lib/aarch64-linux-gnu/libnvinfer.so.7.1.3 file too short", "missing-shared-library"),
    ("services:\n  app:\n    image: dustynv/jetson-inference:r32.4.4\n    runtime: nvidia\n./imagenet: error while "
     "loading shared libraries: /usr/lib/aarch64-linux-gnu/libnvinfer.so.7.1.3 file too short",
     "missing-shared-library"),
    ("$ docker/run.sh\n./imagenet: error while loading shared libraries: /usr/lib/aarch64-linux-gnu/libnvinfer.so.7"
     ".1.3 file too short\n(dustynv/jetson-inference:r32.4.4 in the container)", "missing-shared-library"),
    # no container at all: the file is damaged on the host (review s28)
    ("Jetson Nano 4GB, JetPack 4.6.1, no docker, after an apt upgrade was interrupted by a power cut\nImportError: "
     "/usr/lib/aarch64-linux-gnu/libnvinfer.so.8: file too short", "missing-shared-library"),
    ("GH200 (aarch64), pip install in a venv\nOSError: /usr/lib/aarch64-linux-gnu/libcudnn.so.9: file too short",
     "missing-shared-library"),
    # an r32 image on a JetPack 5 host: the image does not match the host's L4T release
    ("JetPack 5.1.2 [L4T 35.4.1]\n$ docker run -it dustynv/ros:noetic-pytorch-l4t-r32.7.1\nOSError: libcurand.so.10: "
     "cannot open shared object file: No such file or directory", "missing-shared-library"),
    # a Jetson host outside any container
    ("Jetpack 4.4 DP [L4T 32.4.2] on a Jetson Nano\n./darknet: error while loading shared libraries: "
     "libcudart.so.10.0: cannot open shared object file: No such file or directory", "missing-shared-library"),
    # a truncated CUDA library elsewhere (a broken download on x86), and the loader's other wording for it
    ("/usr/lib/x86_64-linux-gnu/libcudnn.so.8: file too short\ncollect2: error: ld returned 1 exit status",
     "missing-shared-library"),
    ("OSError: /opt/venv/lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.12: cannot read file data: "
     "Input/output error", "missing-shared-library"),
])
def test_empty_libraries_the_runtime_should_have_mounted(text, first):
    assert ids(text)[:1] == [first], ids(text)


def test_a_users_own_truncated_build_output_is_not_a_cuda_library():
    # an interrupted build truncates the user's own objects: no CUDA library is named (review s28)
    text = "/usr/bin/ld: build/libmyops.so: file not recognized: File truncated\ncollect2: error: ld returned 1 exit status"
    assert "missing-shared-library" not in answer(text, strict=True), answer(text, strict=True)


@pytest.mark.parametrize("text,first", [
    # an extension imported before torch cannot find torch's own libc10; once torch is imported, its undefined symbol
    # is the fault (flash-attention#1644, fresh20, in-sample)
    ("python -c 'import flash_attn_2_cuda'\nImportError: libc10.so: cannot open shared object file: No such file or "
     "directory\npython -c 'import torch; import flash_attn_2_cuda'\nImportError: /home/u/.local/lib/python3.10/"
     "site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN3c105ErrorC2ENS_14SourceLocationESs", "undefined-symbol"),
    # alone it is still the loader's failure (the import order), and answered as such
    ("ImportError: libc10.so: cannot open shared object file: No such file or directory", "missing-shared-library"),
    # a CUDA library beside an undefined symbol elsewhere stays the loader's failure
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\nundefined symbol: "
     "cudaGetDeviceCount", "missing-shared-library"),
])
def test_torchs_own_library_missing_is_the_import_order(text, first):
    assert ids(text)[:1] == [first], ids(text)


@pytest.mark.parametrize("text", [
    # not torch's own (review s28): torchaudio's library, and libtorch_cuda_cu that torch >= 1.13 no longer has
    "OSError: /opt/v/lib/python3.10/site-packages/torchaudio/lib/libtorchaudio.so: cannot open shared object file: No "
    "such file or directory\nundefined symbol: _ZN2at4_ops5zeros4callEv",
    "ImportError: libtorch_cuda_cu.so: cannot open shared object file: No such file or directory\nundefined symbol: "
    "_ZN3c104cuda9SetDeviceEi",
    # torch itself failing to load its library (a broken install), and a libtorch C++ program (rpath)
    "File \"/opt/v/lib/python3.10/site-packages/torch/__init__.py\", line 229, in <module>\n    from torch._C import *\n"
    "ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory\nundefined symbol: "
    "cudaGetDeviceCount",
    "./example-app: error while loading shared libraries: libc10.so: cannot open shared object file: No such file or "
    "directory\nundefined symbol: _ZN3c104cuda9SetDeviceEi",
])
def test_other_libraries_and_torch_itself_stay_the_loaders_failure(text):
    # an undefined symbol elsewhere in the report does not outrank a library the loader really could not find
    assert ids(text)[:1] == ["missing-shared-library"], ids(text)


def test_recorded_extension_before_torch_is_the_loader_with_the_import_order_named():
    # recorded on the CI-type machine (tests/data/libs/README.md, session 28)
    text = (Path(__file__).parent / "data" / "libs" / "s28_libc10_before_torch.txt").read_text()
    assert "OSError: libc10.so: cannot open shared object file" in text
    assert answer(text, strict=True)[:1] == ["missing-shared-library"], answer(text, strict=True)


def test_real_extension_before_torch_cannot_find_libc10(tmp_path):
    # live: a library linked to torch's libc10 (as every torch extension is) fails to load before `import torch` with
    # the loader's words, and loads after it; explain reads the real failure as the loader's, with the order named
    import shutil
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    lib = Path(torch.__file__).parent / "lib"
    (tmp_path / "ext.cpp").write_text('extern "C" int ext_answer() { return 42; }\n')
    so = tmp_path / "libext.so"
    subprocess.run([cxx, "-shared", "-fPIC", str(tmp_path / "ext.cpp"), "-Wl,--no-as-needed", f"-L{lib}", "-lc10",
                    "-o", str(so)], check=True, timeout=120)
    env = {k: v for k, v in __import__("os").environ.items() if k != "LD_LIBRARY_PATH"}
    before = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(so)!r})"], capture_output=True,
                            text=True, timeout=120, env=env)
    assert before.returncode != 0 and "libc10.so: cannot open shared object file" in before.stderr, before.stderr
    after = subprocess.run([sys.executable, "-W", "ignore", "-c",
                            f"import torch, ctypes; print(ctypes.CDLL({str(so)!r}).ext_answer())"],
                           capture_output=True, text=True, timeout=300, env=env)
    assert after.returncode == 0 and after.stdout.strip().endswith("42"), after.stderr
    assert answer(before.stderr, strict=True)[:1] == ["missing-shared-library"], answer(before.stderr, strict=True)
    m = next(m for m in rank.matches(SIGS, SCANNER.scan_text(before.stderr)) if m.id == "missing-shared-library")
    from cudadoctor.explain import personal

    assert any("import torch before" in n for n in personal.personalise(m, {}, personal.load_matrix()).notes)


@pytest.mark.parametrize("text,first", [
    # a driver version read as 0.0 is no driver at all (NVIDIA/warp#672, fresh21, in-sample)
    ("Warp CUDA error: Could not open libcuda.so.\nWarp 1.7.0 initialized:\n   CUDA Toolkit 12.8, Driver 0.0 (insufficient "
     "CUDA driver version!)\nThe minimum required CUDA driver version is 12.0, but the installed CUDA driver version is "
     "0.0.", "no-driver-or-device"),
    # a real old driver stays driver-too-old
    ("Warp 1.7.0 initialized:\n   CUDA Toolkit 12.8, Driver 11.4 (insufficient CUDA driver version!)\nThe minimum "
     "required CUDA driver version is 12.0, but the installed CUDA driver version is 11.4.", "driver-too-old"),
])
def test_a_driver_version_of_zero_is_no_driver(text, first):
    assert ids(text)[:1] == [first], ids(text)


def test_real_torch_capability_warning_recorded_on_the_h200():
    # tests/data/h200/README.md, session 28: torch 2.11's own check on a real H200 with an arch list lacking sm_90
    text = (Path(__file__).parent / "data" / "h200" / "s28_torch_cc_warning.txt").read_text()
    assert answer(text, strict=True)[:1] == ["torch-arch-unsupported"], answer(text, strict=True)
    # the paste that holds only the newer warning (its first five lines): torch's own words still decide
    first = "\n".join(text.splitlines()[:5])
    assert "is not compatible with the current PyTorch installation" not in first
    assert answer(first, strict=True)[:1] == ["torch-arch-unsupported"], answer(first, strict=True)
    # and its last line alone, torch 2.11's ending of it
    last = text.splitlines()[4]
    assert last.startswith("Please follow the instructions"), last
    assert answer(last, strict=True)[:1] == ["torch-arch-unsupported"], answer(last, strict=True)


def test_real_libc10_before_torch_recorded_on_the_h200():
    # the same import-order failure with the CUDA torch on the GPU machine: the loader's failure, the order named
    text = (Path(__file__).parent / "data" / "h200" / "s28_libc10_before_torch.txt").read_text()
    assert answer(text, strict=True)[:1] == ["missing-shared-library"], answer(text, strict=True)
    m = next(m for m in rank.matches(SIGS, SCANNER.scan_text(text)) if m.id == "missing-shared-library")
    assert m.captures.get("torch_lib") == "libc10.so"


@pytest.mark.parametrize("text,first", [
    # (review s28b) Warp's warning alone, its sentence ending in a full stop; other spellings of a zero driver version
    ("Warp UserWarning:\n   Insufficient CUDA driver version.\n   The minimum required CUDA driver version is 12.0, but the "
     "installed CUDA driver version is 0.0.\n", "no-driver-or-device"),
    ("CUDA Driver Version:0.00\nCUDA Runtime Version: 12.4", "no-driver-or-device"),
    # the literals kept for speed still read the wordings they stood for
    ("I get an 804 error when running torch in the container", "forward-compat"),
    ("glog: Check failed: error == cudaSuccess 35vs0", "driver-too-old"),
    ("We have 8 H100 GPUs on this box.\nUserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). "
     "Did you run some cuda functions before calling NumCudaDevices() that might have already set an error?",
     "fabric-manager"),
    ("GCP a3-highgpu-8g\nUserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some "
     "cuda functions before calling NumCudaDevices() that might have already set an error?", "fabric-manager"),
    # a CUDA_HOME ending in "/" doubles the slash of a truncated library's path
    ("ImportError: /usr/local/cuda//lib64/libcublasLt.so.12: file too short", "missing-shared-library"),
])
def test_review_s28b_wordings(text, first):
    assert ids(text)[:1] == [first], ids(text)


def test_truncated_library_path_is_read_whole_with_a_double_slash():
    text = "ImportError: /usr/local/cuda//lib64/libcublasLt.so.12: file too short"
    m = next(m for m in rank.matches(SIGS, SCANNER.scan_text(text)) if m.id == "missing-shared-library")
    assert versions.reading(m.captures, "short_lib") == "/usr/local/cuda//lib64/libcublasLt.so.12", m.captures


@pytest.mark.parametrize("text,first", [
    # (round 25) insmod's ENODEV: nvidia.ko found no GPU to bind (a GPU-less cloud instance), with NVRM's older wording
    ("modprobe: ERROR: could not insert 'nvidia': No such device\n[ 2010.61] NVRM: No NVIDIA graphics adapter found!",
     "no-driver-or-device"),
    ("GpuContext::Startup\nmodprobe: ERROR: could not insert 'nvidia': No such device", "no-driver-or-device"),
    # ...but NVRM saying why it refused a GPU that is there is the install's fault
    ("modprobe: ERROR: could not insert 'nvidia': No such device\nNVRM: The NVIDIA probe routine was not called for "
     "1 device(s).", "driver-install"),
    ("NVRM: The NVIDIA GeForce GT 730 GPU installed in this system is not supported by the 535.54.03 NVIDIA Linux "
     "driver release.\nmodprobe: ERROR: could not insert 'nvidia': No such device", "driver-install"),
    # other insmod failures stay the install's
    ("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service", "driver-install"),
    ("modprobe: ERROR: could not insert 'nvidia': Exec format error", "driver-install"),
    # NCCL's P2P transport failing to map a peer's memory: NCCL's failure, whatever CUDA code it carries
    ("node1:22671:22795 [1] transport/p2p.cu:431 WARN failed to open CUDA IPC handle : 30 unknown error", "nccl"),
    # CUDA's legacy 30 elsewhere is still read
    ("CUDA error 30: unknown error", "device-lost"),
])
def test_round25_root_causes(text, first):
    assert answer(text, strict=True)[:1] == [first], answer(text, strict=True)


@pytest.mark.parametrize("text,not_first", [
    # (review s29) NVRM found the GPU but could not bring it up: not a missing GPU
    ("modprobe: ERROR: could not insert 'nvidia': No such device\nNVRM: This PCI I/O region assigned to your NVIDIA "
     "device is invalid:\nNVRM: BAR1 is 0M @ 0x0 (PCI:0000:0b:00.0)", "no-driver-or-device"),
    ("modprobe: ERROR: could not insert 'nvidia': No such device\nNVRM: The NVIDIA probe routine failed for 1 "
     "device(s).\nNVRM: None of the NVIDIA graphics adapters were initialized!", "no-driver-or-device"),
    # Triton's CUDA shared memory, not NCCL
    ("tritonclient.utils.InferenceServerException: [StatusCode.INVALID_ARGUMENT] failed to register CUDA shared memory "
     "region 'output0_data': failed to open CUDA IPC handle: invalid argument", "nccl"),
    # apt's nvcc shown, another toolkit used: the gate proves nothing
    ("nvcc --version\nCuda compilation tools, release 11.5, V11.5.119\nbut the build uses /usr/local/cuda-12.4/bin/nvcc "
     "-gencode arch=compute_90,code=sm_90 and fails", "nvcc-unsupported-arch"),
])
def test_review_s29_not_these(text, not_first):
    # no match claims it (a low-confidence guess of the classifier may still name it)
    assert not_first not in answer(text, strict=True), answer(text, strict=True)


def test_review_s29_a_blacklisted_nouveau_is_not_nouveau_holding_the_gpu():
    text = ("I blacklisted nouveau and rebooted. This is an AWS t3 instance. modprobe: ERROR: could not insert 'nvidia': "
            "No such device")
    assert answer(text, strict=True)[:1] == ["no-driver-or-device"], answer(text, strict=True)
