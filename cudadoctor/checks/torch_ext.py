"""Step `torch.ext` (order 91): torch extensions (torchvision's _C.so, flash-attn, xformers, a JIT or editable build)
that cannot load under the torch the interpreter imports: built against another torch (a C++ function they call is
gone: "undefined symbol: _ZN3c10..."), or built for a CUDA torch where torch is CPU-only ("libc10_cuda.so: cannot open
shared object file"). The facts come from the extensions' own dynamic symbol tables (probes/torch_links.py)."""

from __future__ import annotations

from cudadoctor.checks.common import q, torch_base_version
from cudadoctor.checks.probe_scan import _dist, _jit_folder, _owner_key
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.model import Finding, Fix, Status
from cudadoctor.probes.torch_links import CUDA_LIBS

DOCS = "https://pytorch.org/docs/stable/cpp_extension.html"


def _files(es: list) -> list:
    return [{"path": e.path, "origin": e.origin, "dist": e.dist or None, "version": e.version or None,
             "built_for_torch": e.built_for or None, "missing_libraries": e.missing_libs or None,
             "missing": e.missing[:5] or None, "missing_count": e.missing_count or None} for e in es]


def _pip_torch_variant(py: str, version: str, cuda) -> str:
    """The pip line that installs torch `version` in the variant this interpreter has (cu130, cpu, ...)."""
    from cudadoctor.checks.torch_cuda import INDEX

    local = version.split("+", 1)[1] if "+" in version else ""
    index = f" --index-url {INDEX}{local}" if local else ""
    return f"{q(py)} -m pip install \"torch=={torch_base_version(version)}\"{index}"


def relink_fix(e, py: str, torch_version: str, torch_cuda) -> Fix:
    """Rebuild or reinstall `e` (an ExtLink) for the torch the interpreter imports, by where it came from."""
    tv = torch_base_version(torch_version)
    dist = e.dist or _dist(e.package)
    verify = f"{q(py)} -c \"import torch, {e.package.split('.')[0]}\"" if e.package.isidentifier() else ""
    if e.built_for and torch_base_version(e.built_for) != tv:
        local = torch_version.split("+", 1)[1] if "+" in torch_version else ""
        from cudadoctor.checks.torch_cuda import INDEX

        index = f" --index-url {INDEX}{local}" if local else ""
        return Fix(f"{dist} {e.version} is the build for torch {e.built_for} (its wheel requires torch=={e.built_for}); "
                   f"this interpreter has torch {torch_version}. Install the {dist} release built for torch {tv} (pip "
                   f"picks it when both are named), or go back to torch {e.built_for}:",
                   tuple(c for c in (f"{q(py)} -m pip install \"torch=={tv}\" {dist}{index}",
                                     _pip_torch_variant(py, e.built_for + (f"+{local}" if local else ""), torch_cuda),
                                     verify) if c), DOCS)
    if e.install in ("editable", "develop") and e.source:
        return Fix(f"{dist} is installed in editable mode from {e.source} and was built against another torch; "
                   f"rebuild it there against torch {torch_version}:",
                   tuple(c for c in (f"cd {q(e.source)} && {q(py)} -m pip install -e . --no-build-isolation --no-deps",
                                     verify) if c), DOCS)
    if e.origin == "jit-cache":
        folder = _jit_folder(e)
        return Fix(f"A torch.utils.cpp_extension.load() build in {folder}, built against another torch; remove it and "
                   f"the next load() builds it again against torch {torch_version}:", (f"rm -rf {q(folder)}",), DOCS)
    if e.dist or e.origin == "site-packages":
        pin = f"{dist}=={e.version}" if e.version else dist
        return Fix(f"Rebuild {dist} against torch {torch_version} (--no-build-isolation builds against the torch "
                   f"installed here, not a fresh one pip would fetch):",
                   tuple(c for c in (f"{q(py)} -m pip install --force-reinstall --no-cache-dir --no-build-isolation "
                                     f"--no-deps {pin}", verify) if c), DOCS)
    if e.project:
        return Fix(f"It was built in place in {e.project} ({e.origin}); rebuild it there against torch {torch_version}:",
                   (f"cd {q(e.project)} && {q(py)} setup.py build_ext --inplace --force",), DOCS)
    return Fix(f"{e.path} ({e.origin}) belongs to no installed package; rebuild it against torch {torch_version}, or "
               f"take it off the path the interpreter loads from.", (), DOCS)


def _undefined(key: str, es: list, links, py: str) -> Finding:
    first = es[0]
    n = sum(e.missing_count for e in es)
    shown = first.demangled[0] if first.demangled and first.demangled[0] else first.missing[0]
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
        detail=detail, fix=relink_fix(first, py, links.torch_version, links.torch_cuda),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


def _needs_cuda(ctx: Context, key: str, es: list, links, py: str) -> Finding:
    from cudadoctor.checks.common import driver_view
    from cudadoctor.checks.torch_cuda import pip_torch, suggested_tag

    first = es[0]
    lib = first.missing_libs[0]
    want = first.built_for or torch_base_version(links.torch_version)
    drv = driver_view(ctx)
    tag = suggested_tag(ctx, drv.cuda or "", want)
    return Finding(
        "torch.ext.needs-cuda-torch", Status.FAIL,
        f"{key} is built for a CUDA torch, but torch {links.torch_version} is CPU-only: importing it fails with "
        f"'{lib}: cannot open shared object file'",
        detail="; ".join(f"{e.path} needs {', '.join(e.missing_libs)}" for e in es[:5]),
        fix=Fix(f"Install the CUDA build of torch{' ' + want if want else ''} ({key} needs {', '.join(first.missing_libs)}, "
                f"which only CUDA builds ship):", (pip_torch(py, want, tag),), "https://pytorch.org/get-started/locally/"),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


def _missing_lib(key: str, es: list, links, py: str) -> Finding:
    first = es[0]
    lib = first.missing_libs[0]
    return Finding(
        "torch.ext.missing-torch-library", Status.FAIL,
        f"{key} needs {', '.join(first.missing_libs)}, which torch {links.torch_version} does not ship: importing it "
        f"fails with '{lib}: cannot open shared object file'",
        detail="; ".join(f"{e.path} needs {', '.join(e.missing_libs)} (not in {links.torch_lib})" for e in es[:5]),
        fix=relink_fix(first, py, links.torch_version, links.torch_cuda),
        evidence={"torch": links.torch_version, "torch_lib": links.torch_lib, "files": _files(es)}, affects=key)


@step("torch.ext", "torch extensions vs this torch", 91, facts=("torch_links", "torch", "probe_scan", "nvidia_smi", "nvml"))
def check_torch_ext(ctx: Context) -> Outcome:
    """Every torch extension where the target loads from can load under its torch: the torch libraries it needs are
    there and every torch function it calls is exported."""
    fact = ctx.fact("torch_links")
    links = fact.value
    if links is None or not fact.ok:
        return Outcome("not judged", [Finding("torch.ext.not-judged", Status.SKIP,
                                              f"Torch extensions not judged: {fact.error or fact.state.value}",
                                              evidence={"source": fact.source})])
    py = links.python or "python"
    groups: dict = {}
    for e in links.files:
        if e.missing_libs or e.missing_count:
            groups.setdefault(_owner_key(e), []).append(e)
    findings = []
    for key, es in sorted(groups.items()):
        libs = [e for e in es if e.missing_libs]
        if libs:
            cuda_only = all(set(e.missing_libs) <= set(CUDA_LIBS) for e in libs) and not links.torch_cuda
            findings.append(_needs_cuda(ctx, key, libs, links, py) if cuda_only else _missing_lib(key, libs, links, py))
        syms = [e for e in es if e.missing_count and not e.missing_libs]
        if syms:
            findings.append(_undefined(key, syms, links, py))
    n = len(links.files)
    unread = [e for e in links.files if e.error]
    if unread:
        findings.append(Finding("torch.ext.unreadable", Status.SKIP,
                                f"{len(unread)} extension(s) could not be read: {unread[0].error}",
                                evidence={"files": [e.path for e in unread[:20]]}))
    if links.more:
        findings.append(Finding("torch.ext.more", Status.SKIP,
                                f"{links.more} more torch extension(s) past the first {n} were not judged"))
    bad = len({e.path for es in groups.values() for e in es})
    if not groups:
        findings.append(Finding(
            "torch.ext.ok", Status.OK,
            f"{n} torch extension{'' if n == 1 else 's'} where {py} loads from: each finds the torch libraries and "
            f"functions it needs in torch {links.torch_version}" if n else
            f"no torch extensions where {py} loads from (nothing else links against torch's libraries)",
            evidence={"files": n, "torch_lib": links.torch_lib, "exported": links.exported, "seconds": links.seconds}))
    summary = (f"{bad} of {n} torch extensions cannot load under torch {links.torch_version}" if bad else
               f"{n} torch extension{'' if n == 1 else 's'} link against torch {links.torch_version}" if n else
               "no torch extensions")
    return Outcome(summary, findings)
