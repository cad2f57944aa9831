"""Checklist steps: registration, order, and running them (pure: facts in, results out)."""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from cudadoctor.model import Finding, Status, StepResult, worst


@dataclass
class Outcome:
    """What a step function returns: the one-line summary and its findings (at least one)."""

    summary: str
    findings: list = field(default_factory=list)
    status: Optional[Status] = None  # default: the worst finding's status


@dataclass
class Context:
    """What a check may look at: the facts, earlier steps' results, and the matrix (lazily)."""

    facts: dict
    results: dict = field(default_factory=dict)  # step id -> StepResult
    _matrix: object = None

    def fact(self, name: str):
        from cudadoctor.model import Fact, FactState

        return self.facts.get(name) or Fact(FactState.NOT_APPLICABLE, None, name, "not gathered")

    @property
    def matrix(self):
        if self._matrix is None:
            from cudadoctor.matrix import load

            self._matrix = load()
        return self._matrix


StepFn = Callable[[Context], Outcome]


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    order: int
    func: StepFn
    facts: tuple = ()
    requires: tuple = ()  # step ids that must not FAIL/ERROR/SKIP for this one to run
    description: str = ""


STEPS: dict = {}


def step(id: str, title: str, order: int, facts: Iterable[str] = (), requires: Iterable[str] = (),
         description: str = ""):
    def deco(func: StepFn) -> StepFn:
        STEPS[id] = Step(id, title, order, func, tuple(facts), tuple(requires),
                         description or (func.__doc__ or "").strip().splitlines()[0])
        return func

    return deco


_loaded = False


def load_all() -> dict:
    global _loaded
    if not _loaded:
        import cudadoctor.checks as pkg

        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name not in ("registry", "common"):
                importlib.import_module(f"cudadoctor.checks.{m.name}")
        _loaded = True
    return STEPS


def ordered(only: Iterable[str] = (), skip: Iterable[str] = ()) -> list:
    steps = sorted(load_all().values(), key=lambda s: (s.order, s.id))
    only, skip = set(only), set(skip)

    def match(s: Step, ids: set) -> bool:
        return s.id in ids or any(s.id.startswith(i + ".") for i in ids)

    if only:
        steps = [s for s in steps if match(s, only)]
    if skip:
        steps = [s for s in steps if not match(s, skip)]
    return steps


def unknown_ids(ids: Iterable[str]) -> list:
    known = load_all()
    return [i for i in ids if i not in known and not any(k.startswith(i + ".") for k in known)]


def needed_facts(steps: Iterable[Step]) -> list:
    out: list = []
    for s in steps:
        for f in s.facts:
            if f not in out:
                out.append(f)
    return out


def run_steps(steps: list, facts: dict) -> list:
    ctx = Context(facts=facts)
    results = []
    for s in steps:
        waiting = tuple(r for r in s.requires
                        if r in ctx.results and ctx.results[r].status in (Status.FAIL, Status.ERROR, Status.SKIP))
        if waiting:
            why = ", ".join(f"{w} ({ctx.results[w].status.value})" for w in waiting)
            res = StepResult(s.id, s.title, Status.SKIP, f"waits on {why}", (), 0.0, waiting)
        else:
            res = run_one(s, ctx)
        ctx.results[s.id] = res
        results.append(res)
    return results


def run_one(s: Step, ctx: Context) -> StepResult:
    t0 = time.monotonic()
    try:
        out = s.func(ctx)
        findings = tuple(out.findings)
        status = out.status or worst((f.status for f in findings), Status.OK)
        summary = out.summary
    except Exception as e:  # noqa: BLE001 - a crashing check is a cudadoctor bug, shown as ERROR
        status = Status.ERROR
        summary = f"the check crashed (a cudadoctor bug): {type(e).__name__}: {e}"
        findings = (Finding(f"{s.id}.crashed", Status.ERROR, summary,
                            detail="Please report it with the output of `cudadoctor check --json`.",
                            evidence={"traceback": traceback.format_exc(limit=8)}),)
    return StepResult(s.id, s.title, status, summary, findings, time.monotonic() - t0)
