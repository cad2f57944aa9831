"""Scanning: ranking root cause first, robustness (junk, invalid UTF-8, long lines), bounded work."""

from __future__ import annotations

import io
import time

from cudadoctor.explain import rank, scan, signatures

SIGS = signatures.load()
SC = scan.Scanner(SIGS)

ARCH = ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
        "installation.\nThe current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n")
NOKERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"


def ids(text_or_res) -> list:
    res = SC.scan_text(text_or_res) if isinstance(text_or_res, str) else text_or_res
    return [m.id for m in rank.matches(SIGS, res)]


def test_root_cause_first_even_when_symptom_comes_later_and_more_often():
    log = "epoch 1\n" * 100 + ARCH + "step\n" * 50 + NOKERNEL * 20
    assert ids(log)[:2] == ["torch-arch-unsupported", "no-kernel-image"]


def test_symptom_first_in_text_still_ranks_below_cause():
    assert ids(NOKERNEL + ARCH)[:2] == ["torch-arch-unsupported", "no-kernel-image"]


def test_explains_lifts_visible_devices_over_no_device():
    t = "CUDA_VISIBLE_DEVICES=2 python main.py\nerror=38 : no CUDA-capable device is detected\n"
    assert ids(t)[0] == "visible-devices"
    assert ids("error=38 : no CUDA-capable device is detected\n")[0] == "no-driver-or-device"


def test_context_required_patterns():
    assert "out-of-memory" not in ids("the host ran out of memory while unpacking\n")
    assert ids("RuntimeError: cuda runtime: out of memory\n")[0] == "out-of-memory"


def test_evidence_line_numbers_and_captures():
    res = SC.scan_text("a\nb\n" + ARCH)
    m = rank.matches(SIGS, res)[0]
    assert m.id == "torch-arch-unsupported"
    assert m.evidence[0].line_no == 3
    assert m.captures["sm"] == "sm_120"
    assert "sm_90" in m.captures["arch_list"]


def test_windows_paths_other_languages_and_crlf():
    t = ("训练开始\r\nC:\\Users\\me\\envs\\sd\\lib\\site-packages\\torch\\cuda\\__init__.py:129: UserWarning: "
         "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).\r\nошибка\r\n")
    found = rank.matches(SIGS, SC.scan_text(t))
    assert found[0].id == "driver-too-old" and found[0].captures["found"] == "11040"


def test_invalid_utf8_and_binary_junk():
    blob = bytes(range(256)) * 64 + b"\xff\xfe\x00" + NOKERNEL.encode() + b"\xc3\x28\x80" * 100
    res = SC.scan_stream(io.BytesIO(blob))
    assert ids(res) == ["no-kernel-image"]


def test_hit_across_block_boundary():
    pad = b"x" * 100 + b"\n"
    head = pad * ((scan.CHUNK - 40) // len(pad))
    data = head + b"y" * (scan.CHUNK - len(head) - 30) + NOKERNEL.encode()
    assert ids(SC.scan_stream(io.BytesIO(data))) == ["no-kernel-image"]


def test_very_long_line_is_cut_without_losing_or_duplicating_hits():
    for offset in (0, scan.CHUNK - 10, 2 * scan.CHUNK + 7, 3 * scan.CHUNK - scan.OVERLAP // 2):
        data = b"p" * offset + b" Failed to initialize NVML: Unknown Error " + b"q" * (3 * scan.CHUNK)
        res = SC.scan_stream(io.BytesIO(data))
        found = rank.matches(SIGS, res)
        assert [m.id for m in found] == ["nvml-unknown-error"], offset
        assert found[0].count == 1
        assert len(found[0].evidence[0].text) <= scan.SHOW + 2


def test_blank_input():
    assert SC.scan_text("  \n\t\n").blank
    assert SC.scan_stream(io.BytesIO(b"")).blank
    assert not SC.scan_text("x").blank


def test_counts_and_evidence_bounded():
    res = SC.scan_text(NOKERNEL * 3000)
    m = rank.matches(SIGS, res)[0]
    assert m.count == 3000 and len(m.evidence) <= scan.MAX_EVIDENCE
    res = SC.scan_text(NOKERNEL * 20000)  # past the per-block budget: counted as a lower bound
    m = rank.matches(SIGS, res)[0]
    assert m.count >= scan.MAX_TRIES and res.truncated_counts


def test_no_match_gives_closest():
    res = SC.scan_text("my cuda kernel image is weird")
    assert rank.matches(SIGS, res) == []
    close = rank.closest(SIGS, "my cuda kernel image is weird")
    assert close and close[0][1].id == "no-kernel-image"


def test_eight_megabytes_fast():
    line = b"2024-01-01 INFO step 1234 loss 0.123 lr 3e-4 tokens/s 5123 device cuda:0 nvidia memory\n"
    data = line * (8 * 1024 * 1024 // len(line)) + NOKERNEL.encode()
    t0 = time.perf_counter()
    res = SC.scan_stream(io.BytesIO(data))
    assert time.perf_counter() - t0 < 3.0
    assert ids(res) == ["no-kernel-image"]
    assert res.lines == data.count(b"\n")


# Messages as current libraries print them (not in the thread corpus): the patterns must cover the
# family, not only the corpus strings.
VARIANTS = [
    ("nvcc fatal   : Value 'sm_120' is not defined for option 'gpu-architecture'", "nvcc-unsupported-arch"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ARCH_MISMATCH when calling `cublasGemmEx(...)`", "cublas-cudnn-status"),
    ("ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory", "missing-shared-library"),
    ("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", "no-driver-or-device"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "container-toolkit"),
    ("Failed to initialize NVML: Driver Not Loaded", "no-driver-or-device"),
    ("../aten/src/ATen/native/cuda/Loss.cu:250: block: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
     "RuntimeError: CUDA error: device-side assert triggered", "illegal-memory-access"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
     "79.19 GiB of which 2.75 MiB is free.", "out-of-memory"),
    ("RuntimeError: CUDA error: out of memory", "out-of-memory"),
    ("ptxas fatal   : Unsupported .version 8.7; current version is '8.4'", "ptx-toolchain-too-new"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized",
     "fabric-manager"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "device-lost"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.6, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown", "driver-too-old"),
    ("torch._C._cuda_init()\nRuntimeError: The NVIDIA driver on your system is too old (found version 12020).",
     "driver-too-old"),
]


def test_variants_of_the_families():
    for text, expect in VARIANTS:
        assert ids(text + "\n")[:1] == [expect], (text, ids(text))


def test_large_blocks_find_what_small_ones_find(monkeypatch):
    """A pasted error is searched literal by literal, a log block with the anchored trie regex:
    both must report the same matches, evidence lines and counts on every real text we hold."""
    from explain_sets import CORPUS, DEV, HELDOUT, UNSEEN, cases

    texts = [c["text"] for p in (CORPUS, HELDOUT, UNSEEN, DEV) for c in cases(p)]

    def seen(text):
        found = rank.matches(SIGS, scan.Scanner(SIGS).scan_text(text))
        return [(m.id, m.confidence, m.count, [h.line_no for h in m.evidence]) for m in found]

    small = [seen(t) for t in texts]
    monkeypatch.setattr(scan, "SMALL_BLOCK", -1)
    assert [seen(t) for t in texts] == small


def test_anchor_leaves_a_selective_suffix():
    for lit in (b"cuda out of memory", b"could not select device driver", b"error 802", b"wsl", b"+cpu"):
        a = scan._anchor(lit)
        assert len(lit) - a >= min(6, len(lit)), (lit, a)
