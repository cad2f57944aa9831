"""A wording that points to one of its signature's causes (and fixes) puts it first: explain's "likely causes, most
likely first" follows what the report says, not only the signature's fixed order (`cause = N` / `fix = N` on a
pattern, 1-based)."""

from __future__ import annotations

from pathlib import Path

import pytest

from explain_sets import SCANNER, SIGS
from cudadoctor.explain import rank, render, signatures

H200 = Path(__file__).parent / "data" / "h200"


def first(text: str):
    return rank.rank(rank.matches(SIGS, SCANNER.scan_text(text)))[0]


def test_cuinit_999_without_nvidia_uvm_lists_the_uvm_cause_and_fix_first():
    # recorded on an H200 with /dev/nvidia-uvm unopenable (session 31): before, this cause was the sixth of six
    m = first((H200 / "s31_cuinit_no_uvm.txt").read_text())
    assert m.id == "no-driver-or-device"
    assert "nvidia_uvm" in m.causes[0] and "modprobe nvidia-uvm" in m.fixes[0]
    assert sorted(m.causes) == sorted(m.signature.causes) and len(m.fixes) == len(m.signature.fixes)
    d = render.match_dict(m)
    assert d["causes"][0] == m.causes[0] and d["fixes"][0] == m.fixes[0]
    assert "1. CUDA_ERROR_UNKNOWN (999" in render.text_report([m], {}, [], SCANNER.scan_text("x"), True)


@pytest.mark.parametrize("text, sig, cause_word, fix_word", [
    ("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service", "driver-install", "Secure Boot",
     "mokutil"),
    ("==> ERROR: Missing 6.8.0-45-generic kernel headers for module nvidia/550.120.", "driver-install",
     "Kernel headers", "headers"),
    ("Display driver nvlddmkm stopped responding and has successfully recovered.", "device-lost", "Windows TDR",
     "TdrDelay"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "container-toolkit", "not installed", "nvidia-ctk"),
    # (session 33) the module flavour, the host's missing UVM node, and WSL's "no driver" (recorded live on the H200:
    # a WSL report read on a machine that is not WSL still lists WSL's own causes)
    ("NVRM: installed in this system requires use of the NVIDIA open kernel modules.", "driver-install",
     "module flavour", "open modules"),
    ("error gathering device information while adding custom device \"/dev/nvidia-uvm-tools\": lstat "
     "/dev/nvidia-uvm-tools: no such file or directory", "no-driver-or-device", "nvidia_uvm", "modprobe nvidia-uvm"),
    ("solve problem like \"Found no NVIDIA driver on your system.\" in WSL2", "wsl", "WSL itself is outdated",
     "wsl --update"),
])
def test_a_wording_puts_its_cause_and_fix_first(text, sig, cause_word, fix_word):
    m = first(text)
    assert m.id == sig and cause_word in m.causes[0] and fix_word in m.fixes[0]


def test_without_a_pointer_the_signatures_order_stays():
    m = first("RuntimeError: Found no NVIDIA driver on your system.")
    assert m.cause == 0 and m.causes == m.signature.causes and m.fixes == m.signature.fixes


def test_the_heaviest_wording_that_names_a_cause_decides():
    # the Secure Boot line (weight 0.8+) and a kernel-headers hint: Secure Boot's cause first
    m = first("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
              "==> ERROR: Missing 6.8.0-45-generic kernel headers for module nvidia/550.120.")
    assert m.id == "driver-install" and "Secure Boot" in m.causes[0]


BASE = ('id = "x"\ntitle = "t"\nlayer = "l"\npriority = 1\nmeaning = "m"\ncauses = ["a", "b"]\nconfirm = ["c"]\n'
        'fixes = ["f"]\n[[pattern]]\ncontains = ["x"]\n')


@pytest.mark.parametrize("extra", ["cause = 3", "cause = 0.5", "cause = true", "fix = 2", "fix = -1"])
def test_a_pointer_outside_the_lists_is_refused(tmp_path, extra):
    (tmp_path / "x.toml").write_text(BASE + extra + "\n")
    with pytest.raises(signatures.SignatureError, match="must be the number of one of"):
        signatures.load_dir(tmp_path)


def test_a_pointer_inside_the_lists_loads(tmp_path):
    (tmp_path / "x.toml").write_text(BASE + "cause = 2\nfix = 1\n")
    (s,) = signatures.load_dir(tmp_path)
    assert s.patterns[0].cause == 2 and s.patterns[0].fix == 1


def test_no_module_note_only_where_the_module_was_looked_for():
    # offline (no facts) explain said "no NVIDIA kernel module is loaded on this machine" without having looked
    from cudadoctor.explain import personal
    from cudadoctor.model import Fact

    m = first((H200 / "s31_cuinit_no_uvm.txt").read_text())
    note = "no NVIDIA kernel module is loaded on this machine"
    assert note not in personal.personalise(m, {}).notes
    assert note in personal.personalise(m, {"kernel_module": Fact.not_found("/proc", "absent")}).notes
    assert note not in personal.personalise(m, {"kernel_module": Fact.failed("/proc", "cannot read")}).notes
