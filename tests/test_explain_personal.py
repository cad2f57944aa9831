"""Personalisation from facts (typed facts built in the test; no machine needed)."""

from __future__ import annotations

from cudadoctor.explain import personal, rank, scan, signatures
from cudadoctor.facts.types import EnvInfo, NvmlGpu, NvmlInfo, NvccInstall, ToolkitInfo, TorchInfo
from cudadoctor.model import Fact

SIGS = signatures.load()
SC = scan.Scanner(SIGS)


def match_of(text: str, sid: str):
    return next(m for m in rank.matches(SIGS, SC.scan_text(text)) if m.id == sid)


def nvml(cc: str, name: str = "NVIDIA GeForce RTX 5090", driver: str = "570.133.07", cuda: str = "12.8"):
    return Fact.found(NvmlInfo(driver_version=driver, cuda_driver_version=cuda, device_count=1,
                               gpus=[NvmlGpu(index=0, name=name, compute_capability=cc)]))


def torch(version: str, cuda, archs: list, python: str = "/venv/bin/python"):
    return Fact.found(TorchInfo(python=python, installed=True, version=version, cuda=cuda, arch_list=archs))


OLD_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def test_facts_needed_only_for_strong_matches_and_torch_only_when_needed():
    oom = rank.matches(SIGS, SC.scan_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"))
    assert "torch" not in personal.facts_needed(oom)
    arch = rank.matches(SIGS, SC.scan_text("sm_120 is not compatible with the current PyTorch installation\n"))
    assert "torch" in personal.facts_needed(arch)


def test_arch_unsupported_names_gpu_and_a_wheel_that_has_it():
    m = match_of("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
                 "PyTorch installation.\n", "torch-arch-unsupported")
    facts = {"nvml": nvml("12.0"), "torch": torch("2.6.0+cu124", "12.4", OLD_ARCHS)}
    p = personal.personalise(m, facts, personal.load_matrix())
    assert any("12.0" in n for n in p.notes)
    assert p.commands and p.commands[0].startswith("/venv/bin/python -m pip install")
    assert "download.pytorch.org/whl/cu12" in p.commands[0] or "download.pytorch.org/whl/cu13" in p.commands[0]


def test_no_kernel_image_in_extension_names_the_binary():
    text = ('Traceback (most recent call last):\n  File "/opt/v/lib/python3.11/site-packages/flash_attn/'
            'flash_attn_interface.py", line 90, in _flash_attn_forward\n'
            "RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    m = match_of(text, "no-kernel-image")
    facts = {"nvml": nvml("8.6", "NVIDIA GeForce RTX 3090"), "torch": torch("2.8.0+cu128", "12.8", OLD_ARCHS + ["sm_100", "sm_120"])}
    p = personal.personalise(m, facts, personal.load_matrix())
    assert any("flash_attn" in n for n in p.notes)
    assert any(c.startswith('TORCH_CUDA_ARCH_LIST="8.6"') and c.endswith("flash_attn") for c in p.commands)


def test_toolkit_mismatch_points_cuda_home_at_matching_toolkit():
    m = match_of("The detected CUDA version (11.8) mismatches the version that was used to compile\n",
                 "nvcc-torch-mismatch")
    tk = ToolkitInfo(installs=[NvccInstall(nvcc="/usr/local/cuda-11.8/bin/nvcc", root="/usr/local/cuda-11.8", version="11.8"),
                               NvccInstall(nvcc="/usr/local/cuda-12.4/bin/nvcc", root="/usr/local/cuda-12.4", version="12.4")])
    facts = {"toolkit": Fact.found(tk), "torch": torch("2.5.1+cu124", "12.4", OLD_ARCHS), "env": Fact.found(EnvInfo())}
    p = personal.personalise(m, facts, personal.load_matrix())
    assert p.commands == ["export CUDA_HOME=/usr/local/cuda-12.4 PATH=/usr/local/cuda-12.4/bin:$PATH"]


def test_stub_library_on_ld_library_path_is_removed():
    m = match_of("CUDA driver is a stub library\n", "cuda-stub-library")
    env = EnvInfo(vars={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs:/opt/lib"})
    p = personal.personalise(m, {"env": Fact.found(env)}, None)
    assert p.commands == ["export LD_LIBRARY_PATH=/opt/lib"]


def test_missing_facts_never_raise():
    for m in rank.matches(SIGS, SC.scan_text("\n".join(
            ["no kernel image is available", "Torch not compiled with CUDA enabled", "invalid device ordinal",
             "Driver/library version mismatch", "CUDA_HOME environment variable is not set",
             "system not yet initialized", "CUDA out of memory", "/usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link",
             "The NVIDIA driver on your system is too old (found version 11040)"]))):
        for facts in ({}, {"torch": Fact.failed("torch", "boom"), "nvml": Fact.timeout("nvml")}):
            p = personal.personalise(m, facts, personal.load_matrix())
            assert not any("could not personalise" in n for n in p.notes), (m.id, p.notes)


def test_no_kernel_image_names_the_binary_the_scan_found():
    from cudadoctor.probes.scan import ScanFile, ScanInfo

    sp = "/venv/lib/python3.12/site-packages"
    info = ScanInfo(python="/venv/bin/python", site_packages=[sp], files=[
        ScanFile(f"{sp}/flash_attn_2_cuda.so", "flash_attn_2_cuda.so", "elf", ["sm_80"], []),
        ScanFile(f"{sp}/nvidia/cu13/lib/libcufft.so.12", "nvidia", "elf", ["sm_75"], [])])
    m = match_of("RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
                 "no-kernel-image")
    facts = {"nvml": nvml("9.0", name="NVIDIA H200", driver="580.159.04", cuda="13.0"),
             "torch": torch("2.11.0+cu130", "13.0", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]),
             "probe_scan": Fact.found(info)}
    p = personal.personalise(m, facts, personal.load_matrix())
    text = " ".join(p.notes)
    assert f"{sp}/flash_attn_2_cuda.so" in text and "libcufft" not in text


def test_torchs_own_library_names_the_import_order_not_an_install():
    # reproduced on this project's CI machine: a library linked to libc10 loads only after `import torch`
    m = match_of("ImportError: libc10.so: cannot open shared object file: No such file or directory\n",
                 "missing-shared-library")
    p = personal.personalise(m, {}, personal.load_matrix())
    assert any("import torch before" in n for n in p.notes), p.notes
    m = match_of("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n",
                 "missing-shared-library")
    assert not any("import torch" in n for n in personal.personalise(m, {}, personal.load_matrix()).notes)


def test_only_torchs_own_library_names_the_import_order():
    # torchaudio's library (loaded by torch.ops.load_library after torch) and a broken torch install are not the order
    for text in ["OSError: /opt/v/lib/python3.10/site-packages/torchaudio/lib/libtorchaudio.so: cannot open shared "
                 "object file: No such file or directory\n",
                 "File \"/opt/v/lib/python3.10/site-packages/torch/__init__.py\", line 229, in <module>\n"
                 "ImportError: libtorch_cuda.so: cannot open shared object file: No such file or directory\n"]:
        m = match_of(text, "missing-shared-library")
        notes = personal.personalise(m, {}, personal.load_matrix()).notes
        assert not any("import torch before" in n for n in notes), notes


def test_a_library_named_at_a_sentences_end_loses_the_full_stop():
    m = match_of("Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared object file\n",
                 "missing-shared-library")
    notes = personal.personalise(m, {}, personal.load_matrix()).notes
    assert any(n.startswith("library named: lib") and not n.endswith(".") for n in notes), notes
