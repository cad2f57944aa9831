"""`explain` answers Xid lines from the Xid catalogue (matrix/xid.toml): the code's meaning, origin and
NVIDIA's action, for the signature that matched (device-lost for Xid 79, xid-event for the others)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cudadoctor.cli import app

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID13 = ("[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
         "ESR 0x52e7b0=0x101000e")
XID45 = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"


def explain(text: str) -> dict:
    r = CliRunner().invoke(app, ["explain", "--offline", "--json", text])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def notes_of(d: dict, sid: str) -> list:
    return next(m["on_this_machine"] for m in d["matches"] if m["id"] == sid)


def test_xid_79_is_a_lost_gpu_with_the_catalogues_action():
    d = explain(XID79)
    assert d["matches"][0]["id"] == "device-lost"
    (note,) = notes_of(d, "device-lost")
    assert note.startswith("Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)") and "RESTART_BM" in note
    assert "origin: bus" in note and "the node needs attention" in note


def test_an_application_xid_says_the_node_is_fine():
    d = explain(XID13)
    assert [m["id"] for m in d["matches"]] == ["xid-event"]
    (note,) = notes_of(d, "xid-event")
    assert "Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION)" in note and "origin: application; the node is fine" in note


def test_every_code_on_the_line_is_answered():
    notes = notes_of(explain(XID45), "xid-event")
    assert [n.split(" (")[0] for n in notes] == ["Xid 45", "Xid 149"]
    assert "WORKFLOW_NVLINK5_ERR" in notes[1]


def test_the_human_output_carries_it():
    r = CliRunner().invoke(app, ["explain", "--offline", XID13])
    assert "Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION)" in r.stdout and "RESTART_APP" in r.stdout
