"""Every Python environment of the machine, probed concurrently: the torch probe of `check` runs in
each, bounded by the CPUs this process may use, each with its own timeout (a hung interpreter becomes
a timed-out fact, not a hung cudadoctor).

Also the `other_envs` fact of `check`: when the target has no torch or a CPU-only one, the other
environments are probed so that the torch.cuda step can name one whose torch uses the GPU.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from cudadoctor.facts.kernelspecs import gather_kernels
from cudadoctor.facts.python_types import PythonEnv, PythonEnvs
from cudadoctor.facts.pythons import Finder, discover
from cudadoctor.facts.registry import Options, gatherer
from cudadoctor.facts.torch import gather_torch
from cudadoctor.facts.types import TorchInfo
from cudadoctor.facts.views import driver_view_of
from cudadoctor.model import Fact, FactState
from cudadoctor.redact import allowed_vars
from cudadoctor.settings import env_seconds
from cudadoctor.system.base import System

#: seconds one environment's torch probe may take in `envs` (and for check's pointer); `envs --timeout`
ENVS_TIMEOUT = 60.0


def envs_timeout() -> float:
    return env_seconds("CUDADOCTOR_TIMEOUT_ENVS", ENVS_TIMEOUT)


def add_kernel(f: Finder, k) -> None:
    """A kernel becomes a row of its own when it changes the environment (kernel.json "env"), names an
    interpreter that is missing, or cannot be read; otherwise it is one more way its interpreter is found."""
    if k.language and not k.language.lower().startswith("python"):
        return
    label = f"kernel {k.name}" + (f" (shadowed by {k.shadowed_by})" if k.shadowed_by else "")
    exists = bool(k.interpreter) and f.system.is_executable(k.interpreter)
    if exists and not k.env_applied:
        f.add(k.interpreter, label)
        return
    e = f.describe(k.interpreter) if exists else PythonEnv(python=k.interpreter)
    e.kind, e.name, e.kernel, e.key = "kernel", k.name, k, "kernel:" + k.resource_dir
    e.found_as = [label]
    # Jupyter runs argv without activating anything: a conda env's own variables do not apply, kernel.json's do
    e.env = dict(k.env_applied)
    e.env_source = k.kernel_json if k.env_applied else ""
    if not k.interpreter:
        e.note = k.error or k.interpreter_how or "no interpreter in argv"
    f.envs.append(e)
    f.by_key[e.key] = e


def find_all(system: System, extra=(), kernels: bool = True, tool_timeout: float = 15.0) -> tuple:
    """(environments, KernelsInfo or None), in the order rows are shown."""
    f = discover(system, extra)
    info = None
    if kernels:
        info = gather_kernels(system, [e.prefix for e in f.envs if e.prefix], tool_timeout)
        for k in info.kernels:
            add_kernel(f, k)
    return f.envs, info


def probe_one(system: System, e: PythonEnv, timeout: float, gpu_ops: bool) -> PythonEnv:
    if not e.python:
        return e
    sysview = system.with_env(e.env) if e.env else system
    t0 = time.monotonic()
    fact = gather_torch(sysview, Options(python=e.python, timeout_torch=timeout, gpu_ops=gpu_ops), {})
    e.probed = True
    e.torch_state, e.torch_error = fact.state.value, fact.error
    e.torch = fact.value if isinstance(fact.value, TorchInfo) else None
    e.probe_s = time.monotonic() - t0
    return e


def torch_fact(e: PythonEnv) -> Fact:
    """The environment's torch probe as the `torch` fact of `check` (for the torch.cuda step)."""
    if not e.probed:
        return Fact(FactState.NOT_APPLICABLE, None, e.python, e.note or "not probed")
    return Fact(FactState(e.torch_state), e.torch, f"{e.python} torch_probe.py", e.torch_error, e.probe_s)


def merge_probed(system: System, envs: list) -> list:
    """Rows whose probes ran the same interpreter in the same environment (a pyenv shim and the version it
    runs, a path through a symlinked folder) become one row."""
    out, seen = [], {}
    for e in envs:
        t = e.torch
        key = None
        if t is not None and t.python and t.prefix:
            key = (system.realpath(t.python), system.realpath(t.prefix), tuple(sorted(e.env.items())))
        first = seen.get(key) if key else None
        if first is None:
            if key:
                seen[key] = e
            out.append(e)
            continue
        first.found_as += [x for x in e.found_as if x not in first.found_as]
        first.aliases += [x for x in [e.python] + e.aliases if x != first.python and x not in first.aliases]
        if first.kind == "other" and e.kind != "other":  # a shim or wrapper found first: name the real env
            first.aliases = [x for x in [first.python] + first.aliases if x != e.python]
            for attr in ("python", "kind", "name", "prefix", "key", "system_site_packages", "base_python",
                         "has_ipykernel", "env_source"):
                setattr(first, attr, getattr(e, attr))
    return out


def workers_for(system: System, n: int) -> int:
    return max(1, min(n, max(2, system.cpu_count())))


def probe_all(system: System, envs: list, timeout: float, gpu_ops: bool = False) -> PythonEnvs:
    """Probe every environment at once (bounded by CPU count); rows keep their order."""
    t0 = time.monotonic()
    todo = [e for e in envs if e.python]
    n = workers_for(system, len(todo))
    if todo:
        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(lambda e: probe_one(system, e, timeout, gpu_ops), todo))
    return PythonEnvs(envs=merge_probed(system, envs), workers=n, seconds=time.monotonic() - t0)


def wants_pointer(torch: Fact) -> bool:
    """The target has no torch, or a CPU-only one: another environment may have what it lacks."""
    if torch is None:
        return False
    if torch.state is FactState.NOT_FOUND:
        return True
    t = torch.value
    return torch.state is FactState.FOUND and isinstance(t, TorchInfo) and t.cpu_only


@gatherer("other_envs", value_type=PythonEnvs, needs=("torch", "nvidia_smi", "nvml", "kernel_module"))
def gather_other_envs(system: System, opts: Options, deps: dict) -> Fact:
    """The other Python environments here, probed: only when the target's torch is missing or CPU-only
    and a driver answers (without one no environment can use a GPU)."""
    torch = deps.get("torch")
    if not wants_pointer(torch):
        return Fact.not_applicable("other_envs", "the target's torch is a CUDA build (or could not be read)")
    if not driver_view_of(deps).present:
        return Fact.not_applicable("other_envs", "no NVIDIA driver answers: no environment here can use a GPU")
    target = (torch.value.python if isinstance(torch.value, TorchInfo) and torch.value.python else "") or (
        opts.python or system.own_python())
    envs, _ = find_all(system, tool_timeout=opts.timeout_tool)
    tkey = Finder(system).describe(target).key
    others = [e for e in envs if e.key != tkey and e.python and e.kind != "kernel"]
    res = probe_all(system, others, min(opts.timeout_torch, envs_timeout()))
    for e in res.envs:  # the report keeps what the pointer needs: no libraries, only allow-listed variables
        e.env = allowed_vars(e.env)[0]
        if e.torch is not None:
            e.torch.libraries = []
    res.target = target
    res.target_kernel = str(opts.extra.get("kernel") or "")
    return Fact.found(res, f"{len(others)} other environments", res.seconds)
