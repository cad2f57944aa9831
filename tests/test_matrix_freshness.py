"""Freshness: what this machine has that the version data does not know, said once (matrix.freshness),
and the matrix steps that judged from the nearest row say so ("unverified" in summary and evidence).

The data stops at torch 2.15, CUDA 13.5, driver R620 (CUDA 13.5), cuDNN 9.28, nvcc targets and host
compilers 13.5 (matrix/*.toml, checked against PyPI 2026-11-30). The newer versions below (torch 2.16,
CUDA 13.6, R625, cuDNN 9.30, cc 11.5) do not exist yet: they stand for "the next release".
"""

from __future__ import annotations

import json

import pytest
from fakes.system import FakeCmd
from helpers import check, ids
from scenarios import h200, torch_stages
from test_matrix_checks import facts, finding, results

from cudadoctor.facts.types import TorchDevice, TorchInfo
from cudadoctor.matrix import load
from cudadoctor.matrix.freshness import newer_than_data
from cudadoctor.model import Status

H200 = [("NVIDIA H200", "9.0")]
ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def torch(version="2.15.0+cu132", cuda="13.2", cudnn=92600, arch=None):
    return TorchInfo(installed=True, version=version, cuda=cuda, cudnn_version=cudnn,
                     arch_list=ARCH if arch is None else arch, devices=[TorchDevice(0, "NVIDIA H200", "9.0")])


def fresh(res):
    return res["matrix.freshness"].findings[0]


def unverified(f) -> bool:
    return bool(f.evidence.get("matrix_row", {}).get("unverified")) and "unverified" in f.summary


def test_data_stops_at_this_month():
    s = load().data_stops_at()
    assert (s["torch"], s["cuda"], s["driver_branch"], s["driver_cuda"], s["cudnn"]) == ("2.15", "13.5", "R620", "13.5", "9.28")
    assert s["host_compilers"] == "13.5" and s["nvcc_targets"] == "13.5" and s["checked"] == "2026-11-30"


def test_newest_released_stack_is_covered():
    # torch 2.15.0 from PyPI (cu132, cuDNN 9.26.0.51) on an R620 driver with nvcc 13.5 and gcc 16: all known
    res = results(facts("620.70.06", "13.5", H200, torch(), nvcc=["13.5"], gcc="16.1.0"))
    f = fresh(res)
    assert (f.id, f.status) == ("matrix.freshness.ok", Status.OK)
    assert f.evidence["data_stops_at"]["torch"] == "2.15"
    assert not any(unverified(x) for r in res.values() for x in r.findings)
    assert {r.status for r in res.values()} == {Status.OK}


def test_torch_newer_than_data_is_one_warning_and_marks_the_cudnn_verdict():
    res = results(facts("620.70.06", "13.5", H200, torch("2.16.0+cu132", "13.2", 92600)))
    f = fresh(res)
    assert (f.id, f.status) == ("matrix.freshness.older-than-installed", Status.WARN)
    assert "torch 2.16.0" in f.summary and "unverified" in f.summary
    assert f.fix.commands[0] == "pip install --upgrade cudadoctor"
    assert [i["what"] for i in f.evidence["newer_than_data"]] == ["torch"]
    # cuDNN pin judged from 2.15 cu132's row (9.26.0.51): marked, still OK
    c = finding(res, "matrix.cudnn.ok")
    assert unverified(c) and c.evidence["matrix_row"]["judged_from"] == "torch 2.15 cu132's row"
    # the live arch list and a CUDA in the data need nothing from a torch row: not marked
    assert not unverified(finding(res, "matrix.torch-gpu.ok"))
    assert not unverified(finding(res, "matrix.driver-torch.ok"))
    # said once: only the freshness step warns
    assert [r.id for r in res.values() if r.status is Status.WARN] == ["matrix.freshness"]


def test_cudnn_older_than_the_nearest_pin_is_flagged_unverified():
    res = results(facts("620.70.06", "13.5", H200, torch("2.16.0+cu132", "13.2", 91900)))
    f = finding(res, "matrix.cudnn.not-the-wheels")
    assert f.status is Status.WARN and unverified(f) and f.evidence["wheel_cudnn"] == "9.26.0.51"
    # 2.16's own pin is unknown: the fix reinstalls that torch (and so its pins), not 2.15's cuDNN
    assert f.fix.commands == ("pip install --force-reinstall 'torch==2.16.0+cu132' "
                              "--index-url https://download.pytorch.org/whl/cu132",)
    assert fresh(res).evidence["unverified_steps"] == {"matrix.cudnn": ["torch 2.15 cu132's row"]}


def test_cuda_newer_than_data_judges_the_driver_from_the_last_row():
    # torch built for CUDA 13.6 on an R620 driver (CUDA 13.5): minor-version compatibility (a rule, not data),
    # with the 13.5 GA minimum (620.70.06) as the nearest-row driver to name in the fix
    res = results(facts("620.70.06", "13.5", H200, torch("2.16.0+cu136", "13.6")))
    f = finding(res, "matrix.driver-torch.minor-compat")
    assert f.status is Status.WARN and unverified(f)
    assert f.evidence["min_driver_full"] == "620.70.06" and "sudo apt install nvidia-driver-620" in f.fix.commands
    whats = [i["what"] for i in fresh(res).evidence["newer_than_data"]]
    assert whats == ["torch", "torch's CUDA"]


def test_driver_newer_than_data_with_its_own_cuda_is_info_only():
    # a driver of a branch after R620 that reports its CUDA: every verdict stands (backward compatible)
    t = torch("2.11.0+cu130", "13.0", 91900)
    res = results(facts("625.10.02", "13.6", H200, t))
    f = fresh(res)
    assert (f.id, f.status) == ("matrix.freshness.newer-not-needed", Status.OK)
    assert ids_of(res, "matrix.driver-torch") == {("matrix.driver-torch.ok", Status.OK)}


def test_newer_torch_that_no_verdict_needed_is_info_but_alone_it_warns():
    # torch 2.16 with its own arch list and no cuDNN loaded: no matrix step needed a 2.16 row
    t = torch("2.16.0+cu132", "13.2", None)
    res = results(facts("620.70.06", "13.5", H200, t))
    assert (fresh(res).id, fresh(res).status) == ("matrix.freshness.newer-not-needed", Status.OK)
    # run alone (`--only matrix.freshness`), it cannot know what the other steps needed: it warns
    from cudadoctor.checks.registry import ordered, run_steps

    alone = run_steps([s for s in ordered() if s.id == "matrix.freshness"],
                      facts("620.70.06", "13.5", H200, t))
    assert alone[0].findings[0].id == "matrix.freshness.older-than-installed"


def ids_of(res, step):
    return {(x.id, x.status) for x in res[step].findings}


def test_driver_beyond_the_branch_table_without_its_cuda_is_unknown_not_too_old():
    m = load()
    assert m.driver_runs_cuda("630.10", "13.6") == "unknown"   # R630 may well run 13.6
    assert m.driver_runs_cuda("630.10", "13.0") == "full"      # but surely what R620 runs
    assert m.driver_runs_cuda("620.70.06", "13.6") == "minor-version"  # R620 is in the data: 13.5
    assert m.driver_runs_cuda("617.14", "13.5") == "minor-version"  # a Windows R615 number, not beyond
    items = newer_than_data(m, driver="630.10")
    assert [(i["what"], bool(i["affects"])) for i in items] == [("driver", True)]


def test_nvcc_newer_than_data_marks_its_verdicts_and_softens_a_compiler_fail():
    # nvcc 13.6 (PATH) with gcc 17: the 13.4-13.5 row says gcc <= 16, but 13.6 may accept 17: WARN, not FAIL
    res = results(facts("620.70.06", "13.5", H200, nvcc=["13.6"], gcc="17.1.0"))
    hc = finding(res, "matrix.host-compiler.gcc-too-new")
    assert hc.status is Status.WARN and unverified(hc)
    assert unverified(finding(res, "matrix.nvcc-gpu.ok"))
    dt = finding(res, "matrix.driver-toolkit.minor-compat")
    assert unverified(dt) and dt.evidence["min_driver_full"] == "620.70.06"
    assert [i["what"] for i in fresh(res).evidence["newer_than_data"]] == ["nvcc"]
    # the same gcc 17 with nvcc 13.5 (in the data): a verified FAIL
    res = results(facts("620.70.06", "13.5", H200, nvcc=["13.5"], gcc="17.1.0"))
    hc = finding(res, "matrix.host-compiler.gcc-too-new")
    assert hc.status is Status.FAIL and not unverified(hc)


def test_torch_newer_without_arch_list_uses_the_nearest_variant_and_never_fails():
    # GTX 1080 (cc 6.1) with a torch newer than the data that reported no arch list: 2.15 cu132's row has
    # nothing below sm_75, so "no kernel image" is likely, but it comes from an older row: WARN
    t = TorchInfo(installed=True, version="2.16.0+cu132", cuda="13.2", arch_list=[])
    res = results(facts("620.70.06", "13.5", [("NVIDIA GeForce GTX 1080", "6.1")], t))
    f = finding(res, "matrix.torch-gpu.no-kernel-image")
    assert f.status is Status.WARN and unverified(f)
    assert f.evidence["arch_list"] == ARCH


def test_cudnn_newer_than_data_is_judged_by_major_from_the_last_row():
    res = results(facts("620.70.06", "13.5", H200, torch("2.15.0+cu132", "13.2", 93000)))
    c = finding(res, "matrix.cudnn.ok")
    assert unverified(c) and "cuDNN 9.30.0" in c.summary
    assert [i["what"] for i in fresh(res).evidence["newer_than_data"]] == ["cuDNN"]
    # a cuDNN from the data with a CUDA major it has no build for is still a verified FAIL
    res = results(facts("620.70.06", "13.5", H200, torch("2.15.0+cu132", "13.2", 90100)))
    assert finding(res, "matrix.cudnn.cuda-mismatch").status is Status.FAIL


def test_gpu_newer_than_data():
    items = newer_than_data(load(), ccs=[(11, 5), (9, 0)])
    assert [(i["what"], i["have"]) for i in items] == [("GPU", "cc 11.5")]
    assert newer_than_data(load(), ccs=[(10, 7)]) == []  # Rubin is in the data


def test_nothing_to_compare():
    f = fresh(results({}))
    assert (f.id, f.status) == ("matrix.freshness.nothing-to-compare", Status.SKIP)
    assert f.evidence["data_stops_at"]["cudnn"] == "9.28"


@pytest.mark.parametrize("version,cuda,want", [("2.11.0+cu130", "13.0", "ok"),
                                                ("2.16.0+cu132", "13.2", "warn")])
def test_check_json_keeps_data_stops_at(version, cuda, want):
    """The whole `check` on the H200 fakes: the report (JSON) carries data_stops_at either way."""
    fs = h200(torch=FakeCmd(torch_stages(version=version, cuda=cuda)))
    rep = check(fs, only=("matrix",))
    d = json.loads(json.dumps(rep.to_dict()))
    step = next(s for s in d["steps"] if s["id"] == "matrix.freshness")
    assert step["status"] == want
    assert step["findings"][0]["evidence"]["data_stops_at"]["torch"] == "2.15"
    assert ids(rep)["matrix.freshness." + ("ok" if want == "ok" else "older-than-installed")] == want


def test_nvcc_of_a_new_major_is_not_judged_and_that_is_a_warning():
    # nvcc 14.0: no row can say which GPUs it targets (a new major may drop some): SKIP, and freshness warns
    res = results(facts("620.70.06", "13.5", H200, nvcc=["14.0"], gcc="13.3.0"))
    assert ("matrix.nvcc-gpu.unknown", Status.SKIP) in ids_of(res, "matrix.nvcc-gpu")
    f = fresh(res)
    assert f.status is Status.WARN and f.evidence["unverified_steps"]["matrix.nvcc-gpu"] == ["no row (not judged)"]
