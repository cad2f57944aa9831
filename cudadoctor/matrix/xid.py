"""The Xid catalogue (matrix/xid.toml): what an NVIDIA Xid event means and what to do about it.

Used by `health` (the node check), `check`'s container step and `explain`. Loaded once, lazily: only
when there is an Xid to judge or explain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from cudadoctor.matrix import read_table
from cudadoctor.matrix.schema import CONFIDENCE

SEVERITIES = ("info", "warn", "fail")
ORIGINS = ("application", "driver", "firmware", "memory", "nvlink", "bus", "power", "thermal")
UNKNOWN_ACTION = "CONTACT_SUPPORT"
DOCS = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
# the rule of matrix/xid.toml's header: NVIDIA's immediate action -> what one event means for the node
FAIL_ACTIONS = {"RESET_GPU", "RESTART_BM", "RESTART_VM", "UPDATE_SWFW", "CHECK_MECHANICALS", "WORKFLOW_XID_48",
                "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"}
WARN_ACTIONS = {"CONTACT_SUPPORT", "CHECK_UVM"}
HARDWARE_ORIGINS = {"memory", "bus"}


def severity_rule(action: str, origin: str) -> str:
    if action in FAIL_ACTIONS:
        return "fail"
    if action in WARN_ACTIONS or (action == "RESTART_APP" and origin in HARDWARE_ORIGINS):
        return "warn"
    return "info"


@dataclass(frozen=True)
class Action:
    name: str
    text: str
    commands: tuple

    def commands_for(self, index="<gpu>", bus: str = "") -> tuple:
        return tuple(c.replace("{index}", str(index)).replace("{bus}", bus or "<bus>") for c in self.commands)


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    meaning: str
    origin: str
    severity: str  # "info", "warn" or "fail": for the node (see matrix/xid.toml)
    action: Action
    sources: tuple = ()  # URLs
    known: bool = True

    @property
    def title(self) -> str:
        return f"Xid {self.code}" + (f" ({self.mnemonic})" if self.mnemonic else "")


class Catalogue:
    def __init__(self, table: dict) -> None:
        self.sources = {k: v.get("url", "") for k, v in table.get("sources", {}).items()}
        self.actions = {k: Action(k, v.get("text", ""), tuple(v.get("commands", [])))
                        for k, v in table.get("actions", {}).items()}
        self.rows = table.get("xid", [])
        self._by_code = {}
        for r in self.rows:
            self._by_code[int(r["code"])] = Xid(
                int(r["code"]), r.get("mnemonic", ""), r.get("meaning", ""), r.get("origin", ""),
                r.get("severity", "warn"), self.actions.get(r.get("action", ""), self._unknown_action()),
                tuple(self.sources.get(s, s) for s in r.get("source", [])))

    def _unknown_action(self) -> Action:
        return self.actions.get(UNKNOWN_ACTION) or Action(UNKNOWN_ACTION, "Contact NVIDIA support.", ())

    def get(self, code: int) -> Xid:
        """The catalogue's row, or a "warn" placeholder for an Xid it does not list."""
        x = self._by_code.get(int(code))
        if x is not None:
            return x
        return Xid(int(code), "", "not in cudadoctor's Xid catalogue: see NVIDIA's Xid catalog", "", "warn",
                   self._unknown_action(), (DOCS,), known=False)

    def __contains__(self, code: int) -> bool:
        return int(code) in self._by_code


def validate(table: dict) -> list:
    """Problems in the catalogue data (empty when sound)."""
    out = []
    sources, actions = table.get("sources", {}), table.get("actions", {})
    codes = [r.get("code") for r in table.get("xid", [])]
    if len(codes) != len(set(codes)):
        out.append("duplicate Xid codes")
    for name, a in actions.items():
        if not a.get("text"):
            out.append(f"action {name}: no text")
    for r in table.get("xid", []):
        where = f"Xid {r.get('code')}"
        if not isinstance(r.get("code"), int) or r["code"] <= 0:
            out.append(f"{where}: code must be a positive integer")
        if r.get("severity") not in SEVERITIES:
            out.append(f"{where}: severity {r.get('severity')!r} not in {SEVERITIES}")
        if r.get("origin") not in ORIGINS:
            out.append(f"{where}: origin {r.get('origin')!r} not in {ORIGINS}")
        if r.get("action") not in actions:
            out.append(f"{where}: action {r.get('action')!r} has no [actions] entry")
        if not r.get("mnemonic") or not r.get("meaning"):
            out.append(f"{where}: mnemonic and meaning are required")
        if not r.get("source") or any(s not in sources for s in r.get("source", [])):
            out.append(f"{where}: every source must be a key of [sources]")
        if r.get("severity") != severity_rule(r.get("action", ""), r.get("origin", "")):
            out.append(f"{where}: severity {r.get('severity')!r} breaks the rule (expected "
                       f"{severity_rule(r.get('action', ''), r.get('origin', ''))!r})")
        if r.get("confidence") not in CONFIDENCE:
            out.append(f"{where}: confidence {r.get('confidence')!r}")
    return out


@functools.lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    return Catalogue(read_table("xid"))
