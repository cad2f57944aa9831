"""`cudadoctor probe`: build the probe kernels per architecture, launch them, compare with the rule."""

from __future__ import annotations

import json
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe(
        cc: Optional[str] = typer.Option(None, "--cc", metavar="X.Y",
                                         help="Build for this compute capability (default: the GPU's)."),
        no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild instead of using cached builds."),
        json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
        quick: bool = typer.Option(False, "--quick", help="Only the native and one foreign build; no GEMM/attention."),
        compiler: str = typer.Option("auto", "--compiler", metavar="auto|nvcc|nvrtc",
                                     help="Which compiler builds the probes (auto: nvcc, else NVRTC)."),
        python: Optional[str] = typer.Option(None, "--python", metavar="PATH",
                                             help="Interpreter whose site-packages may hold libnvrtc (NVRTC builds)."),
    ) -> None:
        """Prove the compatibility rule on this GPU: native SASS, PTX for an older arch (JIT), SASS for an arch
        this GPU cannot run ("no kernel image"), PTX for a newer arch, and the arch-specific sm_XYa build; launched
        through the CUDA driver API (no torch needed) and the runtime API. Also times naive/tiled GEMM and fused
        attention against CPU references. Exit 0: reality matched the rule, 1: a mismatch or a kernel failed,
        2: nothing could be built or launched."""
        from cudadoctor.cli import fail_usage
        from cudadoctor.compat import parse_cc
        from cudadoctor.probes.run import run_probes
        from cudadoctor.system.host import HostSystem

        target = None
        if cc is not None:
            target = parse_cc(cc)
            if target is None:
                raise fail_usage(f"--cc {cc!r} is not a compute capability (e.g. 9.0, 8.6, 12.0)")
            from cudadoctor.matrix import load

            if load().arch_for_cc(target) is None:
                raise fail_usage(f"--cc {cc}: no NVIDIA GPU has this compute capability "
                                 "(`cudadoctor matrix arch` lists the known ones)")
        if compiler not in ("auto", "nvcc", "nvrtc"):
            raise fail_usage(f"--compiler {compiler!r}: use auto, nvcc or nvrtc")
        system = HostSystem()
        sp: list = []
        if compiler in ("auto", "nvrtc"):
            from cudadoctor.probes.scan import site_packages

            _, sp, _ = site_packages(system, python or system.own_python())
        res = run_probes(system, target, use_cache=not no_cache, quick=quick, kernels=not quick,
                         runtime=not quick, compiler_pref=compiler, site_packages=sp)
        failed_kernels = [k for k in res.kernels if not k.get("ok")]
        ran_any = any(r.driver_api for r in res.rows)
        built_any = any(not r.build_error for r in res.rows)
        build_only = res.launch_kind in ("no-libcuda", "not-asked")  # no driver here: --cc only builds
        if res.cc is None or res.compiler_error or not res.rows or not built_any:
            code = 2
        elif res.mismatches or failed_kernels or (ran_any and res.launch_error):
            code = 1
        else:
            # a driver is there but nothing could be launched (cuInit failed, the child hung): 2
            code = 0 if ran_any or build_only else 2
        if json_out:
            d = res.to_dict()
            d["exit_code"] = code
            typer.echo(json.dumps(d, indent=2))
        else:
            typer.echo(render(res))
        if res.cc is None and not json_out:
            typer.echo(f"cudadoctor: no GPU to probe ({res.launch_error}); pass --cc X.Y to only build", err=True)
        elif res.compiler_error and not json_out:
            typer.echo(f"cudadoctor: cannot build the probes: {res.compiler_error}", err=True)
        raise typer.Exit(code)


def render(res) -> str:
    from cudadoctor.compat import cc_str

    lines = []
    dev = res.device
    if dev:
        lines.append(f"GPU: {dev.get('name')} (cc {dev.get('cc')}), driver CUDA {dev.get('driver_cuda')}")
    if res.nvcc_failure:
        first = res.nvcc_failure.strip().splitlines()[0] if res.nvcc_failure.strip() else ""
        lines.append(f"{res.nvcc_failure_path} cannot build (a toolkit problem, not the GPU's): {first}")
    if res.cc:
        lines.append(f"builds for cc {cc_str(res.cc)} ({res.cc_source}) with {res.compiler or 'no compiler'}")
    if res.launch_error:
        lines.append(f"not launched: {res.launch_error}")
    if res.rows:
        head = ("build", "images", "predicted", "driver API", "runtime API", "match")
        rows = []
        for r in res.rows:
            images = " ".join(r.sass + r.ptx) or "-"
            m = r.match
            rows.append((r.name, images, r.predicted or ("build failed" if r.build_error else "-"),
                         _obs(r.driver_api, r.cuda_arch), r.runtime_api or "-",
                         "yes" if m else ("NO" if m is False else "-")))
        widths = [max(len(str(x[i])) for x in [head] + rows) for i in range(len(head))]
        lines.append("")
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for row in rows:
            lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        for r in res.rows:
            for what, err in (("build", r.build_error), ("driver API", r.driver_error),
                              ("runtime API", r.runtime_error)):
                if err and (what == "build" or r.match is False or not r.predicted):
                    lines.append(f"  {r.name} {what}: {err.splitlines()[0] if err else ''}")
    if res.kernels:
        lines.append("")
        for k in res.kernels:
            if "ms" in k:
                lines.append(f"{k['name']:<16} {k.get('size', ''):<28} {k['ms']:>9.3f} ms {k['gflops']:>9.1f} GFLOP/s  "
                             f"max rel err {k['max_rel_err']:.2e} (bound {k['bound']:.0e}) "
                             f"{'ok' if k['ok'] else 'WRONG'}")
            else:
                e = k.get("error") or {}
                lines.append(f"{k['name']:<16} failed: {e.get('name', '')} {e.get('message', '')}")
    return "\n".join(lines)


def _obs(v: str, arch) -> str:
    if not v:
        return "-"
    return f"{v} (arch {arch})" if arch else v
