"""Read-only: cudadoctor writes nowhere but its cache dir, and never runs a shell.

Every command runs with HOME, XDG_CACHE_HOME, CUDADOCTOR_CACHE_DIR, TMPDIR and the working directory
pointed at fresh temporary folders. Afterwards HOME, the working directory and TMPDIR must be exactly as
before (nvcc's and Python's temporary files included), nothing may have appeared in the checkout outside
__pycache__, and the user's real cache is untouched. On a GPU machine this also catches the driver's JIT
cache (~/.nv/ComputeCache) or torch/Triton caches written under HOME by probe and bench.
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest
from faultkit import REPO, command_names

# (command line, time limit): whichever of these commands exist
COMMANDS = [
    (["check", "--json"], 30),
    (["checks"], 10),
    (["env", "--json"], 30),
    (["libs", "--json"], 30),
    (["scan", "--cc", "9.0", "--json"], 60),
    (["probe", "--quick", "--cc", "9.0", "--json"], 240),
    (["bench", "--quick", "--json"], 240),
    (["explain", "--json", "CUDA error: no kernel image is available for execution on the device"], 30),
    (["archs", "--cc", "9.0", "--json", "/bin/true"], 10),
    (["matrix", "recommend", "--cc", "9.0", "--driver", "580.65"], 10),
    (["wsl", "--json"], 30),
    (["envs", "--json", "--timeout", "60"], 90),
]

# the only parts of the checkout cudadoctor reads at run time
WATCHED = ("cudadoctor", "matrix", "probe_kernels")


def snapshot(root: Path, skip_pycache: bool = False) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if skip_pycache:
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for n in list(filenames) + [d + "/" for d in dirnames]:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p.rstrip("/"))
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns) if not n.endswith("/") else None
    return out


def diff(before: dict, after: dict) -> list:
    changed = [k for k in after if k not in before or (after[k] != before[k] and after[k] is not None)]
    gone = [k for k in before if k not in after]
    return sorted(changed) + [f"(removed) {k}" for k in sorted(gone)]


@pytest.mark.slow
@pytest.mark.parametrize("args,limit", COMMANDS, ids=[" ".join(a[:2]) for a, _ in COMMANDS])
def test_writes_only_its_cache(faults, args, limit):
    if args[0] not in command_names():
        pytest.skip(f"`cudadoctor {args[0]}` has not landed yet")
    tmpdir = faults.tmp / "tmpdir"
    tmpdir.mkdir()
    (faults.home / ".bashrc").write_text("# untouched\n")
    env = {"TMPDIR": str(tmpdir), "TMP": str(tmpdir), "TEMP": str(tmpdir)}
    real_cache = Path(os.path.expanduser("~")) / ".cache" / "cudadoctor"  # this user's real cache
    real_before = snapshot(real_cache) if real_cache.exists() else None
    home0, tmp0, cwd0 = snapshot(faults.home), snapshot(tmpdir), set(os.listdir(faults.tmp))
    repo0 = {w: snapshot(REPO / w, skip_pycache=True) for w in WATCHED}
    t0 = time.time()
    faults.run(*args, env=env, codes=(0, 1, 2), limit=limit)
    assert diff(home0, snapshot(faults.home)) == [], "written under HOME"
    assert diff(tmp0, snapshot(tmpdir)) == [], "left in TMPDIR"
    assert set(os.listdir(faults.tmp)) - cwd0 - {"cache"} == set(), "written in the working directory"
    for w in WATCHED:
        new = [p for p in diff(repo0[w], snapshot(REPO / w, skip_pycache=True))
               if not p.endswith(".py") and _mtime(REPO / w / p) >= t0]
        assert new == [], f"written in the checkout under {w}/"
    if real_before is not None:
        assert diff(real_before, snapshot(real_cache)) == [], "the user's real cache was touched"
    # and whatever it did write is inside its cache dir
    if faults.cache.exists():
        for p in faults.cache.rglob("*"):
            assert faults.cache in p.parents


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def test_no_shell_true_anywhere():
    """No subprocess call in cudadoctor/ passes shell=True (also enforced by ruff S602/S604/S605 in .ci/run),
    nor uses os.system / os.popen / the commands module."""
    bad = []
    for path in sorted((REPO / "cudadoctor").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        bad.append(f"{path.relative_to(REPO)}:{node.lineno}: shell={ast.unparse(kw.value)}")
                f = node.func
                name = (f"{getattr(f.value, 'id', '')}.{f.attr}" if isinstance(f, ast.Attribute)
                        else getattr(f, "id", ""))
                if name in ("os.system", "os.popen", "os.spawnl", "os.spawnlp", "os.execl", "os.execlp",
                            "subprocess.getoutput", "subprocess.getstatusoutput"):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}()")
    assert bad == []


def test_ruff_enforces_no_shell():
    """The lint rules that forbid shell=True are selected in pyproject.toml, and .ci/run runs ruff."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    selected = set(conf["tool"]["ruff"]["lint"]["select"])
    assert {"S602", "S604", "S605"} <= selected
    ci = (REPO / ".ci" / "run").read_text()
    assert "ruff check cudadoctor" in ci


def test_the_no_shell_test_can_fail(tmp_path):
    """The AST check above does catch a shell=True call (so a pass means something)."""
    src = "import subprocess\nsubprocess.run('ls', shell=True)\nsubprocess.run(['ls'], shell=False)\n"
    tree = ast.parse(src)
    hits = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            for kw in n.keywords if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                                                and kw.value.value is False)]
    assert hits == [2]
