"""Which nodes differ, and how: groups per dimension, outliers, failing nodes, silent nodes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from cudadoctor import __version__
from cudadoctor.fleet.node import DIMENSIONS, NodeRecord, natural_key

SUMMARY_SCHEMA_VERSION = "1.0"
EXIT_OK, EXIT_ATTENTION, EXIT_USAGE = 0, 1, 2


@dataclass
class Group:
    value: str
    nodes: list  # node names, natural order

    def to_dict(self) -> dict:
        return {"value": self.value, "count": len(self.nodes), "nodes": self.nodes}


@dataclass
class Dimension:
    key: str
    title: str
    groups: list  # [Group], largest first

    @property
    def uniform(self) -> bool:
        return len(self.groups) <= 1

    @property
    def majority(self):
        """The largest group when it is strictly larger than every other (else None: no clear norm)."""
        if not self.groups:
            return None
        if len(self.groups) == 1 or len(self.groups[0].nodes) > len(self.groups[1].nodes):
            return self.groups[0]
        return None

    @property
    def outliers(self) -> list:
        """Groups other than the majority (every group when there is no clear majority)."""
        m = self.majority
        return [g for g in self.groups if g is not m] if len(self.groups) > 1 else []

    def sentence(self) -> str:
        """e.g. "3 nodes whose driver differs from the other 397 (580.159.04): gpu7 (570.124.06), ..."."""
        m = self.majority
        if self.uniform:
            return f"{self.title}: every node {self.groups[0].value}" if self.groups else f"{self.title}: no nodes"
        if m is None:
            return f"{self.title}: no majority; " + "; ".join(f"{len(g.nodes)} × {g.value}" for g in self.groups)
        odd = [n for g in self.outliers for n in g.nodes]
        shown = ", ".join(f"{n} ({g.value})" for g in self.outliers for n in g.nodes[:10])
        more = len(odd) - sum(min(10, len(g.nodes)) for g in self.outliers)
        noun = "node whose" if len(odd) == 1 else "nodes whose"
        return (f"{len(odd)} {noun} {self.title} differs from the other {len(m.nodes)} ({m.value}): {shown}"
                + (f" and {more} more" if more > 0 else ""))

    def to_dict(self) -> dict:
        m = self.majority
        return {"key": self.key, "title": self.title, "uniform": self.uniform,
                "majority": m.value if m else None,
                "groups": [g.to_dict() for g in self.groups],
                "outliers": [{"node": n, "value": g.value} for g in self.outliers for n in g.nodes],
                "sentence": self.sentence()}


@dataclass
class FindingGroup:
    id: str
    status: str
    summary: str  # from the first node that has it
    nodes: list

    def to_dict(self) -> dict:
        return {"id": self.id, "status": self.status, "summary": self.summary, "count": len(self.nodes),
                "nodes": self.nodes}


@dataclass
class FleetSummary:
    nodes: list  # [NodeRecord] that answered, natural order
    silent: list  # [NodeRecord] that did not answer
    bad_files: list  # [BadFile]
    dimensions: list  # [Dimension]
    findings: list  # [FindingGroup]: every warn/fail/error finding id, with its nodes
    strict: bool = False
    source: str = ""  # "files" or "slurm: <srun argv>"
    meta: dict = field(default_factory=dict)

    @property
    def failing(self) -> list:
        return [r for r in self.nodes if r.failed]

    @property
    def exit_code(self) -> int:
        """0: every node answered and passed; 1: a node failed a check or did not answer, a report
        could not be read (or, with strict, a warning or a node that differs)."""
        if self.failing or self.silent or self.bad_files:
            return EXIT_ATTENTION
        if self.strict and (any(f.status == "warn" for f in self.findings)
                            or any(not d.uniform for d in self.dimensions)):
            return EXIT_ATTENTION
        return EXIT_OK

    def headline(self) -> str:
        n = len(self.nodes)
        parts = [f"{n} node{'s' if n != 1 else ''} reported"]
        if self.silent:
            parts.append(f"{len(self.silent)} did not answer")
        parts.append(f"{len(self.failing)} failing")
        differ = [d.title for d in self.dimensions if not d.uniform and d.key != "outcome"]
        parts.append("differ in " + ", ".join(differ) if differ else "identical GPU/driver/CUDA/torch/cuDNN/nvcc")
        if self.bad_files:
            parts.append(f"{len(self.bad_files)} unreadable report file{'s' if len(self.bad_files) != 1 else ''}")
        return " · ".join(parts)

    def to_dict(self) -> dict:
        return {
            "kind": "cudadoctor-fleet-summary",
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "tool_version": __version__,
            "source": self.source,
            "strict": self.strict,
            "exit_code": self.exit_code,
            "headline": self.headline(),
            "counts": {"nodes": len(self.nodes), "failing": len(self.failing), "silent": len(self.silent),
                       "bad_files": len(self.bad_files)},
            "dimensions": [d.to_dict() for d in self.dimensions],
            "findings": [f.to_dict() for f in self.findings],
            "failing": [{"node": r.node, "exit_code": r.exit_code, "source": r.source,
                         "findings": [p for p in r.problems if p["status"] in ("fail", "error")]
                         or r.problems} for r in self.failing],
            "silent": [{"node": r.node, "reason": r.reason} for r in self.silent],
            "bad_files": [b.to_dict() for b in self.bad_files],
            "nodes": [{"node": r.node, "source": r.source, "exit_code": r.exit_code, "created": r.created,
                       "tool_version": r.tool_version, **r.values} for r in self.nodes],
            **({"meta": self.meta} if self.meta else {}),
        }


def summarize(records: list, bad_files: list = (), strict: bool = False, source: str = "files",
              meta: dict | None = None) -> FleetSummary:
    answered = sorted((r for r in records if r.answered), key=lambda r: natural_key(r.node))
    silent = sorted((r for r in records if not r.answered), key=lambda r: natural_key(r.node))
    dims = []
    for key, title in DIMENSIONS:
        by_value: dict = defaultdict(list)
        for r in answered:
            by_value[r.values.get(key, "unknown")].append(r.node)
        groups = sorted((Group(v, ns) for v, ns in by_value.items()), key=lambda g: (-len(g.nodes), g.value))
        dims.append(Dimension(key, title, groups))
    by_id: dict = {}
    for r in answered:
        for p in r.problems:
            g = by_id.get(p["id"])
            if g is None:
                g = by_id[p["id"]] = FindingGroup(p["id"], p["status"], p["summary"], [])
            if not g.nodes or g.nodes[-1] != r.node:
                g.nodes.append(r.node)
    rank = {"error": 0, "fail": 1, "warn": 2}
    findings = sorted(by_id.values(), key=lambda g: (rank.get(g.status, 3), -len(g.nodes), g.id))
    return FleetSummary(answered, silent, list(bad_files), dims, findings, strict, source, dict(meta or {}))


__all__ = ["FleetSummary", "Dimension", "Group", "FindingGroup", "NodeRecord", "summarize"]
