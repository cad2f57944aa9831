"""`cudadoctor archs FILE...`: the SASS and PTX architectures inside CUDA binaries, and a verdict."""

from __future__ import annotations

import json
import os
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("archs")
    def archs(
        files: List[str] = typer.Argument(..., metavar="FILE...", help="Executables, shared objects, .cubin, "
                                          ".fatbin or .ptx files."),
        cc: Optional[str] = typer.Option(None, "--cc", metavar="X.Y",
                                         help="Judge for this compute capability (default: the local GPU)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON: per file sass, ptx and verdict."),
    ) -> None:
        """List the GPU architectures inside CUDA binaries (pure Python, no cuobjdump) and say whether each runs
        on the GPU: native, ptx-jit or no-kernel-image, judged module by module (a kernel can only use the images
        of its own .cu file's module; the failing one is named by its kernels). Exit 0: all run, 1: a file
        cannot run, 2: bad input."""
        from cudadoctor.cli import fail_usage
        from cudadoctor.compat import NO_KERNELS, cc_str, parse_cc, verdict_runs
        from cudadoctor.probes import fatbin
        from cudadoctor.system.host import HostSystem

        system = HostSystem()
        target = None
        driver_cuda = ""
        cc_note = ""
        if cc is not None:
            target = parse_cc(cc)
            if target is None:
                raise fail_usage(f"--cc {cc!r} is not a compute capability (e.g. 9.0, 8.6, 12.0)")
        else:
            from cudadoctor.facts.local_gpu import local_gpu

            g = local_gpu(system)
            target, driver_cuda = g.cc, g.driver_cuda
            cc_note = f"{g.name}" if g.cc else f"{g.error}; pass --cc X.Y for a verdict"
        out, bad, cannot = [], [], []
        for path in files:
            try:
                b = fatbin.read_file(system, path)
            except fatbin.BinaryFormatError as e:
                bad.append(str(e))
                out.append({"path": path, "error": str(e), "sass": [], "ptx": [], "verdict": None})
                continue
            rec = {"path": path, "format": b.format, "sass": b.sass, "ptx": b.ptx, "lto": b.lto,
                   "ptx_isa": b.ptx_isa(), "sass_counts": b.counts("sass"), "ptx_counts": b.counts("ptx"),
                   "relocatable": b.relocatable or None, "modules": [],
                   "verdict": None, "image": "", "reason": "", "module": None}
            loader, reloc = b.judged_modules()
            if not (b.sass or b.ptx or reloc):
                rec["verdict"] = "no-cuda-code" if target else None
                rec["reason"] = "no SASS or PTX in this file"
            elif target:
                from cudadoctor.compat import judge_modules
                from cudadoctor.probes.scan import VENDOR, is_vendor_library, name_failing

                fv, named = name_failing(system, path, b, target, driver_cuda or None)
                if named:  # the failing modules named by their kernels: judge again (a module may prove empty)
                    loader, reloc = b.judged_modules()
                    fv = judge_modules(loader, reloc, target, driver_cuda or None)
                rec.update(verdict=fv.verdict, image=fv.image, reason=fv.reason,
                           module=fv.worst.module.name() if fv.worst is not None else None,
                           modules=[{"index": v.module.index, "sass": v.module.sass, "ptx": v.module.ptx,
                                     "kernels": v.module.kernels, "verdict": v.verdict} for v in fv.modules])
                if not verdict_runs(fv.verdict) and fv.verdict != NO_KERNELS and is_vendor_library(
                        os.path.abspath(path)):
                    # NVIDIA's libraries carry kernels outside their fatbin (cuFFT): no verdict from it
                    rec.update(verdict=VENDOR, reason=f"NVIDIA library: the embedded images are not its whole "
                                                      f"kernel set (rule alone: {fv.verdict})")
                elif not verdict_runs(fv.verdict) and fv.verdict != NO_KERNELS:
                    cannot.append(path)
            out.append(rec)
        code = 2 if bad else (1 if cannot else 0)
        if json_out:
            typer.echo(json.dumps({"cc": cc_str(target) if target else None,
                                   "cc_source": "--cc" if cc is not None else ("local GPU" if target else None),
                                   "driver_cuda": driver_cuda or None, "note": cc_note or None,
                                   "files": out}, indent=2))
        else:
            head = f"compute capability {cc_str(target)}" if target else "no compute capability"
            typer.echo(f"{head} ({'--cc' if cc is not None else cc_note})" if (cc is not None or cc_note) else head)
            for r in out:
                if r.get("error"):
                    continue
                typer.echo(f"{r['path']}  [{r['format']}]")
                typer.echo(f"  SASS: {_fmt(r['sass_counts']) or '-'}")
                typer.echo(f"  PTX:  {_fmt(r['ptx_counts'], r['ptx_isa']) or '-'}")
                if r["relocatable"]:
                    rel = r["relocatable"]
                    typer.echo(f"  -rdc linker inputs (not loaded as such): SASS {', '.join(rel['sass']) or '-'}; "
                               f"PTX {', '.join(rel['ptx']) or '-'}")
                if len(r["modules"]) > 1:
                    typer.echo("  modules: " + ", ".join(f"{m['index']}:{m['verdict']}" for m in r["modules"]))
                if r["verdict"]:
                    typer.echo(f"  verdict: {r['verdict']}" + (f" ({r['reason']})" if r["reason"] else ""))
        for msg in bad:
            typer.echo(f"cudadoctor: {msg}", err=True)
        raise typer.Exit(code)


def _fmt(counts: dict, isa: Optional[dict] = None) -> str:
    parts = []
    for arch, n in counts.items():
        s = arch + (f" x{n}" if n > 1 else "")
        if isa and isa.get(arch):
            s += f" (PTX ISA {isa[arch]})"
        parts.append(s)
    return ", ".join(parts)
