"""Where the target interpreter really loads CUDA binaries from: the folders (roots) a scan walks.

Asked of the interpreter itself (a stdlib-only child with a timeout): its sys.path after site
processing, its site-packages (and user site), its stdlib, the torch package folder (found, not
imported) and the cache folder torch's JIT extensions use. Then read through the System port:

- `.pth` files in each site folder: path lines (relative ones are relative to the .pth's folder);
  setuptools' `__editable__.<dist>-<ver>.pth` are editable installs, either a path line (lenient
  mode, src layout; strict mode: a link tree under build/) or an `import __editable___<dist>_finder`
  line whose finder module holds `MAPPING = {'pkg': '/src/pkg', ...}` (read with ast, never run).
- `<dist>.egg-link` files (setuptools `develop`, pip before PEP 660): their first line is the
  source folder; `easy-install.pth` lists the same folder.
- PYTHONPATH, then any other sys.path entry (added by sitecustomize or an import line of a .pth).
- torch's JIT extension cache: `TORCH_EXTENSIONS_DIR` as it is, else
  `realpath($XDG_CACHE_HOME or ~/.cache)/torch_extensions/py<maj><min><abiflags>_cu<ver>`
  (torch.utils.cpp_extension._get_build_directory / get_default_build_root); `cu<ver>` from
  torch/version.py; every `py<maj><min>*` sub-folder when that is unknown.
- LD_LIBRARY_PATH folders (the loader looks only in the folder itself: not recursive) and
  LD_PRELOAD files (paths; bare names are left to the loader's own search).

The stdlib and the child's own sys.path[0] (the `-c` current folder: a real program's is its
script's folder, unknown here) are not scanned.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field

from cudadoctor.settings import env_seconds

WHERE_TIMEOUT = env_seconds("CUDADOCTOR_TIMEOUT_TOOL", 30.0)

ORIGINS = ("editable", "jit-cache", "PYTHONPATH", "pth", "site-packages", "sys.path", "LD_PRELOAD",
           "LD_LIBRARY_PATH")

# stdlib only, runs in the target interpreter: must work from Python 3.8 on and import nothing heavy
WHERE_SNIPPET = r"""
import json, os, site, sys, sysconfig
out = {'python': sys.executable, 'version': list(sys.version_info[:2]), 'abiflags': getattr(sys, 'abiflags', ''),
       'path': [p for p in sys.path[1:] if p], 'site': [], 'user_site': '', 'stdlib': []}
try:
    out['site'] = list(site.getsitepackages())
except Exception:
    pass
try:
    if site.ENABLE_USER_SITE:
        out['user_site'] = site.getusersitepackages()
except Exception:
    pass
for k in ('purelib', 'platlib'):
    v = sysconfig.get_paths().get(k)
    if v and v not in out['site']:
        out['site'].append(v)
out['stdlib'] = [x for x in (sysconfig.get_paths().get('stdlib'), sysconfig.get_paths().get('platstdlib')) if x]
out['pythonpath'] = os.environ.get('PYTHONPATH', '')
out['torch_extensions_dir'] = os.environ.get('TORCH_EXTENSIONS_DIR')
out['cache_home'] = os.path.realpath(os.getenv('XDG_CACHE_HOME', os.path.expanduser('~/.cache')))
try:
    import importlib.util
    spec = importlib.util.find_spec('torch')
    out['torch'] = list(spec.submodule_search_locations or [])[:1] if spec else []
except Exception:
    out['torch'] = []
print(json.dumps(out))
"""


@dataclass
class Root:
    """A folder (or a list of files) the interpreter or the dynamic loader loads binaries from."""

    path: str = ""
    origin: str = ""  # one of ORIGINS
    via: str = ""  # what put it there: the .pth file, the finder module, the egg-link, the variable
    dist: str = ""  # the distribution an editable root belongs to ('' when unknown here)
    recursive: bool = True  # False: only the folder's own files (LD_LIBRARY_PATH)
    files: list = field(default_factory=list)  # LD_PRELOAD: the files themselves; a finder's module prefixes
    source_tree: bool = False  # a folder people keep sources in: bounded walk, non-identifier folders skipped


@dataclass
class Where:
    python: str = ""
    version: str = ""  # '3.12'
    site_dirs: list = field(default_factory=list)
    roots: list = field(default_factory=list)  # [Root], most specific origin first
    torch_dir: str = ""
    skipped: list = field(default_factory=list)  # notes: entries not scanned and why
    error: str = ""


def ask_interpreter(system, python: str, timeout: float = WHERE_TIMEOUT):
    """(dict, error) from the target interpreter."""
    r = system.run([python, "-c", WHERE_SNIPPET], timeout=timeout)
    if r.timed_out:
        return None, f"{python} gave no answer within {timeout:g} s"
    if r.not_found or r.error:
        return None, f"{python} could not start: {r.error or 'not found'}"
    try:
        d = json.loads((r.stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, f"{python} did not say where it loads from: {r.describe()}"
    return (d, "") if isinstance(d, dict) else (None, f"{python} answered something else than a JSON object")


def where(system, python: str, timeout: float = WHERE_TIMEOUT) -> Where:
    d, err = ask_interpreter(system, python, timeout)
    if d is None:
        return Where(python=python, error=err)
    return roots_from(system, d, python)


def roots_from(system, d: dict, python: str = "") -> Where:
    """The roots of an interpreter's answer (pure on the System port; tests feed recorded answers)."""
    w = Where(python=d.get("python") or python)
    ver = d.get("version") or []
    w.version = ".".join(str(x) for x in ver[:2])
    roots: list = []
    seen: set = set()

    def add(path: str, origin: str, **kw) -> None:
        if not path:
            return
        real = system.realpath(path)
        if real in seen or not system.is_dir(real):
            return
        seen.add(real)
        roots.append(Root(real, origin, **kw))

    sites = []
    for p in list(d.get("site") or []) + [d.get("user_site") or ""]:
        if p and system.is_dir(p) and system.realpath(p) not in sites:
            sites.append(system.realpath(p))
    w.site_dirs = sites
    stdlib = {system.realpath(p) for p in d.get("stdlib") or [] if p}
    # editable installs and .pth lines, per site folder
    pth_roots: list = []
    for sd in sites:
        for name in system.listdir(sd):
            full = os.path.join(sd, name)
            if name.endswith(".egg-link"):
                target = _first_line(system, full)
                if target:
                    add(_abs(target, sd), "editable", via=full, dist=name[:-len(".egg-link")], source_tree=True)
            elif name.endswith(".pth"):
                for kind, value in _pth_entries(system, sd, name):
                    if kind == "path":
                        pth_roots.append((value, full, name))
                    elif kind == "finder":
                        for target in _finder_mapping(system, os.path.join(sd, value + ".py")):
                            if system.is_dir(target):
                                add(target, "editable", via=os.path.join(sd, value + ".py"),
                                    dist=_editable_dist(name), source_tree=True)
                            elif system.is_dir(os.path.dirname(target)):
                                _add_module_files(system, roots, seen, target, os.path.join(sd, value + ".py"),
                                                  _editable_dist(name))
    for value, full, name in pth_roots:
        if name.startswith("__editable__."):
            add(value, "editable", via=full, dist=_editable_dist(name), source_tree=True)
    for value, full, name in pth_roots:
        if not name.startswith("__editable__."):
            site_like = system.realpath(value) in sites or os.path.basename(value.rstrip("/")) in (
                "site-packages", "dist-packages")  # another environment's packages: walked like a site folder
            add(value, "pth", via=full, source_tree=not site_like)
    jit = _jit_cache(system, d)
    for path, via in jit:
        add(path, "jit-cache", via=via)
    for p in (d.get("pythonpath") or "").split(os.pathsep):
        if p:
            add(p, "PYTHONPATH", via="PYTHONPATH", source_tree=True)
    for sd in sites:
        add(sd, "site-packages", via="site")
    for p in d.get("path") or []:
        rp = system.realpath(p)
        if rp in stdlib or any(rp.startswith(s.rstrip("/") + "/") for s in stdlib):
            continue
        if p.endswith((".zip", ".egg")) and not system.is_dir(p):
            w.skipped.append(f"{p}: a zip archive (binaries cannot load from inside it)")
            continue
        add(p, "sys.path", via="sys.path", source_tree=True)
    env = system.env
    files = [f for f in re.split(r"[\s:]+", env.get("LD_PRELOAD", "")) if f]
    pre = [f for f in files if "/" in f and system.file_size(f) is not None]
    if pre:
        roots.append(Root("", "LD_PRELOAD", via="LD_PRELOAD", recursive=False, files=pre))
    for f in files:
        if "/" not in f:
            w.skipped.append(f"LD_PRELOAD {f}: a bare name (the loader searches its own paths for it)")
    for p in env.get("LD_LIBRARY_PATH", "").split(":"):
        if p:
            add(p, "LD_LIBRARY_PATH", via="LD_LIBRARY_PATH", recursive=False)
    w.roots = roots
    t = (d.get("torch") or [""])[0]
    w.torch_dir = system.realpath(t) if t else ""
    return w


def _first_line(system, path: str) -> str:
    text = system.read_text(path, 64 * 1024) or ""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _abs(p: str, base: str) -> str:
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))


_RE_FINDER = re.compile(r"\b(__editable___[\w.]+_finder)\b")


def _pth_entries(system, site_dir: str, name: str):
    """('path', folder) or ('finder', module name) per line of a .pth file (site.addpackage's rules)."""
    text = system.read_text(os.path.join(site_dir, name), 1 << 20) or ""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith(("import ", "import\t")):
            m = _RE_FINDER.search(s)
            if m:
                yield "finder", m.group(1)
            continue
        yield "path", _abs(s.rstrip(), site_dir)


def _finder_mapping(system, path: str) -> list:
    """The values of `MAPPING` in a setuptools editable finder (literal dict; the file is never run)."""
    text = system.read_text(path, 1 << 20)
    if not text:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return []
            if isinstance(value, dict):
                return [v for v in value.values() if isinstance(v, str)]
    return []


def _add_module_files(system, roots: list, seen: set, prefix: str, via: str, dist: str) -> None:
    """A finder maps a top-level module to '<folder>/<name>' (no suffix): its '<name>.*.so' files."""
    folder, base = os.path.split(prefix)
    files = [os.path.join(folder, n) for n in system.listdir(folder) if n.startswith(base + ".")]
    files = [f for f in files if system.realpath(f) not in seen]
    if files:
        seen.update(system.realpath(f) for f in files)
        roots.append(Root(folder, "editable", via=via, dist=dist, recursive=False, files=files))


def _editable_dist(pth_name: str) -> str:
    """'__editable__.my_ext-0.1.pth' -> 'my_ext' (the version follows the last '-')."""
    stem = pth_name[len("__editable__."):-len(".pth")] if pth_name.startswith("__editable__.") else pth_name
    return stem.rsplit("-", 1)[0] if "-" in stem else stem


_RE_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", re.M)
_RE_TORCH_HIP = re.compile(r"^hip\s*(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", re.M)


def _jit_cache(system, d: dict) -> list:
    """[(folder, why)] where torch.utils.cpp_extension.load() keeps (and reuses) its builds."""
    env_dir = d.get("torch_extensions_dir")
    if env_dir:
        return [(env_dir, "TORCH_EXTENSIONS_DIR")]
    base = os.path.join(d.get("cache_home") or "", "torch_extensions")
    if not d.get("cache_home") or not system.is_dir(base):
        return []
    ver = d.get("version") or []
    py = "py" + "".join(str(x) for x in ver[:2]) + (d.get("abiflags") or "")
    torch_dir = (d.get("torch") or [""])[0]
    text = system.read_text(os.path.join(torch_dir, "version.py"), 64 * 1024) if torch_dir else None
    acc = ""
    if text:
        hip, cuda = _RE_TORCH_HIP.search(text), _RE_TORCH_CUDA.search(text)
        acc = f"rocm{hip.group(1).replace('.', '')}" if hip else (f"cu{cuda.group(1).replace('.', '')}" if cuda else "cpu")
    if acc:
        return [(os.path.join(base, f"{py}_{acc}"), "torch's default extensions folder")]
    return [(os.path.join(base, n), "torch's default extensions folder") for n in system.listdir(base)
            if n.startswith(py + "_")]
