"""`cudadoctor scan`: name every CUDA binary in an interpreter's site-packages that cannot run on this GPU."""

from __future__ import annotations

import json
import os
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("scan")
    def scan(
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose site-packages to scan (default: this one)."),
        path: Optional[str] = typer.Option(None, "--path", metavar="DIR",
                                           help="Scan this folder instead of an interpreter's site-packages."),
        cc: Optional[str] = typer.Option(None, "--cc", metavar="X.Y",
                                         help="Judge for this compute capability (default: the local GPU)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON."),
        show_all: bool = typer.Option(False, "--all", help="List every CUDA binary, not only those that cannot run."),
        max_files: Optional[int] = typer.Option(None, "--max-files", metavar="N", min=1,
                                                help="Files to look at per folder before the scan is cut (default: "
                                                     "50,000 per source tree, 400,000 per site-packages)."),
    ) -> None:
        """Walk everywhere the target interpreter loads CUDA binaries from (site-packages, editable installs,
        PYTHONPATH, .pth folders, torch's JIT extension cache, LD_LIBRARY_PATH, LD_PRELOAD), read the archs of
        every module inside each binary, and name those that cannot run on this GPU with their owner and the
        rebuild: the "no kernel image" culprit before it crashes. Exit 0: all run, 1: some cannot, 2: bad input
        or nothing to judge against."""
        from cudadoctor.cli import check_python_option, fail_usage
        from cudadoctor.compat import cc_str, parse_cc
        from cudadoctor.probes.scan import CANNOT_RUN, MAX_FILES, arch_list_verdict, judge, scan_dirs, scan_python
        from cudadoctor.system.host import HostSystem

        system = HostSystem()
        target, driver_cuda, note = None, "", ""
        if cc is not None:
            target = parse_cc(cc)
            if target is None:
                raise fail_usage(f"--cc {cc!r} is not a compute capability (e.g. 9.0, 8.6, 12.0)")
        check_python_option(python)
        if path is not None and not os.path.isdir(path):
            raise fail_usage(f"--path {path}: not a folder")
        if target is None:
            from cudadoctor.facts.local_gpu import local_gpu

            g = local_gpu(system)
            target, driver_cuda = g.cc, g.driver_cuda
            note = g.name if g.cc else g.error
        if path is not None:
            info = scan_dirs(system, [os.path.abspath(path)], max_files=max_files or MAX_FILES, cc=target)
        else:
            info, err = scan_python(system, python or system.own_python(), cc=target, max_files=max_files)
            if err:
                typer.echo(f"cudadoctor: {err}", err=True)
                raise typer.Exit(2)
        judged = judge(info, target, driver_cuda or None) if target else []
        bad = [j for j in judged if j.verdict in CANNOT_RUN]
        arch_list = system.env.get("TORCH_CUDA_ARCH_LIST", "")
        al = arch_list_verdict(arch_list, target) if (arch_list and target) else None
        if json_out:
            files = []
            verdicts = {id(j.file): j for j in judged}
            for f in info.files:
                files.append(file_json(f, verdicts.get(id(f))))
            typer.echo(json.dumps({
                "python": info.python, "site_packages": info.site_packages, "cc": cc_str(target) if target else None,
                "note": note or None, "driver_cuda": driver_cuda or None, "candidates": info.candidates,
                "seconds": info.seconds, "truncated": info.truncated,
                "roots": [{"path": r.path, "origin": r.origin, "via": r.via, "files": r.files, "cut": r.cut or None,
                           "symlink_loops": r.loops} for r in info.roots],
                "skipped": info.skipped,
                "cannot_run": [j.file.path for j in bad], "files": files,
                "torch_cuda_arch_list": ({"value": arch_list, "verdict": al.verdict if al else None}
                                         if arch_list else None)}, indent=2))
        else:
            where = info.python or path
            origins = sorted({r.origin for r in info.roots})
            typer.echo(f"scanned {where}: {info.candidates} shared objects/cubins/fatbins in "
                       f"{len(info.roots)} folder(s) ({', '.join(origins)}), {len(info.files)} with CUDA code, "
                       f"{info.seconds:.1f} s")
            for r in info.roots:
                if r.cut:
                    typer.echo(f"  cut: {r.path} ({r.origin}): {r.cut}")
            if target:
                typer.echo(f"judged for compute capability {cc_str(target)}" + (f" ({note})" if note else ""))
            else:
                typer.echo(f"no compute capability to judge against ({note}); pass --cc X.Y")
            for j in judged:
                if j.verdict in CANNOT_RUN or show_all or j.verdict == "unreadable":
                    f = j.file
                    typer.echo(f"  {j.verdict:<17} {f.path}")
                    if not f.error:
                        owner = (f" · {f.dist} {f.version}".rstrip() + (f" ({f.install})" if f.install else "")
                                 if f.dist else "")
                        typer.echo(f"  {'':<17} from {f.origin}{owner} · SASS {', '.join(f.sass) or '-'} · "
                                   f"PTX {', '.join(f.ptx) or '-'}")
                        if target and (j.verdict in CANNOT_RUN or j.verdict == "ptx-jit"):
                            typer.echo(f"  {'':<17} {j.reason}")
                            typer.echo(f"  {'':<17} fix: {fix_command(f, target, info.python or python, system.env)}")
            if not target and show_all:
                for f in info.files:
                    typer.echo(f"  {f.path}: SASS {', '.join(f.sass) or '-'}; PTX {', '.join(f.ptx) or '-'}")
            if target:
                typer.echo(f"{len(bad)} cannot run on this GPU" if bad else "all can run on this GPU")
            if al is not None and al.verdict not in ("native", "ptx-jit"):
                typer.echo(f"warning: TORCH_CUDA_ARCH_LIST={arch_list} builds extensions this GPU cannot run "
                           f"({al.reason}); use TORCH_CUDA_ARCH_LIST=\"{target[0]}.{target[1]}\"")
        raise typer.Exit(1 if bad else (0 if target else 2))


def file_json(f, j) -> dict:
    """One binary of `scan --json`: where it came from, who owns it, its archs and modules, the verdict."""
    mods = {v.module.index: v for v in (j.modules if j else ())}
    return {
        "path": f.path, "origin": f.origin, "root": f.root, "via": f.via or None,
        "distribution": f.dist or None, "version": f.version or None, "install": f.install or None,
        "source": f.source or None, "project": f.project or None, "package": f.package, "format": f.format,
        "archs": {"sass": f.sass, "ptx": f.ptx}, "sass": f.sass, "ptx": f.ptx, "ptx_isa": f.ptx_isa,
        "relocatable": {"sass": sorted({a for m in f.relocatable for a in m.sass}),
                        "ptx": sorted({a for m in f.relocatable for a in m.ptx})} if f.relocatable else None,
        "modules": [{"index": m.index, "sass": m.sass, "ptx": m.ptx, "kernels": m.kernels,
                     "verdict": mods[m.index].verdict if m.index in mods else None} for m in f.modules],
        "error": f.error or None, "verdict": j.verdict if j else None, "reason": j.reason if j else "",
        "module": j.worst.module.name() if j and j.worst is not None else None,
    }


def fix_command(f, cc: tuple, python: Optional[str], env=None) -> str:
    """The first command of the probe.scan finding's fix for this binary (the same words as `check`).
    `env`: the environment the scan ran in, so that a fix for LD_LIBRARY_PATH or LD_PRELOAD keeps their
    other entries (an `unset LD_LIBRARY_PATH` would also drop the driver's folder)."""
    from cudadoctor.checks.probe_scan import rebuild_fix

    env_vars = {k: env[k] for k in ("LD_LIBRARY_PATH", "LD_PRELOAD") if env and env.get(k) is not None}
    fix = rebuild_fix(f, cc, python or "python", "", env_vars)
    return fix.commands[0] if fix.commands else fix.text
