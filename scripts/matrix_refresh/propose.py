"""Compare what the indexes know with matrix/*.toml and propose the rows the tables lack.

New rows are appended to the end of each table (reviewable as a plain diff); what an index cannot
say (a new toolkit's minimum driver when NVIDIA's driver redist is silent, a new driver branch, new
GPU targets) is left for the maintainer as a "to do" line, and a proposed row that still needs a
number keeps an empty value, which `validate` (tests/test_matrix_data.py) then refuses.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Optional

from packaging.version import Version

from cudadoctor.matrix.versions import major_minor, mm_text, parse_version
from matrix_refresh.index import cu_tag, linux_x86_wheel, pins, variant_wheel
from matrix_refresh.wheel import arch_list, extra_targets


@dataclass
class Snapshot:
    """Everything the indexes said in one refresh."""

    checked: str  # YYYY-MM-DD
    pypi: dict  # name -> Package
    torch_index: dict = field(default_factory=dict)  # cu -> [wheel] or {"error": text}
    wheels: dict = field(default_factory=dict)  # wheel filename -> {sass_counts, ptx_counts, requires_dist} | {error}
    crt: dict = field(default_factory=dict)  # CUDA major.minor -> limits | {"error": text}
    drivers: list = field(default_factory=list)  # [(driver version, YYYY-MM-DD)] from NVIDIA's driver redist
    notes: list = field(default_factory=list)  # what could not be asked, and why


@dataclass
class Proposal:
    rows: dict = field(default_factory=dict)  # table -> [(row kind, row dict, comment lines)]
    todo: list = field(default_factory=list)
    index: dict = field(default_factory=dict)  # the new matrix/index.toml content

    def add(self, table: str, kind: str, row: dict, comments=()) -> None:
        self.rows.setdefault(table, []).append((kind, row, list(comments)))


def _mm(v: str) -> tuple:
    return major_minor(v) or (0, 0)


def _gt(a: str, b: str) -> bool:
    return _mm(a) > _mm(b)


# ---------------------------------------------------------------- torch


def new_torch_minors(m, pypi) -> dict:
    """'2.15' -> [Release, ...] for torch releases on PyPI newer than the data (final versions)."""
    out: dict = {}
    for r in pypi.get("torch").releases if pypi.get("torch") else []:
        if _gt(r.version, m.torch_data_stops_at):
            out.setdefault(mm_text(_mm(r.version)), []).append(r)
    return out


def candidate_cus(m, pypi) -> list:
    """cu tags worth asking the PyTorch index about: the last release's, and one per CUDA minor of the
    CUDA major it uses, up to the newest cuda-toolkit on PyPI."""
    cus = {v["cu"] for v in m.torch_variants(m.torch_data_stops_at)}
    tk = pypi.get("cuda-toolkit")
    newest = _mm(tk.newest().version) if tk and tk.newest() else _mm(m.cuda_data_stops_at)
    for v in m.torch_variants(m.torch_data_stops_at):
        major, minor = _mm(v["cuda"])
        for x in range(minor, (newest[1] if newest[0] == major else minor) + 1):
            cus.add(f"cu{major}{x}")
    return sorted(cus, key=lambda c: (int(c[2:-1]), int(c[-1])))


def _variant_row(cu: str, cuda: str, read: Optional[dict], pin: dict, role: str, source: list) -> tuple:
    comments = []
    archs = ptx = []
    if read and not read.get("error"):
        archs, ptx = arch_list(read.get("sass_counts") or {}), arch_list(read.get("ptx_counts") or {})
    else:
        comments.append(f"# to do: archs not read ({(read or {}).get('error') or 'no wheel read'}); "
                        "take them from the wheel or RELEASE.md")
    known = bool(archs) and bool(pin.get("cudnn"))
    row = {"cu": cu, "cuda": cuda, "role": role, "archs": archs, "ptx": ptx, "cudnn": pin.get("cudnn", "")}
    if pin.get("nccl"):
        row["nccl"] = pin["nccl"]
    row.update(source=source + (["WHEEL"] if archs else []), confidence="verified" if known else "inferred")
    if read and not read.get("error"):
        extra = extra_targets(read.get("sass_counts") or {})
        row["note"] = (f"read from {read.get('filename', 'its wheel')}: arch list {';'.join(archs)}"
                       f"{' +PTX ' + ';'.join(ptx) if ptx else ''}"
                       f"{'; also ' + ', '.join(extra) + ' for a few kernels' if extra else ''}")
    comments.append("# role: stable, experimental or legacy (RELEASE.md)")
    return row, comments


def propose_torch(m, snap: Snapshot, out: Proposal) -> None:
    prev = {v["cu"]: v["role"] for v in m.torch_variants(m.torch_data_stops_at)}
    for rel_mm, rels in sorted(new_torch_minors(m, snap.pypi).items(), key=lambda kv: _mm(kv[0])):
        newest = rels[-1]
        pypi_pin = pins(snap.pypi["torch"].requires_dist) if snap.pypi["torch"].latest == newest.version else {}
        default = cu_tag(pypi_pin["cuda"]) if pypi_pin.get("cuda") else ""
        row = {"torch": rel_mm, "pypi_default": default, "pypi_confidence": "verified" if default else "inferred",
               "note": f"{rels[0].version} on PyPI {rels[0].date}"
                       f"{f', {newest.version} {newest.date}' if newest is not rels[0] else ''}; refreshed {snap.checked}"}
        variants = []
        if default:
            w = linux_x86_wheel(newest.files)
            read = dict(snap.wheels.get(w["filename"], {"error": "not read"}), filename=w["filename"]) if w else None
            variants.append(_variant_row(default, pypi_pin["cuda"], read, pypi_pin, prev.get(default, "stable"),
                                         ["PYPI"]))
        for cu, wheels in sorted(snap.torch_index.items()):
            if cu == default or not isinstance(wheels, list):
                continue
            w = variant_wheel(wheels, rel_mm, cu)
            if not w:
                continue
            read = dict(snap.wheels.get(w["filename"], {"error": "not read"}), filename=w["filename"])
            pin = pins(read.get("requires_dist"))
            cuda = f"{cu[2:-1]}.{cu[-1]}"
            variants.append(_variant_row(cu, cuda, read, pin, prev.get(cu, "experimental"), ["TORCHINDEX"]))
        variants.sort(key=lambda rc: parse_version(rc[0]["cuda"]))
        out.add("torch", "release", row, [f"# proposed by scripts/refresh_matrix.py on {snap.checked}"])
        for v, comments in variants:
            out.add("torch", "release.variant", v, comments)
        if not variants:
            out.todo.append(f"torch {rel_mm}: no variant could be read (PyPI pins and the PyTorch index both silent)")
        elif not any(isinstance(w, list) for w in snap.torch_index.values()):
            out.todo.append(f"torch {rel_mm}: only PyPI's variant ({default}) is proposed; list the others from "
                            f"https://download.pytorch.org/whl/<cu>/torch/ (rerun where that index answers)")


# ---------------------------------------------------------------- CUDA toolkits and drivers


def new_toolkit_versions(m, pypi) -> list:
    tk = pypi.get("cuda-toolkit")
    known = [parse_version(x) for r in m.toolkits for x in r["versions"]]
    top = max(known) if known else Version("0")
    return [r for r in (tk.releases if tk else []) if Version(r.version) > top]


def _release_label(m, version: str, new: list) -> str:
    """GA for the first final release of a minor, then Update 1, 2... (13.4.1 is 13.4 GA)."""
    mm = _mm(version)
    seen = sorted({parse_version(x) for r in m.toolkits if _mm(r["cuda"]) == mm for x in r["versions"]}
                  | {Version(r.version) for r in new if _mm(r.version) == mm})
    i = seen.index(Version(version))
    return "GA" if i == 0 else f"Update {i}"


def propose_toolkits(m, snap: Snapshot, out: Proposal) -> None:
    new = new_toolkit_versions(m, snap.pypi)
    for r in new:
        day = [d for d, when in snap.drivers if when == r.date]
        comments = [f"# proposed by scripts/refresh_matrix.py on {snap.checked}: cuda-toolkit {r.version} on PyPI {r.date}"]
        row = {"cuda": mm_text(_mm(r.version)), "release": _release_label(m, r.version, new), "versions": [r.version],
               "linux": day[0] if len(day) == 1 else "", "windows": ""}
        if len(day) == 1:
            row.update(source=["PYPI", "NVREDIST"], confidence="verified-secondary",
                       note=f"{day[0]} is the driver NVIDIA released the same day ({r.date}); check the release notes")
        else:
            row.update(source=["PYPI"], confidence="inferred")
            comments.append("# to do: linux = the minimum driver (release notes, or NVIDIA's driver redist of that day)")
            out.todo.append(f"CUDA {r.version}: its minimum Linux driver ({'several drivers' if day else 'no driver'} "
                            f"released on {r.date} in NVIDIA's driver redist)")
        out.add("drivers", "toolkit", row, comments)
    for mm in sorted({_mm(r.version) for r in new}):
        if mm > _mm(m.branches[-1]["cuda"]):
            out.todo.append(f"CUDA {mm_text(mm)}: the driver branch whose nvidia-smi says 'CUDA Version: {mm_text(mm)}' "
                            f"(drivers.toml [[branch]]), and `nvcc --list-gpu-arch` of {mm_text(mm)} for new targets "
                            f"(archs.toml)")


def propose_compilers(m, snap: Snapshot, out: Proposal) -> None:
    new_mm = sorted({_mm(r.version) for r in new_toolkit_versions(m, snap.pypi)} | {_mm(k) for k in snap.crt})
    new_mm = [mm for mm in new_mm if mm > _mm(m.compilers_data_stops_at)]
    last = max(m.compilers, key=lambda r: _mm(r["cuda_last"])) if m.compilers else {}
    groups: list = []  # [(first, last, limits)]
    for mm in new_mm:
        lim = snap.crt.get(mm_text(mm)) or {"error": "not read"}
        if lim.get("error"):
            out.todo.append(f"CUDA {mm_text(mm)}: host compilers ({lim['error']}); read include/crt/host_config.h")
            continue
        key = {k: lim.get(k) for k in ("gcc_max", "clang_max", "msvc")}
        if groups and groups[-1][2] == key and groups[-1][1] == (mm[0], mm[1] - 1):
            groups[-1] = (groups[-1][0], mm, key)
        else:
            groups.append((mm, mm, key))
    for first, lastmm, key in groups:
        row = {"cuda_first": mm_text(first), "cuda_last": mm_text(lastmm), "gcc_min": last.get("gcc_min", 6)}
        row.update({k: v for k, v in key.items() if v is not None})
        row.update(source=["NVCRT"], confidence="verified",
                   note=f"include/crt/host_config.h of nvidia-cuda-crt {', '.join(snap.crt[mm_text(x)].get('version', '?') for x in _span(first, lastmm))} read directly")
        out.add("compilers", "toolkit", row, [f"# proposed by scripts/refresh_matrix.py on {snap.checked}"])


def _span(a: tuple, b: tuple) -> list:
    return [(a[0], x) for x in range(a[1], b[1] + 1)]


# ---------------------------------------------------------------- cuDNN


def propose_cudnn(m, snap: Snapshot, out: Proposal) -> None:
    news = [(n, snap.pypi[n].newest()) for n in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
            if snap.pypi.get(n) and snap.pypi[n].newest()]
    newer = [(n, r) for n, r in news if _gt(r.version, m.cudnn_data_stops_at)]
    if not newer:
        return
    stops = _mm(m.cudnn_data_stops_at)
    top = max((_mm(r.version) for _, r in newer))
    first = (stops[0], stops[1] + 1) if top[0] == stops[0] else (top[0], 0)
    last = max(m.cudnn, key=lambda r: _mm(r["last"]))
    row = {"first": mm_text(first), "last": mm_text(top), "cuda": list(last["cuda"]),
           "min_driver_linux": dict(last.get("min_driver_linux") or {}), "cc_min": last["cc_min"], "cc_max": last["cc_max"],
           "source": ["PYPI"], "confidence": "inferred",
           "note": "; ".join(f"{n} {r.version} on PyPI {r.date}" for n, r in newer)
                   + f"; CUDA and GPU ranges copied from the {last['first']}-{last['last']} row: check the support matrix"}
    out.add("cudnn", "cudnn", row, [f"# proposed by scripts/refresh_matrix.py on {snap.checked}",
                                    "# to do: cuda, min_driver_linux, cc_min/cc_max from the cuDNN support matrix"])
    out.todo.append(f"cuDNN {mm_text(first)}-{mm_text(top)}: CUDA and GPU ranges from the support matrix")


# ---------------------------------------------------------------- index.toml


def index_snapshot(snap: Snapshot) -> dict:
    newest = {}
    for name, p in sorted(snap.pypi.items()):
        r = p.newest()
        if r and not p.error:
            newest[name] = {"version": r.version, "date": r.date}
    return {"checked": snap.checked, "source": "https://pypi.org/pypi/<name>/json", "newest": newest}


# the sources a refresh cites, for tables that do not have them yet
SOURCES = {
    "PYPI": ("The PyPI JSON API (https://pypi.org/pypi/<name>/json): versions, upload dates and the torch wheel's "
             "Requires-Dist pins, read by scripts/refresh_matrix.py", "https://pypi.org/pypi/torch/json"),
    "WHEEL": ("The arch list read from a torch wheel's torch/lib/libtorch_cuda.so by cudadoctor's fatbin reader "
              "(scripts/refresh_matrix.py)", "https://pypi.org/project/torch/"),
    "TORCHINDEX": ("The PyTorch wheel index, download.pytorch.org/whl/<cu>/torch/ (PEP 503 pages), read by "
                   "scripts/refresh_matrix.py", "https://download.pytorch.org/whl/"),
    "NVCRT": ("include/crt/host_config.h inside NVIDIA's nvidia-cuda-crt wheels, read directly",
              "https://pypi.org/project/nvidia-cuda-crt/"),
    "NVREDIST": ("NVIDIA's driver redist manifests (release dates)",
                 "https://developer.download.nvidia.com/compute/nvidia-driver/redist/"),
}


def propose_sources(m, out: Proposal) -> None:
    used = {k for rows in out.rows.values() for _, row, _ in rows for k in row.get("source", [])}
    for key in sorted(used - set(m.sources)):
        title, url = SOURCES[key]
        out.add("sources", f"table:{key}", {"title": title, "url": url})


def propose(m, snap: Snapshot) -> Proposal:
    out = Proposal()
    propose_torch(m, snap, out)
    propose_toolkits(m, snap, out)
    propose_compilers(m, snap, out)
    propose_cudnn(m, snap, out)
    propose_sources(m, out)
    out.index = index_snapshot(snap)
    return out


# ---------------------------------------------------------------- TOML text and the diff

# Rows are written by hand rather than with a TOML writer: the tables are hand-kept files with
# comments, so new rows are appended in the files' own style (one key per line, inline tables for
# maps) and the rest of each file is left byte for byte.

_BARE = re.compile(r"^[A-Za-z_-][A-Za-z0-9_-]*$")  # digit-only keys are quoted, as the tables write them


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def toml_key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def render_row(kind: str, row: dict, comments=()) -> str:
    head = f"[{kind[6:]}]" if kind.startswith("table:") else f"[[{kind}]]"
    lines = list(comments) + [head] + [f"{toml_key(k)} = {toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


def render_index(d: dict) -> str:
    head = ("# What the package index knew when the matrix was last refreshed: scripts/refresh_matrix.py\n"
            "# rewrites this file (README, \"Keeping the version matrix current\"). The matrix.freshness step\n"
            "# names the date when this machine has something newer than the data.\n")
    body = f"checked = {toml_value(d['checked'])}\nsource = {toml_value(d['source'])}\n\n"
    body += "# package -> its newest final release on PyPI, and when it was uploaded\n[newest]\n"
    body += "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in d["newest"].items())
    return head + body


def new_texts(old: dict, p: Proposal) -> dict:
    """table -> proposed file text (old text + appended rows; index.toml rewritten)."""
    out = {}
    for table, rows in p.rows.items():
        text = old[table].rstrip("\n") + "\n"
        for kind, row, comments in rows:
            text += "\n" + render_row(kind, row, comments)
        out[table] = text
    if p.index:
        out["index"] = render_index(p.index)
    return out


def diff(old: dict, new: dict) -> str:
    chunks = []
    for table in sorted(new):
        a, b = old.get(table, ""), new[table]
        if a == b:
            continue
        chunks.extend(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                           fromfile=f"matrix/{table}.toml", tofile=f"matrix/{table}.toml (proposed)"))
    return "".join(chunks)
