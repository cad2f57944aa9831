"""One node as the fleet sees it: the values nodes are compared on, and what failed there.

Works on the report as plain JSON data (no typed facts are rebuilt), so that ten thousand reports
are read in seconds. Reads only keys that report-1.json describes; any of them may be missing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

# (key, title): the order is the order of the summary's table
DIMENSIONS = (
    ("gpu", "GPU"),
    ("driver", "driver"),
    ("cuda", "driver CUDA"),
    ("torch", "torch"),
    ("cudnn", "cuDNN"),
    ("nvcc", "nvcc"),
    ("outcome", "check outcome"),
)
PROBLEM_STATUSES = ("error", "fail", "warn")
NONE, UNKNOWN = "none", "unknown"


@dataclass
class NodeRecord:
    node: str
    source: str = ""  # the report's file, or "srun"
    answered: bool = True  # False: no report came back (see reason)
    reason: str = ""
    created: str = ""
    tool_version: str = ""
    exit_code: Optional[int] = None
    values: dict = field(default_factory=dict)  # dimension key -> value (a string)
    problems: list = field(default_factory=list)  # [{step, id, status, summary}] for warn/fail/error
    rejudged_from: str = ""  # the older cudadoctor version whose report was judged again with this one

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def failed(self) -> bool:
        return not self.answered or (self.exit_code or 0) != 0 or any(
            p["status"] in ("fail", "error") for p in self.problems)


def _value(facts: dict, name: str) -> Optional[dict]:
    f = facts.get(name)
    if isinstance(f, dict):
        v = f.get("value")
        if isinstance(v, dict):
            return v
    return None


def _state(facts: dict, name: str) -> str:
    f = facts.get(name)
    return f.get("state", "") if isinstance(f, dict) else ""


def _gpu_names(*sources: Optional[dict], key: str = "gpus") -> list:
    for src in sources:
        if src:
            items = src.get(key)
            if isinstance(items, list):
                names = [str(g.get("name") or "?") for g in items if isinstance(g, dict)]
                if names:
                    return names
    return []


def _unknown_or_none(facts: dict, names: tuple) -> str:
    """No value: "unknown" when asking hung, else "none" (not there, or the library to ask is missing)."""
    return UNKNOWN if any(_state(facts, n) == "timeout" for n in names) else NONE


def gpu_label(names: list) -> str:
    if not names:
        return ""
    counts = Counter(names)
    return " + ".join(f"{n}× {name}" if n > 1 else name for name, n in sorted(counts.items()))


def cudnn_label(v) -> str:
    """torch.backends.cudnn.version(): 91900 -> 9.19.0 (cuDNN 9: M*10000+m*100+p), 8902 -> 8.9.2."""
    if not isinstance(v, int) or v <= 0:
        return NONE
    if v >= 10000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _nvcc(tk: Optional[dict]) -> str:
    if not tk:
        return ""
    installs = [i for i in tk.get("installs") or [] if isinstance(i, dict)]
    path = tk.get("path_nvcc") or ""
    chosen = None
    if path:
        chosen = next((i for i in installs if path in (i.get("nvcc"), i.get("realpath"))), None)
    if chosen is None and installs:
        chosen = installs[0]
    return str(chosen.get("version") or "") if chosen else ""


def outcome_label(exit_code, problems: list) -> str:
    if not problems:
        return "ok" if not exit_code else f"exit {exit_code}"
    parts = []
    for status in PROBLEM_STATUSES:
        ids = sorted({p["id"] for p in problems if p["status"] == status})
        if ids:
            parts.append(f"{status}: {', '.join(ids)}")
    return "; ".join(parts)


def problems_of(report: dict) -> list:
    out = []
    for st in report.get("steps") or []:
        if not isinstance(st, dict):
            continue
        step_id = str(st.get("id", ""))
        found = False
        for f in st.get("findings") or []:
            if isinstance(f, dict) and f.get("status") in PROBLEM_STATUSES:
                out.append({"step": step_id, "id": str(f.get("id", "")), "status": f["status"],
                            "summary": str(f.get("summary", ""))})
                found = True
        if not found and st.get("status") in ("fail", "error"):
            out.append({"step": step_id, "id": step_id, "status": st["status"], "summary": str(st.get("summary", ""))})
    return out


def from_report(report: dict, source: str = "", name: str = "") -> NodeRecord:
    """The NodeRecord of one parsed `check --json` report."""
    facts = report.get("facts") if isinstance(report.get("facts"), dict) else {}
    smi, nvml = _value(facts, "nvidia_smi"), _value(facts, "nvml")
    km, torch, tk = _value(facts, "kernel_module"), _value(facts, "torch"), _value(facts, "toolkit")
    values = {}
    values["gpu"] = gpu_label(_gpu_names(nvml, smi) or _gpu_names(torch, key="devices")) or _unknown_or_none(
        facts, ("nvml", "nvidia_smi"))
    values["driver"] = ((nvml or {}).get("driver_version") or (smi or {}).get("driver_version")
                        or (km or {}).get("version") or _unknown_or_none(facts, ("nvml", "nvidia_smi")))
    values["cuda"] = ((nvml or {}).get("cuda_driver_version") or (smi or {}).get("cuda_version")
                      or _unknown_or_none(facts, ("nvml", "nvidia_smi")))
    if torch and torch.get("installed") and torch.get("version"):
        tv, tc = str(torch["version"]), torch.get("cuda")
        values["torch"] = tv if (not tc or "+cu" in tv) else f"{tv} (CUDA {tc})"
        values["cudnn"] = cudnn_label(torch.get("cudnn_version"))
        cud = torch.get("cudnn") if isinstance(torch.get("cudnn"), dict) else {}
        if values["cudnn"] == NONE and cud.get("runtime"):  # torch refused its cuDNN (version() raised): the loaded one
            values["cudnn"] = str(cud["runtime"])
    elif torch and torch.get("installed") is False:
        values["torch"] = "not installed"
        values["cudnn"] = NONE
    else:
        values["torch"] = values["cudnn"] = _unknown_or_none(facts, ("torch",)) if facts.get("torch") else UNKNOWN
    values["nvcc"] = _nvcc(tk) or _unknown_or_none(facts, ("toolkit",))
    problems = problems_of(report)
    exit_code = report.get("exit_code") if isinstance(report.get("exit_code"), int) else None
    values["outcome"] = outcome_label(exit_code, problems)
    return NodeRecord(
        node=name or str(report.get("node") or report.get("host") or "") or source,
        source=source,
        created=str(report.get("created") or ""),
        tool_version=str(report.get("tool_version") or ""),
        exit_code=exit_code,
        values={k: str(v) for k, v in values.items()},
        problems=problems,
    )


def not_answered(node: str, reason: str, source: str = "") -> NodeRecord:
    return NodeRecord(node=node, source=source, answered=False, reason=reason,
                      values={k: "no answer" for k, _ in DIMENSIONS})


_NUM = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """gpu2 before gpu10."""
    return tuple(int(p) if p.isdigit() else p for p in _NUM.split(name))
