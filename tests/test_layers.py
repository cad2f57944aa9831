"""The house's arrows run one way: system -> facts -> checks -> render (DESIGN.md).

Every `import cudadoctor.X` / `from cudadoctor.X import` in the package, at module level or inside a
function, is read with ast; a lower layer importing a higher one fails here, as does a cycle between
two modules of the bench.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "cudadoctor"

# package -> packages it must never import (directly or in a function body)
FORBIDDEN = {
    "settings": {"system", "facts", "checks", "render", "commands", "probes", "bench", "explain", "fleet"},
    "system": {"facts", "checks", "render", "commands", "probes", "bench", "explain", "fleet", "doctor"},
    "probes": {"facts", "checks", "render", "commands", "bench", "explain", "fleet", "doctor"},
    "child": {"facts", "checks", "render", "commands", "probes", "bench", "explain", "fleet", "system"},
    "facts": {"checks", "render", "commands", "fleet", "doctor"},
    "checks": {"render", "commands", "fleet", "doctor"},
    "matrix": {"facts", "checks", "render", "commands", "probes", "bench", "explain", "fleet"},
    "render": {"commands"},
}


def _imports(path: pathlib.Path) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cudadoctor"):
            out.add(node.module)
            for a in node.names:  # `from cudadoctor import checks`
                if node.module == "cudadoctor":
                    out.add(f"cudadoctor.{a.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("cudadoctor"))
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        yield ".".join(rel.parts), p


@pytest.mark.parametrize("module,path", list(_modules()), ids=lambda x: str(x) if isinstance(x, str) else "")
def test_no_arrow_runs_backwards(module, path):
    layer = _layer(module)
    if layer.endswith("__init__"):
        return
    forbidden = FORBIDDEN.get(layer, set())
    bad = sorted(m for m in _imports(path) if _layer(m) in forbidden)
    assert not bad, f"{module} (layer {layer}) imports {bad}"


def test_no_import_cycle_between_two_modules():
    graph = {m: {i for i in _imports(p) if i != m} for m, p in _modules()}
    pairs = sorted((a, b) for a, deps in graph.items() for b in deps
                   if a < b and a in graph.get(b, set()))
    assert not pairs, f"modules that import each other: {pairs}"

