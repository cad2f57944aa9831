"""Jupyter kernelspecs: where Jupyter looks for them, which interpreter each really starts, and with
which environment variables.

Two sources. When the `jupyter` on PATH runs from an interpreter that has jupyter_client, that
interpreter is asked (child/kernelspecs.py): its answer is exactly what that Jupyter starts,
including the built-in "python3" kernel of its own ipykernel. The folders are always read as well,
following jupyter_core 5.9.1's `jupyter_path("kernels")` on Linux: $JUPYTER_PATH, the user data dir
($JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter or ~/.local/share/jupyter, plus the Python user base's
share/jupyter), each environment's <prefix>/share/jupyter, then /usr/local/share/jupyter and
/usr/share/jupyter ($XDG_DATA_DIRS with JUPYTER_PLATFORM_DIRS set); jupyter_client 8.x adds
~/.ipython/kernels. A name found twice: the first folder wins (jupyter_client's find_kernel_specs).
"""

from __future__ import annotations

import json
import os
import re
import string

from cudadoctor.child.records import parse_marked
from cudadoctor.facts import conda_envs
from cudadoctor.facts.python_types import KernelSpecInfo, KernelsInfo
from cudadoctor.facts.pythons import PY_NAME, discover
from cudadoctor.system.base import System

CHILD = os.path.join(os.path.dirname(os.path.dirname(__file__)), "child", "kernelspecs.py")
CHILD_MARK = "@@CUDADOCTOR-KERNELS@@"
MIRRORED = "jupyter_core 5.9.1 paths, read by cudadoctor"
ABS_PYTHON = re.compile(r"(/[^\s'\"]*/python[0-9.]*)(?=[\s'\"]|$)")
FALSY = ("no", "n", "false", "off", "0", "0.0")  # jupyter_core.paths.envset

COMMON = ("JUPYTER_PATH", "user", "system", "ipython")  # folders every Jupyter on the machine searches


def _envset(env, name: str) -> bool:
    return name in env and env[name].lower() not in FALSY


def search_dirs(system: System, env_prefixes=()) -> list:
    """(kernels folder, source, environment prefix) in jupyter_core's order."""
    env = system.env
    home = system.realpath(system.home()) if system.home() else ""
    out: list = []

    def add(d: str, source: str, prefix: str = "") -> None:
        if d and d not in [x for x, _, _ in out]:
            out.append((d, source, prefix))

    for p in (env.get("JUPYTER_PATH") or "").split(os.pathsep):
        if p:
            add(os.path.join(p.rstrip(os.sep), "kernels"), "JUPYTER_PATH")
    if env.get("JUPYTER_DATA_DIR"):
        add(os.path.join(env["JUPYTER_DATA_DIR"], "kernels"), "user")
    elif env.get("XDG_DATA_HOME") or home:
        add(os.path.join(env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "jupyter", "kernels"), "user")
    userbase = env.get("PYTHONUSERBASE") or (os.path.join(home, ".local") if home else "")
    if userbase:
        add(os.path.join(userbase, "share", "jupyter", "kernels"), "user")
    for prefix in env_prefixes:
        add(os.path.join(prefix, "share", "jupyter", "kernels"), f"env {prefix}", prefix)
    if _envset(env, "JUPYTER_PLATFORM_DIRS"):
        system_dirs = [os.path.join(d, "jupyter") for d in
                       (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(os.pathsep) if d]
    else:
        system_dirs = ["/usr/local/share/jupyter", "/usr/share/jupyter"]
    for d in system_dirs:
        add(os.path.join(d, "kernels"), "system")
    ipython = env.get("IPYTHONDIR") or (os.path.join(home, ".ipython") if home else "")
    if ipython:
        add(os.path.join(ipython, "kernels"), "ipython")
    return out


def read_spec(system: System, name: str, resource_dir: str) -> KernelSpecInfo:
    k = KernelSpecInfo(name=name, resource_dir=resource_dir)
    raw = system.read_text(os.path.join(resource_dir, "kernel.json"), limit=1024 * 1024)
    try:
        d = json.loads(raw or "")
    except ValueError as e:
        k.error = f"kernel.json is not JSON ({e})" if raw else "kernel.json cannot be read"
        return k
    return spec_from_dict(k, d)


def spec_from_dict(k: KernelSpecInfo, d) -> KernelSpecInfo:
    if not isinstance(d, dict):
        k.error = "kernel.json is not a JSON object"
        return k
    argv = d.get("argv")
    k.argv = [str(a) for a in argv] if isinstance(argv, list) else []
    k.env = {str(a): str(b) for a, b in d.get("env").items()} if isinstance(d.get("env"), dict) else {}
    k.display_name = str(d.get("display_name") or "")
    k.language = str(d.get("language") or "")
    if not k.argv:
        k.error = "kernel.json has no argv"
    return k


def apply_env(system: System, k: KernelSpecInfo) -> None:
    """jupyter_client's provisioner: each value is a string.Template filled from the server's environment."""
    k.env_applied = {n: string.Template(v).safe_substitute(system.env) for n, v in k.env.items()}


def resolve_interpreter(system: System, k: KernelSpecInfo, server_python: str) -> None:
    """Which Python the kernel's argv starts, and how that was read."""
    if k.error or not k.argv:
        return
    argv = list(k.argv)
    extra_env = {}
    if os.path.basename(argv[0]) == "env" and len(argv) > 1:  # /usr/bin/env [-i] [VAR=x ...] prog ...
        argv = argv[1:]
        while argv and (argv[0].startswith("-") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0])):
            if "=" in argv[0] and not argv[0].startswith("-"):
                n, _, v = argv[0].partition("=")
                extra_env[n] = v
            argv = argv[1:]
        if not argv:
            return
    k.env_applied.update(extra_env)
    a0 = argv[0]
    base = os.path.basename(a0)
    if base in ("conda", "mamba", "micromamba") and len(argv) > 2 and argv[1] == "run":
        prefix = _conda_run_prefix(system, argv[2:])
        if prefix:
            k.interpreter = os.path.join(prefix, "bin", "python")
            k.interpreter_how = f"{base} run → {prefix}"
        else:
            k.interpreter_how = f"{base} run with an environment cudadoctor cannot find"
        return
    if "/" not in a0 and PY_NAME.match(a0):
        if a0 in ("python", "python3") and server_python:
            k.interpreter, k.interpreter_how = server_python, f"'{a0}' = the Jupyter server's own interpreter"
        else:
            k.interpreter = system.which(a0) or ""
            k.interpreter_how = f"'{a0}' looked up on PATH"
        return
    path = a0 if "/" in a0 else (system.which(a0) or "")
    if not path:
        k.interpreter_how = f"{a0} is not on PATH"
        return
    if re.match(r"^python[0-9.]*$", os.path.basename(path)):  # python, python3, python3.12, python2.7 ...
        k.interpreter, k.interpreter_how = path, "argv[0]"
        return
    head = (system.read_bytes(path, 64 * 1024) or b"").decode("utf-8", errors="replace")
    found = sorted(set(ABS_PYTHON.findall(head))) if head.startswith("#!") else []
    if len(found) == 1:
        k.interpreter, k.interpreter_how = found[0], f"the one interpreter named in wrapper {path}"
    else:
        k.interpreter_how = f"starts through {path}, which does not name one interpreter"


def _conda_run_prefix(system: System, args: list) -> str:
    for i, a in enumerate(args[:-1]):
        if a in ("-p", "--prefix"):
            return args[i + 1]
        if a in ("-n", "--name"):
            name = args[i + 1]
            for prefix, n, _ in conda_envs.prefixes(system):
                if n == name:
                    return prefix
            return ""
    return ""


def jupyter_interpreter(system: System) -> str:
    """The interpreter of the `jupyter` command on PATH (its script's shebang), or ''."""
    j = system.which("jupyter")
    if not j:
        return ""
    head = (system.read_bytes(j, 4096) or b"").decode("utf-8", errors="replace")
    m = ABS_PYTHON.search("\n".join(head.splitlines()[:3]))
    return m.group(1) if m and head.startswith("#!") else ""


def ask_jupyter_client(system: System, python: str, timeout: float) -> tuple:
    """(answer dict, error) from child/kernelspecs.py run in `python`."""
    r = system.run([python, CHILD], timeout=timeout)
    recs = parse_marked(r.stdout, CHILD_MARK)
    if not recs:
        return {}, r.describe() + (f": {r.stderr.strip()[-300:]}" if r.stderr.strip() else "")
    d = recs[-1]
    if "specs" not in d:
        return d, d.get("jupyter_client_error") or "jupyter_client is not installed there"
    return d, ""


def gather_kernels(system: System, env_prefixes=(), timeout: float = 15.0) -> KernelsInfo:
    info = KernelsInfo(method=MIRRORED)
    dirs = search_dirs(system, env_prefixes)
    info.dirs = [d for d, _, _ in dirs]
    jpy = jupyter_interpreter(system)
    info.jupyter_python = jpy
    answer, err = ask_jupyter_client(system, jpy, timeout) if jpy else ({}, "no `jupyter` on PATH")
    info.error = err
    specs = answer.get("specs") if isinstance(answer.get("specs"), dict) else {}
    server_of = {}  # kernels folder -> the interpreter whose Jupyter searches it as its environment folder
    for d, src, prefix in dirs:
        if prefix:
            py = os.path.join(prefix, "bin", "python")
            server_of[d] = py if system.is_executable(py) else ""
    winners: dict = {}  # name -> resource dir of the first kernel of that name in the common folders
    for order, (d, src, prefix) in enumerate(dirs):
        for n in system.listdir(d):
            rd = os.path.join(d, n)
            if not system.exists(os.path.join(rd, "kernel.json")):
                continue
            k = read_spec(system, n.lower(), rd)
            k.source, k.order = src, order
            apply_env(system, k)
            resolve_interpreter(system, k, server_of.get(d, "") if prefix else jpy)
            first = winners.get(k.name)
            if first and (src in COMMON or first[1] == "JUPYTER_PATH"):
                k.shadowed_by = first[0]
            elif src in COMMON and not first:
                winners[k.name] = (rd, src)
            info.kernels.append(k)
    if specs:
        info.method = f"jupyter_client {answer.get('jupyter_client', '')} of {answer.get('python') or jpy}"
        info.dirs = [str(x) for x in answer.get("kernel_dirs") or info.dirs]
        known = {k.resource_dir: k for k in info.kernels}
        for name, v in specs.items():
            rd = str((v or {}).get("resource_dir") or "")
            for k in info.kernels:  # what this Jupyter starts under that name decides shadowing
                if k.name == name and k.resource_dir != rd:
                    k.shadowed_by = rd
                elif k.name == name:
                    k.shadowed_by = ""
            if rd not in known:
                k = spec_from_dict(KernelSpecInfo(name=str(name), resource_dir=rd), (v or {}).get("spec"))
                k.source = "ipykernel (built in)" if "ipykernel" in rd else "jupyter_client"
                k.order = len(dirs)
                apply_env(system, k)
                resolve_interpreter(system, k, str(answer.get("python") or jpy))
                info.kernels.append(k)
    return info


def find(info: KernelsInfo, name: str):
    """The kernel Jupyter starts for `name` (case-insensitive, first folder wins), or None."""
    cands = [k for k in info.kernels if k.name == name.lower()]
    live = [k for k in cands if not k.shadowed_by]
    return (live or cands or [None])[0]


def resolve_kernel(system: System, name: str, timeout: float = 15.0) -> tuple:
    """(the kernel Jupyter starts for `name` or None, every kernel found) for `check --kernel NAME`:
    the environments' share/jupyter folders are searched too (found from files only, nothing run)."""
    prefixes = [e.prefix for e in discover(system).envs if e.prefix]
    info = gather_kernels(system, prefixes, timeout)
    return find(info, name), info
