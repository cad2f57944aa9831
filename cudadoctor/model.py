"""The data model: facts (gathered), findings (judged), steps and the report.

Everything here is plain data with a `to_dict()` that produces JSON-ready values.
`from_dict` rebuilds facts from a saved report (`check --facts FILE`).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

T = TypeVar("T")

SCHEMA_VERSION = "1.1"
SCHEMA_ID = "https://cudadoctor.dev/schema/report-1.json"


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Status.SKIP: 0, Status.OK: 1, Status.WARN: 2, Status.FAIL: 3, Status.ERROR: 4}


def worst(statuses: typing.Iterable[Status], default: Status = Status.OK) -> Status:
    out = None
    for s in statuses:
        if out is None or s.rank > out.rank:
            out = s
    return out if out is not None else default


class FactState(str, enum.Enum):
    FOUND = "found"  # asked and got an answer
    NOT_FOUND = "not_found"  # asked; the thing is not there (no nvcc, no torch)
    NOT_APPLICABLE = "not_applicable"  # not asked: does not apply here (no WSL on bare metal)
    FAILED = "failed"  # asking failed (tool crashed, unreadable output)
    TIMEOUT = "timeout"  # asking hung and was stopped


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One gathered fact. `value` is a dataclass from cudadoctor.facts.types (or plain data)."""

    state: FactState
    value: Optional[T] = None
    source: str = ""  # argv, path, env var or API the fact came from
    error: str = ""  # what went wrong, verbatim where possible
    elapsed_s: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.state is FactState.FOUND and self.value is not None

    @classmethod
    def found(cls, value: T, source: str = "", elapsed_s: float | None = None) -> "Fact[T]":
        return cls(FactState.FOUND, value, source, "", elapsed_s)

    @classmethod
    def not_found(cls, source: str = "", error: str = "", value: Any = None) -> "Fact[Any]":
        return cls(FactState.NOT_FOUND, value, source, error)

    @classmethod
    def failed(cls, source: str = "", error: str = "", value: Any = None) -> "Fact[Any]":
        return cls(FactState.FAILED, value, source, error)

    @classmethod
    def timeout(cls, source: str = "", error: str = "", value: Any = None) -> "Fact[Any]":
        return cls(FactState.TIMEOUT, value, source, error)

    @classmethod
    def not_applicable(cls, source: str = "", error: str = "") -> "Fact[Any]":
        return cls(FactState.NOT_APPLICABLE, None, source, error)

    def to_dict(self) -> dict:
        return {
            "state": self.state.value,
            "value": to_jsonable(self.value),
            "source": self.source,
            "error": self.error,
            "elapsed_s": None if self.elapsed_s is None else round(self.elapsed_s, 4),
        }

    @classmethod
    def from_dict(cls, d: dict, value_type: Any = None) -> "Fact[Any]":
        raw = d.get("value")
        value = from_jsonable(value_type, raw) if (value_type is not None and raw is not None) else raw
        return cls(
            FactState(d.get("state", "failed")),
            value,
            d.get("source", ""),
            d.get("error", ""),
            d.get("elapsed_s"),
        )


@dataclass(frozen=True)
class Fix:
    text: str
    commands: tuple[str, ...] = ()
    docs: str = ""

    def to_dict(self) -> dict:
        return {"text": self.text, "commands": list(self.commands), "docs": self.docs}


@dataclass(frozen=True)
class Finding:
    """One judged line. `id` is stable and dotted (e.g. `torch.cuda.cpu-only`)."""

    id: str
    status: Status
    summary: str
    detail: str = ""
    fix: Optional[Fix] = None
    evidence: dict = field(default_factory=dict)  # source -> value
    affects: str = ""

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "status": self.status.value,
            "summary": self.summary,
            "detail": self.detail,
            "fix": self.fix.to_dict() if self.fix else None,
            "evidence": to_jsonable(self.evidence),
            "affects": self.affects,
        }


@dataclass(frozen=True)
class StepResult:
    """The outcome of one checklist step: its line and the findings behind it."""

    id: str
    title: str
    status: Status
    summary: str
    findings: tuple[Finding, ...] = ()
    elapsed_s: float = 0.0
    waits_on: tuple[str, ...] = ()  # for SKIP: the failed prerequisite step(s)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "summary": self.summary,
            "waits_on": list(self.waits_on),
            "elapsed_s": round(self.elapsed_s, 4),
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass
class Report:
    tool_version: str
    created: str
    target_python: str
    platform: str
    facts: dict  # name -> Fact
    steps: list  # [StepResult]
    exit_code: int = 0
    strict: bool = False
    source: str = "live"  # "live" or "facts-file:<path>"
    host: str = ""  # the machine's host name (a re-judged report keeps the saved one)
    node: str = ""  # the scheduler's name for the node (SLURMD_NODENAME, CUDADOCTOR_NODE_NAME) or host

    def counts(self) -> dict:
        out = {s.value: 0 for s in Status}
        for st in self.steps:
            out[st.status.value] += 1
        return out

    def to_dict(self) -> dict:
        return {
            "$schema": SCHEMA_ID,
            "schema_version": SCHEMA_VERSION,
            "tool": "cudadoctor",
            "tool_version": self.tool_version,
            "created": self.created,
            "source": self.source,
            "target_python": self.target_python,
            "platform": self.platform,
            "host": self.host,
            "node": self.node,
            "strict": self.strict,
            "exit_code": self.exit_code,
            "summary": self.counts(),
            "steps": [s.to_dict() for s in self.steps],
            "facts": {k: v.to_dict() for k, v in sorted(self.facts.items())},
        }


# ---------------------------------------------------------------- JSON helpers


def to_jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, enum.Enum):
        return v.value
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: to_jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, dict):
        return {str(k): to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [to_jsonable(x) for x in v]
    if hasattr(v, "to_dict"):
        return v.to_dict()
    return str(v)


def from_jsonable(tp: Any, raw: Any) -> Any:
    """Rebuild a value of type `tp` (dataclass, list[...], tuple[...], Optional[...]) from JSON data.

    Unknown keys are ignored and missing ones take their defaults, so a report from an older or
    newer cudadoctor still loads.
    """
    if raw is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return from_jsonable(inner[0], raw) if len(inner) == 1 else raw
    if origin in (list, tuple) and args:
        items = [from_jsonable(args[0], x) for x in raw] if isinstance(raw, list) else []
        if dataclasses.is_dataclass(args[0]):  # drop entries that are not objects of that type
            items = [x for x in items if isinstance(x, args[0])]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        return dict(raw) if isinstance(raw, dict) else {}
    if dataclasses.is_dataclass(tp) and isinstance(raw, dict):
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in raw:
                kwargs[f.name] = from_jsonable(hints.get(f.name, Any), raw[f.name])
        try:
            return tp(**kwargs)
        except TypeError:
            return raw
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(raw)
        except ValueError:
            return raw
    return raw
