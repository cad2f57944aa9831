"""Fact gatherers: registration and concurrent gathering.

A gatherer turns ports into one typed Fact and never raises; if it does anyway, the crash becomes
a FAILED fact naming the bug. Gatherers run concurrently; one may depend on others' facts.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from cudadoctor.model import Fact, FactState
from cudadoctor.settings import env_seconds
from cudadoctor.system.base import System


@dataclass
class Options:
    """What the user asked for that changes how facts are gathered."""

    python: Optional[str] = None  # target interpreter; None: the one running cudadoctor
    # Defaults can be lowered from the environment (CUDADOCTOR_TIMEOUT_SMI=2 ...): the fault-injection
    # suite uses this to keep hung-tool cases fast; explicit arguments (check --timeout) still win.
    timeout_smi: float = field(default_factory=lambda: env_seconds("CUDADOCTOR_TIMEOUT_SMI", 10.0))
    timeout_nvml: float = field(default_factory=lambda: env_seconds("CUDADOCTOR_TIMEOUT_NVML", 15.0))
    timeout_torch: float = field(default_factory=lambda: env_seconds("CUDADOCTOR_TIMEOUT_TORCH", 120.0))
    # nvcc, ldd, ldconfig, ...
    timeout_tool: float = field(default_factory=lambda: env_seconds("CUDADOCTOR_TIMEOUT_TOOL", 15.0))
    gpu_ops: bool = True  # run the minimal GPU op in the torch child
    extra: dict = field(default_factory=dict)


GatherFn = Callable[[System, Options, dict], Fact]


@dataclass(frozen=True)
class Gatherer:
    name: str
    func: GatherFn
    value_type: Any = None
    needs: tuple = ()
    description: str = ""


REGISTRY: dict = {}


def gatherer(name: str, value_type: Any = None, needs: Iterable[str] = (), description: str = ""):
    def deco(func: GatherFn) -> GatherFn:
        REGISTRY[name] = Gatherer(name, func, value_type, tuple(needs), description or (func.__doc__ or "").strip())
        return func

    return deco


_loaded = False


def load_all() -> dict:
    """Import every module of cudadoctor.facts so their gatherers register."""
    global _loaded
    if not _loaded:
        import cudadoctor.facts as pkg

        for m in pkgutil.iter_modules(pkg.__path__):
            if m.name != "registry":
                importlib.import_module(f"cudadoctor.facts.{m.name}")
        _loaded = True
    return REGISTRY


def closure(names: Iterable[str]) -> list:
    reg = load_all()
    out: list = []

    def visit(n: str) -> None:
        if n in out or n not in reg:
            return
        for d in reg[n].needs:
            visit(d)
        out.append(n)

    for n in names:
        visit(n)
    return out


def _call(g: Gatherer, system: System, opts: Options, deps: dict) -> Fact:
    t0 = time.monotonic()
    try:
        fact = g.func(system, opts, deps)
        if not isinstance(fact, Fact):
            fact = Fact.failed(g.name, f"cudadoctor bug: gatherer {g.name} returned {type(fact).__name__}")
    except Exception as e:  # noqa: BLE001 - a gatherer must never take cudadoctor down
        fact = Fact.failed(g.name, f"cudadoctor bug in gatherer {g.name}: {type(e).__name__}: {e}",
                           value={"traceback": traceback.format_exc(limit=6)})
    if fact.elapsed_s is None:
        fact = Fact(fact.state, fact.value, fact.source, fact.error, time.monotonic() - t0)
    return fact


def gather(system: System, names: Iterable[str], opts: Optional[Options] = None,
           given: Optional[dict] = None) -> dict:
    """Gather `names` (and what they need) concurrently. `given` facts are used as they are."""
    opts = opts or Options()
    reg = load_all()
    order = closure(names)
    given = dict(given or {})
    futures: dict = {}
    with ThreadPoolExecutor(max_workers=max(1, len(order))) as pool:
        for n in order:
            if n in given:
                continue
            g = reg[n]

            def job(g=g) -> Fact:
                deps = {}
                for d in g.needs:
                    deps[d] = given[d] if d in given else futures[d].result()
                return _call(g, system, opts, deps)

            futures[n] = pool.submit(job)
        results = {n: f.result() for n, f in futures.items()}
    results.update({k: v for k, v in given.items() if k in order or k in names})
    return results


def value_types() -> dict:
    return {n: g.value_type for n, g in load_all().items()}


def facts_from_dict(raw: dict) -> dict:
    """Rebuild saved facts (from a report's "facts") into typed Facts."""
    types = value_types()
    out = {}
    for name, d in raw.items():
        if isinstance(d, dict) and "state" in d:
            vt = types.get(name)
            try:
                fact = Fact.from_dict(d, vt)
            except (ValueError, TypeError):
                fact = None
            if fact is not None and fact.value is not None and isinstance(vt, type) and \
                    not isinstance(fact.value, vt):
                fact = None  # e.g. a hand-edited report: {"torch": {"value": "a string"}}
            out[name] = fact if fact is not None else Fact(FactState.FAILED, None, name,
                                                            "unreadable fact in saved report")
    return out
