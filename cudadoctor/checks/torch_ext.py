"""Step `torch.ext` (order 91): torch extensions (torchvision's _C.so, flash-attn, xformers, a JIT or editable build)
that cannot load under the torch the interpreter imports: built against another torch (a C++ function they call is
gone: "undefined symbol: _ZN3c10..."), built with the other C++ ABI, or built for a CUDA torch where torch is a CPU
or ROCm build ("libc10_cuda.so: cannot open shared object file"). The facts come from the extensions' own dynamic
symbol tables (probes/torch_links.py); copies Python never loads are named, not failed."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from cudadoctor.checks.common import driver_view, q, torch_base_version
from cudadoctor.checks.probe_scan import _dist, _jit_folder, _owner_key
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import Finding, Fix, Status
from cudadoctor.probes.torch_links import CUDA_LIBS

DOCS = "https://pytorch.org/docs/stable/cpp_extension.html"
GET_STARTED = "https://pytorch.org/get-started/locally/"
_PYG_LABEL = re.compile(r"^pt\d+(?:cu\d+|cpu)$")


def _files(es: list) -> list:
    return [{"path": e.path, "origin": e.origin, "dist": e.dist or None, "version": e.version or None,
             "built_for_torch": e.built_for or None, "missing_libraries": e.missing_libs or None,
             "missing": e.missing[:5] or None, "missing_count": e.missing_count or None,
             "abi_mismatch": e.abi_mismatch or None} for e in es]


def torch_index(version: str) -> Optional[str]:
    """download.pytorch.org's index for this torch build ('--index-url ...'), '' for a plain PyPI release, None when
    no index has it (an NGC or source build: 2.4.0a0+07cecf4168)."""
    from cudadoctor.checks.torch_cuda import INDEX

    base, _, local = (version or "").partition("+")
    nightly = ".dev" in base
    if not local:
        return "" if not re.search(r"a0$|\.dev", base) else None
    if not re.fullmatch(r"cu\d+|rocm\d+(?:\.\d+)*|cpu|xpu", local):
        return None
    return f" --index-url {INDEX}{'nightly/' if nightly else ''}{local}"


def _verify(e, py: str) -> str:
    return f"{q(py)} -c \"import torch, ctypes; ctypes.CDLL({e.path!r})\""


def _rebuild(e, py: str, torch_version: str) -> Fix:
    """Rebuild `e` (an ExtLink) from source against the torch the interpreter imports, by where it came from."""
    dist = e.dist or _dist(e.package)
    if e.install in ("editable", "develop") and e.source:
        return Fix(f"{dist} is installed in editable mode from {e.source}; rebuild it there against torch {torch_version}:",
                   (f"cd {q(e.source)} && {q(py)} -m pip install -e . --no-build-isolation --no-deps", _verify(e, py)),
                   DOCS)
    if e.origin == "jit-cache":
        folder = _jit_folder(e)
        return Fix(f"A torch.utils.cpp_extension.load() build in {folder}; remove it and the next load() builds it again "
                   f"against torch {torch_version}:", (f"rm -rf {q(folder)}",), DOCS)
    if e.dist or e.origin == "site-packages":
        base, _, local = (e.version or "").partition("+")
        if _PYG_LABEL.match(local):  # PyG's wheels (torch_scatter 2.1.2+pt25cu124): its own index, per torch build
            tv = torch_base_version(torch_version)
            tl = torch_version.partition("+")[2] or "cpu"
            return Fix(f"{dist} {e.version} is PyG's wheel for another torch ({local}); install its wheel for torch {tv} "
                       f"({tl}) from PyG's index:",
                       (f"{q(py)} -m pip install --force-reinstall --no-deps {dist} -f "
                        f"https://data.pyg.org/whl/torch-{tv}+{tl}.html", _verify(e, py)), DOCS)
        pin = f"{dist}=={base}" if base else dist
        return Fix(f"Rebuild {dist} from source against torch {torch_version} (--no-binary: a wheel would bring the same "
                   f"binary back; --no-build-isolation: build against the torch installed here):",
                   (f"{q(py)} -m pip install --force-reinstall --no-cache-dir --no-build-isolation --no-deps "
                    f"--no-binary {dist} {pin}", _verify(e, py)), DOCS)
    if e.project:
        return Fix(f"It was built in place in {e.project} ({e.origin}); rebuild it there against torch {torch_version}:",
                   (f"cd {q(e.project)} && {q(py)} setup.py build_ext --inplace --force", _verify(e, py)), DOCS)
    return Fix(f"{e.path} ({e.origin}) belongs to no installed package; rebuild it against torch {torch_version}, or "
               f"take it off the path the interpreter loads from. To see the loader's own words:", (_verify(e, py),), DOCS)


def relink_fix(e, py: str, torch_version: str) -> Fix:
    """The pinned release's reinstall (a wheel that requires torch==X), else the rebuild."""
    tv = torch_base_version(torch_version)
    index = torch_index(torch_version)
    if e.built_for and torch_base_version(e.built_for) != tv and index is not None:
        dist = e.dist or _dist(e.package)
        back = e.built_for + ("+" + torch_version.partition("+")[2] if "+" in torch_version and "+" not in e.built_for
                              else "")
        back_index = torch_index(back)
        cmds = [f"{q(py)} -m pip install \"torch=={tv}\" {dist}{index}"]
        if back_index is not None:
            cmds.append(f"{q(py)} -m pip install \"torch=={torch_base_version(back)}\"{back_index}")
        cmds.append(_verify(e, py))
        return Fix(f"{dist} {e.version} is the build for torch {e.built_for} (its wheel requires torch=={e.built_for}); "
                   f"this interpreter has torch {torch_version}. Install the {dist} release built for torch {tv} (pip "
                   f"picks it when both are named), or go back to torch {e.built_for}:", tuple(cmds), DOCS)
    return _rebuild(e, py, torch_version)


def _undefined(key: str, es: list, links, py: str) -> Finding:
    first = es[0]
    n = sum(e.missing_count for e in es)
    shown = (first.demangled[:1] or first.missing[:1] or ["a torch function"])[0] or first.missing[0]
    jit = all(e.origin == "jit-cache" for e in es)
    built = f" (built for torch {first.built_for})" if first.built_for else ""
    detail = "; ".join(
        f"{e.path}: {e.missing_count} of the {e.needs} torch function(s) it calls are missing, e.g. "
        + ", ".join((e.demangled or e.missing)[:3]) for e in es[:5]) + (f"; and {len(es) - 5} more" if len(es) > 5 else "")
    if jit:
        detail += ("; torch.utils.cpp_extension.load() rebuilds a cached build when its sources or torch's headers are "
                   "newer, so a program that calls load() again may rebuild it; loaded as it is, it fails")
    return Finding(
        "torch.ext.undefined-symbol", Status.WARN if jit else Status.FAIL,
        f"{key}{built} was built against another torch: {n} torch function(s) it calls are not in torch "
        f"{links.torch_version} (e.g. {shown}); importing it fails with 'undefined symbol' naming one of them",
        detail=detail, fix=relink_fix(first, py, links.torch_version),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


def _abi(key: str, es: list, links, py: str) -> Finding:
    first = es[0]
    return Finding(
        "torch.ext.cxx11-abi-mismatch", Status.FAIL,
        f"{key} was built with the other C++ ABI than torch {links.torch_version} (_GLIBCXX_USE_CXX11_ABI): the "
        f"{first.missing_count} torch function(s) it calls exist in torch only with the other std::string/std::list "
        f"spelling; importing it fails with 'undefined symbol'",
        detail="; ".join(f"{e.path}: e.g. {(e.demangled or e.missing or ['?'])[0]}" for e in es[:5]) +
        "; torch's ABI: python -c \"import torch; print(torch._C._GLIBCXX_USE_CXX11_ABI)\"",
        fix=_rebuild(first, py, links.torch_version),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


def _needs_cuda(ctx: Context, key: str, es: list, links, py: str) -> Finding:
    from cudadoctor.checks.torch_cuda import pip_torch, suggested_tag

    first = es[0]
    lib = first.missing_libs[0]
    kind = {"rocm": "a ROCm build", "xpu": "an XPU build"}.get(links.variant, "CPU-only")
    summary = (f"{key} is built for a CUDA torch, but torch {links.torch_version} is {kind}: importing it fails with "
               f"'{lib}: cannot open shared object file'")
    drv = driver_view(ctx)
    if links.variant == "cpu" and drv.present:
        want = first.built_for or torch_base_version(links.torch_version)
        fix = Fix(f"Install the CUDA build of torch {want} ({key} needs {', '.join(first.missing_libs)}, which only CUDA "
                  f"builds ship; this machine has NVIDIA driver {drv.version}):",
                  (pip_torch(py, want, suggested_tag(ctx, drv.cuda or "", want)), _verify(first, py)), GET_STARTED)
    else:
        why = ("no NVIDIA driver was found here, so a CUDA torch would not help" if links.variant == "cpu" else
               f"keep this torch, {kind}")
        base = _rebuild(first, py, links.torch_version)
        fix = Fix(f"Install {key}'s build for this torch ({why}), or rebuild it from source for it: " +
                  base.text[:1].lower() + base.text[1:], base.commands, base.docs)
    return Finding("torch.ext.needs-cuda-torch", Status.FAIL, summary,
                   detail="; ".join(f"{e.path} needs {', '.join(e.missing_libs)}" for e in es[:5]), fix=fix,
                   evidence={"torch": links.torch_version, "torch_variant": links.variant, "torch_lib": links.torch_lib,
                             "files": _files(es)}, affects=key)


def _missing_lib(key: str, es: list, links, py: str) -> Finding:
    first = es[0]
    lib = first.missing_libs[0]
    return Finding(
        "torch.ext.missing-torch-library", Status.FAIL,
        f"{key} needs {', '.join(first.missing_libs)}, which torch {links.torch_version} does not ship: importing it "
        f"fails with '{lib}: cannot open shared object file'",
        detail="; ".join(f"{e.path} needs {', '.join(e.missing_libs)} (not in {links.torch_lib})" for e in es[:5]),
        fix=relink_fix(first, py, links.torch_version),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


def _group_findings(ctx: Context, key: str, es: list, links, py: str) -> list:
    out = []
    libs = [e for e in es if e.missing_libs]
    if libs:
        cuda_only = all(set(e.missing_libs) <= set(CUDA_LIBS) for e in libs) and links.variant != "cuda"
        out.append(_needs_cuda(ctx, key, libs, links, py) if cuda_only else _missing_lib(key, libs, links, py))
    abi = [e for e in es if e.missing_count and not e.missing_libs and e.abi_mismatch]
    if abi:
        out.append(_abi(key, abi, links, py))
    syms = [e for e in es if e.missing_count and not e.missing_libs and not e.abi_mismatch]
    if syms:
        out.append(_undefined(key, syms, links, py))
    twins = [e.twin for e in es if e.twin]
    if twins and all(e.twin for e in es):
        # another copy of the same module loads, and which one Python imports first is not known here
        mod = es[0].package.split(".")[0] if es[0].package.split(".")[0].isidentifier() else "MODULE"
        note = (f"another copy, {twins[0]}, loads under this torch: which one Python imports depends on sys.path "
                f"({q(py)} -c \"import {mod}; print({mod}.__file__)\")")
        out = [dataclasses.replace(f, status=Status.WARN, detail=(f.detail + "; " if f.detail else "") + note)
               if f.status is Status.FAIL else f for f in out]
    return out


@step("torch.ext", "torch extensions vs this torch", 91, facts=("torch_links", "torch", "probe_scan", "nvidia_smi", "nvml"))
def check_torch_ext(ctx: Context) -> Outcome:
    """Every torch extension where the target loads from can load under its torch: the torch libraries it needs are
    there and every torch function it calls is exported."""
    fact = ctx.fact("torch_links")
    links = fact.value
    if links is None or not fact.ok or links.error:
        why = (links.error if links is not None and links.error else "") or fact.error or fact.state.value
        return Outcome("not judged", [Finding("torch.ext.not-judged", Status.SKIP, f"Torch extensions not judged: {why}",
                                              evidence={"source": fact.source})])
    py = links.python or "python"
    groups: dict = {}
    for e in links.files:
        if e.broken:
            groups.setdefault(_owner_key(e), []).append(e)
    findings = [f for key, es in sorted(groups.items()) for f in _group_findings(ctx, key, es, links, py)]
    n = len(links.files)
    quiet = [e for e in links.files if e.not_loaded and (e.missing_libs or e.missing_count)]
    if quiet:
        findings.append(Finding(
            "torch.ext.not-loaded", Status.SKIP,
            f"{len(quiet)} torch-linked file(s) could not load under torch {links.torch_version}, but Python does not "
            f"load them: {quiet[0].not_loaded}",
            detail="; ".join(f"{e.path}: {e.not_loaded}" for e in quiet[:5]),
            evidence={"files": _files(quiet)}))
    unread = [e for e in links.files if e.error]
    if unread:
        findings.append(Finding("torch.ext.unreadable", Status.SKIP,
                                f"{len(unread)} extension(s) not judged: {unread[0].error}",
                                evidence={"files": [e.path for e in unread[:20]]}))
    if links.more:
        findings.append(Finding("torch.ext.more", Status.SKIP,
                                f"{links.more} more torch extension(s) past the first {n} were not judged"))
    bad = len({e.path for es in groups.values() for e in es})
    cut = " (the scan was cut short: extensions past its cut were not seen, see the CUDA binaries step)" \
        if links.truncated else ""
    if not groups:
        findings.append(Finding(
            "torch.ext.ok", Status.OK,
            (f"{n} torch extension{'' if n == 1 else 's'} where {py} loads from: each finds the torch libraries and "
             f"functions it needs in torch {links.torch_version}" if n else
             f"no torch extensions where {py} loads from (nothing else links against torch's libraries)") + cut,
            evidence={"files": n, "torch_lib": links.torch_lib, "exported": links.exported, "seconds": links.seconds}))
    summary = (f"{bad} of {n} torch extensions cannot load under torch {links.torch_version}" if bad else
               f"{n} torch extension{'' if n == 1 else 's'} link against torch {links.torch_version}" if n else
               "no torch extensions")
    return Outcome(summary, findings)
