"""Matrix check: is the version matrix older than what this machine has? Said once, here."""

from __future__ import annotations

from cudadoctor.checks.common import driver_view
from cudadoctor.checks.matrix_driver import DRIVER_FACTS, _gpu_ccs, _typed
from cudadoctor.checks.registry import Context, Outcome, step
from cudadoctor.facts.types import NvccInstall, ToolkitInfo, TorchInfo
from cudadoctor.matrix.freshness import newer_than_data
from cudadoctor.matrix.versions import cudnn_from_int
from cudadoctor.model import Finding, Fix, Status


def _installed(ctx, dv) -> dict:
    t = _typed(ctx.fact("torch"), TorchInfo)
    tk = _typed(ctx.fact("toolkit"), ToolkitInfo)
    tv = t.value if t.ok and t.value.installed else None
    nvccs = [i.version for i in (tk.value.installs if tk.value else []) if isinstance(i, NvccInstall) and i.version]
    return {"torch": tv.version if tv else "", "torch_cuda": (tv.cuda or "") if tv else "",
            "driver": dv.version, "driver_cuda": dv.cuda, "nvccs": nvccs,
            "cudnn": (cudnn_from_int(tv.cudnn_version) or "") if tv else "", "ccs": _gpu_ccs(dv, ctx)}


def _marked(ctx, judged: list):
    """step id -> the rows it judged from, over the affected steps that ran before this one; None when
    none of them ran (`--only matrix.freshness`): then they may have needed the data."""
    affected = {s for i in judged for s in i["affects"]}
    ran = [r for sid, r in ctx.results.items() if sid in affected]
    if not ran:
        return None
    out: dict = {}
    for r in ran:
        for x in r.findings:
            row = (x.evidence or {}).get("matrix_row") if isinstance(x.evidence, dict) else None
            used = row.get("judged_from") if isinstance(row, dict) and row.get("unverified") else None
            if used is None and x.id.endswith(".unknown"):  # no row at all: not judged
                used = "no row (not judged)"
            if used is not None and used not in out.setdefault(r.id, []):
                out[r.id].append(used)
    return {k: v for k, v in out.items() if v}


def _line(i: dict) -> str:
    return f"{i['what']} {i['have']} (data: {i['data_stops_at']})"


@step("matrix.freshness", "version matrix vs this machine", 86, facts=DRIVER_FACTS + ("torch", "toolkit"))
def check_freshness(ctx: Context) -> Outcome:
    """Is anything here (torch, its CUDA, the driver, an nvcc, cuDNN, a GPU) newer than the version data?"""
    m = ctx.matrix
    dv = driver_view(ctx)
    have = _installed(ctx, dv)
    stops = m.data_stops_at()
    items = newer_than_data(m, **have)
    checked = stops["checked"] or "an unknown date"
    ev = {"data_stops_at": stops, "installed": {k: v for k, v in have.items() if k != "ccs" and v},
          "newer_than_data": items}
    judged = [i for i in items if i["affects"]]
    marked = _marked(ctx, judged)
    if not any(have.values()):
        f = Finding("matrix.freshness.nothing-to-compare", Status.SKIP,
                    "no torch, driver, nvcc or GPU found to compare with the version data", evidence=ev)
    elif judged and marked != {}:
        first = judged[0]
        more = f" and {len(judged) - 1} more" if len(judged) > 1 else ""
        which = ("; ".join(f"{sid} judged from {', '.join(rows)}" for sid, rows in sorted(marked.items()))
                 if marked else f"the steps {', '.join(sorted({s for i in judged for s in i['affects']}))} "
                                f"judge from the nearest row where they need it")
        f = Finding(
            "matrix.freshness.older-than-installed", Status.WARN,
            f"the version matrix is older than {first['what']} {first['have']} installed here{more}; "
            f"verdicts that need it are marked 'unverified'",
            detail=(f"cudadoctor's version data stops at torch {stops['torch']}, CUDA {stops['cuda']}, driver "
                    f"{stops['driver_branch']}, cuDNN {stops['cudnn']} (checked against the package index on "
                    f"{checked}). Newer here: {'; '.join(_line(i) for i in judged)}. Unverified: {which}."),
            fix=Fix(f"Update cudadoctor for data that covers {first['what']} {first['have']}; until then, check "
                    f"the verdicts marked 'unverified' against {first['docs']}",
                    ("pip install --upgrade cudadoctor", "cudadoctor check --only matrix"), first["docs"]),
            evidence=dict(ev, unverified_steps=marked))
    elif items:
        i = items[0]
        why = ("no matrix step needed a row the data lacks" if judged else
               "drivers are backward compatible, and the checks read its CUDA version from the driver itself")
        f = Finding("matrix.freshness.newer-not-needed", Status.OK,
                    f"{i['what']} {i['have']} is newer than the data ({i['data_stops_at']}); no verdict here depends on it",
                    detail=f"The version data stops at {i['data_stops_at']}, but {why}.", evidence=ev)
    else:
        f = Finding("matrix.freshness.ok", Status.OK,
                    f"the version matrix covers this machine (data to torch {stops['torch']}, CUDA {stops['cuda']}, "
                    f"{stops['driver_branch']}; checked {checked})", evidence=ev)
    return Outcome(f.summary, [f])
