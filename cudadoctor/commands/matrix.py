"""`cudadoctor matrix ...`: ask the version matrix directly (driver, cuda, arch, torch, compiler, recommend)."""

from __future__ import annotations

from typing import Optional

import typer

EXIT_USAGE = 2


def _bad(message: str) -> typer.Exit:
    typer.echo(f"cudadoctor: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _emit(data: dict, as_json: bool, lines: list) -> None:
    if as_json:
        import json

        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        for line in lines:
            typer.echo(line)


def _src(m, keys) -> str:
    return ", ".join(keys or [])


def _need_version(text: str, what: str):
    from cudadoctor.matrix.versions import parse_version

    v = parse_version(text)
    if v is None:
        raise _bad(f"{what} {text!r} is not a version number (expected e.g. 12.4 or 535.104.05)")
    return v


# ---------------------------------------------------------------- driver --cuda X


def cmd_driver(cuda: str = typer.Option(..., "--cuda", help="CUDA toolkit version, e.g. 12.4 or 12.4.1"),
               as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The minimum NVIDIA drivers for a CUDA version (Linux/Windows) and the minor-version floor."""
    from cudadoctor.matrix import load

    _need_version(cuda, "CUDA version")
    m = load()
    r = m.min_driver(cuda)
    if r is None:
        raise _bad(f"CUDA {cuda} is older than the data (which starts at CUDA {m.toolkits[0]['cuda']})")
    lines = [f"CUDA {cuda}"]
    if r["full"]:
        f = r["full"]
        lines.append(f"  full compatibility ({f['release']}): Linux >= {f['linux']}, "
                     f"Windows >= {f['windows'] or 'not listed (R580+ for CUDA 13)'}  [{_src(m, f['source'])}; {f['confidence']}]")
    if r["minor_compat"]:
        c = r["minor_compat"]
        lines.append(f"  minor-version compatibility (any {c['major']}.x): Linux >= {c['linux']}, "
                     f"Windows >= {c['windows'] or 'R580+'}  [{_src(m, c['source'])}; {c['confidence']}]")
        lines.append(f"    limits: {c['limits']}")
    elif r["full"]:
        lines.append("  no minor-version compatibility before CUDA 11.1: the driver must meet the full minimum")
    if r["note"]:
        lines.append(f"  note: {r['note']}")
    _emit(r, as_json, lines)


# ---------------------------------------------------------------- cuda --driver X


def cmd_cuda(driver: str = typer.Option(..., "--driver", help="NVIDIA driver version, e.g. 535.104.05"),
             as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The newest CUDA a driver runs, and what minor-version compatibility adds."""
    from cudadoctor.matrix import load

    v = _need_version(driver, "driver version")
    m = load()
    row = m.branch_for_driver(driver)
    if row is None:
        raise _bad(f"driver {driver} is older than the data (which starts at branch R{m.branches[0]['branch']})")
    cuda = row["cuda"]
    major = int(cuda.split(".")[0])
    mvc = m.minor_compat_for(major)
    mvc_ok = bool(mvc and v.release[0] >= mvc["branch_min"])
    note = ""
    if v.release[0] > m.branch_data_stops_at:
        note = (f"the data stops at branch R{m.branch_data_stops_at} (CUDA {cuda}); "
                f"driver {driver} runs at least that")
    data = {
        "driver": driver, "branch": row["branch"], "max_cuda": cuda,
        "source": row["source"], "confidence": row["confidence"],
        "minor_compat": ({"major": major, "runs": f"any CUDA {major}.x toolkit (limited)",
                          "limits": "PTX newer than CUDA " + cuda + " cannot be JIT-compiled (error 222); "
                                    "APIs needing a newer driver return error 36"}
                         if mvc_ok and major >= 11 else None),
        "older_majors": "runs every older CUDA major (backward compatible)",
        "note": note,
    }
    lines = [f"driver {driver} (branch R{row['branch']}): newest CUDA {cuda}  [{_src(m, row['source'])}; {row['confidence']}]"]
    if data["minor_compat"]:
        lines.append(f"  minor-version compatibility: {data['minor_compat']['runs']}; {data['minor_compat']['limits']}")
    if note:
        lines.append(f"  note: {note}")
    _emit(data, as_json, lines)


# ---------------------------------------------------------------- arch X


def resolve_arch(m, text: str) -> tuple:
    """'8.9', 'sm_89', '89', 'RTX 4090' -> (cc, how). Raises typer.Exit(2) when unknown."""
    from cudadoctor.compat import parse_cc

    cc = parse_cc(text)
    if cc is not None:
        if m.arch_for_cc(cc) is None:
            known = ", ".join(a["cc"] for a in m.archs)
            raise _bad(f"compute capability {cc[0]}.{cc[1]} is not in the data (known: {known})")
        return cc, "compute capability"
    hits = m.find_gpu(text)
    if not hits:
        raise _bad(f"{text!r} is neither a compute capability (8.9, sm_89) nor a GPU name in the data")
    ccs = sorted({h["cc"] for h in hits}, key=lambda s: tuple(int(x) for x in s.split(".")))
    if len(ccs) > 1:
        which = "; ".join(f"{h['example']} = {h['cc']}" for h in hits)
        raise _bad(f"{text!r} matches several GPUs ({which}); be more specific")
    a, b = ccs[0].split(".")
    return (int(a), int(b)), f"GPU name ({hits[0]['example']})"


def cmd_arch(what: str = typer.Argument(..., help="8.9, sm_89 or a GPU name such as 'RTX 4090'"),
             as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """A GPU architecture: its name, the nvcc versions that target it, the torch wheels that include it."""
    from cudadoctor.matrix import load

    m = load()
    cc, how = resolve_arch(m, what)
    row = m.arch_for_cc(cc)
    nv = m.nvcc_for_cc(cc)
    ts = m.torch_support_for_cc(cc)
    data = {
        "query": what, "matched_by": how, "cc": row["cc"], "architecture": row["architecture"],
        "examples": row["examples"], "nvcc": nv, "torch": ts,
        "source": row["source"], "confidence": row["confidence"], "note": row.get("note", ""),
    }
    last = nv["last"] or f"still supported (data stops at {m.nvcc_data_stops_at})"
    lines = [f"cc {row['cc']}: {row['architecture']}  [{_src(m, row['source'])}; {row['confidence']}]",
             f"  examples: {', '.join(row['examples']) or '(none known)'}",
             f"  nvcc: {nv['sm']}/{nv['compute']} from CUDA {nv['first']}, last: {last}"]
    for v in nv["variants"]:
        lines.append(f"    {v['target']} from CUDA {v['first']}")
    if nv.get("renamed_to"):
        lines.append(f"    renamed to sm_{nv['renamed_to'].replace('.', '')} from CUDA 13.0")
    if ts["variants"]:
        lines.append(f"  torch wheels: newest {ts['newest_torch']} (data stops at {ts['data_stops_at']}), "
                     f"oldest {ts['oldest_torch']}")
        by_rel: dict = {}
        for h in ts["variants"]:
            by_rel.setdefault(h["torch"], []).append(h["cu"] + ("" if h["image"] == "sass" else " (PTX)"))
        for rel in sorted(by_rel, key=lambda s: tuple(int(x) for x in s.split(".")), reverse=True):
            lines.append(f"    {rel}: {', '.join(by_rel[rel])}")
    else:
        lines.append("  torch wheels: no official wheel in the data includes this architecture")
    _emit(data, as_json, lines)


# ---------------------------------------------------------------- torch X


def cmd_torch(version: str = typer.Argument(..., help="torch version, e.g. 2.8.0 or 2.8"),
              as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The CUDA wheel variants of a torch release, with their arch lists and cuDNN."""
    from cudadoctor.matrix import load
    from cudadoctor.matrix.versions import major_minor, parse_version

    base = version.split("+")[0]
    if parse_version(base) is None:
        raise _bad(f"torch version {version!r} is not a version number (expected e.g. 2.8.0)")
    m = load()
    variants = m.torch_variants(base)
    note = ""
    if not variants:
        newest = m.torch_data_stops_at
        if major_minor(base) > major_minor(newest):
            note = f"the data stops at torch {newest}; showing {newest}"
            variants = m.torch_variants(newest)
        else:
            raise _bad(f"torch {version} has no CUDA wheel variants in the data "
                       f"(it covers {m.torch_releases[0]['torch']} to {newest})")
    rel = m.torch_release(variants[0]["torch"])
    data = {"torch": version, "release": rel["torch"], "pypi_default": rel.get("pypi_default") or None,
            "pypi_confidence": rel.get("pypi_confidence"), "variants": variants, "note": note}
    lines = [f"torch {rel['torch']} (PyPI default: {rel.get('pypi_default') or 'unknown'}, {rel.get('pypi_confidence')})"]
    for v in variants:
        lines.append(f"  {v['cu']:6} {v['role']:12} archs {';'.join(v['archs'])}"
                     f"{' +PTX ' + ';'.join(v['ptx']) if v['ptx'] else ''}  cuDNN {v['cudnn'] or '?'}"
                     f"{'  NCCL ' + v['nccl'] if v['nccl'] else ''}  [{_src(m, v['source'])}; {v['confidence']}]")
        lines.append(f"         {v['pip']}")
    if note:
        lines.append(f"  note: {note}")
    _emit(data, as_json, lines)


# ---------------------------------------------------------------- compiler --cuda X


def cmd_compiler(cuda: str = typer.Option(..., "--cuda", help="CUDA toolkit version, e.g. 12.1"),
                 as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The newest GCC / clang the nvcc of a CUDA version accepts."""
    from cudadoctor.matrix import load
    from cudadoctor.matrix.versions import major_minor

    _need_version(cuda, "CUDA version")
    m = load()
    b = m.compiler_bounds(cuda)
    note = ""
    if b is None:
        newest = max((r["cuda_last"] for r in m.compilers), key=major_minor)
        if major_minor(cuda) > major_minor(newest):
            note = f"the data stops at CUDA {newest}; showing {newest}"
            b = m.compiler_bounds(newest)
        else:
            raise _bad(f"CUDA {cuda} is not in the host-compiler data "
                       f"(it covers {m.compilers[0]['cuda_first']} to {newest})")
    b = dict(b, note=(note or b.get("note", "")), query=cuda)
    lines = [f"CUDA {cuda} (row {b['rows_cover']}): GCC <= {b['gcc_max']}"
             f"{' (>= ' + str(b['gcc_min']) + ' for torch extensions)' if b['gcc_min'] else ''}"
             f", clang <= {b['clang_max'] if b['clang_max'] else 'not in data'}"
             f"{', MSVC ' + b['msvc'] if b['msvc'] else ''}  [{_src(m, b['source'])}; {b['confidence']}]"]
    if b["note"]:
        lines.append(f"  note: {b['note']}")
    _emit(b, as_json, lines)


# ---------------------------------------------------------------- recommend


def cmd_recommend(cc: Optional[str] = typer.Option(None, "--cc", help="GPU compute capability or name (default: the live GPUs)"),
                  driver: Optional[str] = typer.Option(None, "--driver", help="driver version (default: the live driver)"),
                  limit: int = typer.Option(8, "--limit", help="How many to show (0: all)."),
                  as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The torch + CUDA wheels that work on this GPU and driver, newest first."""
    from cudadoctor.matrix import load

    m = load()
    ccs: list = []
    driver_cuda = None
    sources = []
    if cc:
        ccs = [resolve_arch(m, cc)[0]]
        sources.append("--cc")
    if driver:
        _need_version(driver, "driver version")
        sources.append("--driver")
    if not cc or not driver:
        live = _live_driver()
        if not driver and live.version:
            driver, driver_cuda = live.version, live.cuda or None
            sources.append("live driver (" + ", ".join(live.sources) + ")")
        if not cc:
            ccs = sorted({g.cc for g in live.gpus if g.cc})
            if ccs:
                sources.append("live GPUs")
    if not ccs and not driver:
        raise _bad("no GPU or driver found here; pass --cc (e.g. 8.9 or 'RTX 4090') and --driver")
    per_gpu = [m.recommend_torch(c, driver, driver_cuda) for c in ccs] or [m.recommend_torch(None, driver, driver_cuda)]
    # a wheel must work on every GPU
    keys = set.intersection(*({(r["torch"], r["cu"]) for r in lst} for lst in per_gpu))
    recs = [r for r in per_gpu[0] if (r["torch"], r["cu"]) in keys]
    shown = recs[:limit] if limit else recs
    data = {"gpus": [f"{c[0]}.{c[1]}" for c in ccs], "driver": driver, "driver_cuda": driver_cuda,
            "from": sources, "recommendations": shown, "total": len(recs),
            "data_stops_at": m.torch_data_stops_at}
    head = f"GPU cc {', '.join(data['gpus']) or 'any'}, driver {driver or 'any'}"
    lines = [head]
    if not recs:
        lines.append("  no official torch wheel in the data runs on this GPU with this driver")
    for r in shown:
        extra = " (minor-version compatibility)" if r["driver"] == "minor-version" else ""
        extra += " (PTX JIT)" if r["gpu"] == "ptx-jit" else ""
        lines.append(f"  torch {r['torch']} {r['cu']}{extra}: {r['pip']}")
    _emit(data, as_json, lines)
    if not recs:
        raise typer.Exit(1)


def _live_driver():
    """The driver and GPUs of this machine, from nvidia-smi / NVML (child processes, timeouts)."""
    from cudadoctor.checks.common import driver_view
    from cudadoctor.checks.registry import Context
    from cudadoctor.facts import registry
    from cudadoctor.system.host import HostSystem

    facts = registry.gather(HostSystem(), ["nvidia_smi", "nvml"], registry.Options())
    return driver_view(Context(facts=facts))


def register(app: typer.Typer) -> None:
    sub = typer.Typer(name="matrix", no_args_is_help=True,
                      help="Ask the version matrix: drivers, CUDA, GPU architectures, torch wheels, host compilers.")
    sub.command("driver")(cmd_driver)
    sub.command("cuda")(cmd_cuda)
    sub.command("arch")(cmd_arch)
    sub.command("torch")(cmd_torch)
    sub.command("compiler")(cmd_compiler)
    sub.command("recommend")(cmd_recommend)
    app.add_typer(sub, name="matrix")
