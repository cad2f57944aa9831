"""The Xid catalogue (matrix/xid.toml): sound data, rows checked by hand against their sources, and the
same judgement in `health`, in `check`'s container step and in `explain`."""

from __future__ import annotations

import copy

import pytest
from libs_support import FakeCmd
from test_container import container_system, run_health

from cudadoctor.matrix import read_table
from cudadoctor.matrix.xid import Catalogue, catalogue, severity_rule, validate
from cudadoctor.model import Status


@pytest.fixture(scope="module")
def table() -> dict:
    return read_table("xid")


def test_the_catalogue_is_sound(table):
    assert validate(table) == []
    assert len(table["xid"]) >= 40


@pytest.mark.parametrize("breakage", ["severity", "origin", "action", "source", "duplicate"])
def test_validation_catches_broken_rows(table, breakage):
    t = copy.deepcopy(table)
    row = next(r for r in t["xid"] if r["code"] == 79)
    if breakage == "severity":
        row["severity"] = "info"  # breaks the rule: RESTART_BM is a node fault
    elif breakage == "origin":
        row["origin"] = "cosmic rays"
    elif breakage == "action":
        row["action"] = "PRAY"
    elif breakage == "source":
        row["source"] = ["NOWHERE"]
    else:
        t["xid"].append(dict(row))
    assert validate(t) != []


# Rows checked by hand: NVIDIA's Xid catalog immediate-action bucket, in NVIDIA NVSentinel's
# xiderrorsmapping.csv (13 RESTART_APP, 31 RESTART_APP, 45 WORKFLOW_XID_45, 48 WORKFLOW_XID_48, 63 IGNORE,
# 64 RESET_GPU, 74 WORKFLOW_NVLINK_ERR, 79 RESTART_BM, 92 IGNORE, 94 RESTART_APP, 95 RESET_GPU,
# 119 RESET_GPU, 149 WORKFLOW_NVLINK5_ERR); mnemonics from open-gpu-kernel-modules' nverror.h.
@pytest.mark.parametrize("code,mnemonic,action,severity", [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "info"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "info"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "info"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "fail"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "info"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "fail"),
    (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "fail"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "fail"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "info"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "warn"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "fail"),
    (119, "GSP_RPC_TIMEOUT", "RESET_GPU", "fail"),
    (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "fail"),
])
def test_rows_against_their_sources(code, mnemonic, action, severity):
    x = catalogue().get(code)
    assert (x.mnemonic, x.action.name, x.severity) == (mnemonic, action, severity)
    assert x.action.text and x.sources[0].startswith("https://docs.nvidia.com/deploy/xid-errors/")


def test_the_severity_rule():
    assert severity_rule("RESTART_APP", "application") == "info"
    assert severity_rule("RESTART_APP", "memory") == "warn"  # 94: the GPU kept working, the memory did not
    assert severity_rule("RESET_GPU", "firmware") == "fail"
    assert severity_rule("CONTACT_SUPPORT", "memory") == "warn"


def test_an_unknown_code_is_a_warning_with_nvidias_catalog():
    x = catalogue().get(4242)
    assert not x.known and x.severity == "warn" and x.action.name == "CONTACT_SUPPORT"
    assert 4242 not in catalogue() and 79 in catalogue()


def test_action_commands_name_the_gpu():
    cmds = catalogue().get(95).action.commands_for(3)
    assert "sudo nvidia-smi -r -i 3" in cmds and not any("{" in c for c in cmds)
    assert Catalogue({}).get(79).severity == "warn"  # an empty catalogue never crashes


# ------------------------------------------------------------------ check's container step uses it


def dmesg(*codes) -> FakeCmd:
    return FakeCmd(stdout="".join(f"[ 100.0] NVRM: Xid (PCI:0000:18:00): {c}, pid=1, name=x, event\n" for c in codes))


@pytest.mark.parametrize("codes,status", [((74,), Status.FAIL), ((119,), Status.FAIL), ((94,), Status.WARN),
                                          ((94, 95), Status.FAIL), ((333,), Status.WARN)])
def test_check_judges_xids_with_the_catalogue(codes, status):
    r, _ = run_health(container_system(dmesg=dmesg(*codes)))
    f = next(f for f in r.findings if f.id == "health.xid")
    assert f.status is status and f.fix.commands


def test_check_leaves_informational_xids_as_history():
    r, _ = run_health(container_system(dmesg=dmesg(63, 92, 13)))
    ids = {f.id: f.status for f in r.findings}
    assert "health.xid" not in ids and ids["health.xid-app"] is Status.OK
