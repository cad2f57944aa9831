"""Schema and internal-consistency checks of the matrix tables (used by the tests and by CI)."""

from __future__ import annotations

import re

from cudadoctor.matrix.versions import major_minor, parse_version, split_range

CONFIDENCE = ("verified", "verified-secondary", "inferred")


def _rows(tables: dict) -> list:
    """(table, label, row) for every sourced row."""
    out = []
    for a in tables["archs"].get("arch", []):
        out.append(("archs", f"cc {a.get('cc')}", a))
    d = tables["drivers"]
    for key in ("toolkit", "minor_compat", "branch"):
        for r in d.get(key, []):
            out.append(("drivers", f"{key} {r.get('cuda') or r.get('major') or r.get('branch')}", r))
    for rel in tables["torch"].get("release", []):
        for v in rel.get("variant", []):
            out.append(("torch", f"{rel.get('torch')} {v.get('cu')}", v))
    for r in tables["cudnn"].get("cudnn", []):
        out.append(("cudnn", f"{r.get('first')}-{r.get('last')}", r))
    for r in tables["compilers"].get("toolkit", []):
        out.append(("compilers", f"{r.get('cuda_first')}-{r.get('cuda_last')}", r))
    return out


def _disjoint(ranges: list, what: str, problems: list) -> None:
    ranges = sorted(ranges)
    for (lo1, hi1, n1), (lo2, hi2, n2) in zip(ranges, ranges[1:]):
        if lo2 <= hi1:
            problems.append(f"{what}: {n1} overlaps {n2}")
    for lo, hi, n in ranges:
        if lo > hi:
            problems.append(f"{what}: {n} is an empty range")


def validate(tables: dict) -> list:
    """Problems found (empty when the tables are sound)."""
    problems: list = []
    sources = tables["sources"]
    for table, label, row in _rows(tables):
        src = row.get("source")
        if not src or not isinstance(src, list):
            problems.append(f"{table} {label}: no source")
        else:
            problems += [f"{table} {label}: unknown source {s!r}" for s in src if s not in sources]
        if row.get("confidence") not in CONFIDENCE:
            problems.append(f"{table} {label}: confidence {row.get('confidence')!r} not in {CONFIDENCE}")
    for key, s in sources.items():
        if not s.get("title") or not s.get("url"):
            problems.append(f"sources {key}: needs title and url")

    def ver(table, label, text):
        if parse_version(text) is None:
            problems.append(f"{table} {label}: {text!r} does not parse as a version")
            return False
        return True

    # archs: unique cc, versions parse, first <= last, variants not before the base target
    seen = set()
    for a in tables["archs"].get("arch", []):
        cc = a.get("cc", "")
        if cc in seen:
            problems.append(f"archs: cc {cc} listed twice")
        seen.add(cc)
        ver("archs", cc, cc)
        if not a.get("architecture"):
            problems.append(f"archs cc {cc}: no architecture")
        if ver("archs", cc, a.get("nvcc_first")) and a.get("nvcc_last") and ver("archs", cc, a["nvcc_last"]):
            if major_minor(a["nvcc_first"]) > major_minor(a["nvcc_last"]):
                problems.append(f"archs cc {cc}: nvcc_first after nvcc_last")
        for v in a.get("variants", []):
            if v.get("suffix") not in ("a", "f") or not ver("archs", cc, v.get("nvcc_first")):
                problems.append(f"archs cc {cc}: bad variant {v}")
            elif major_minor(v["nvcc_first"]) < major_minor(a["nvcc_first"]):
                problems.append(f"archs cc {cc}: variant {v['suffix']} before the base target")
    # drivers: each full version once; the minimum driver never falls as CUDA rises
    d = tables["drivers"]
    allv = []
    for r in d.get("toolkit", []):
        lab = f"toolkit {r.get('cuda')} {r.get('release')}"
        for x in r.get("versions", []):
            if ver("drivers", lab, x):
                allv.append((parse_version(x), r))
                if major_minor(x) != major_minor(r["cuda"]):
                    problems.append(f"drivers {lab}: version {x} is not CUDA {r['cuda']}")
        ver("drivers", lab, r.get("linux"))
        if r.get("windows"):
            ver("drivers", lab, r["windows"])
    vs = [v for v, _ in allv]
    if len(vs) != len(set(vs)):
        problems.append("drivers: a toolkit version is listed in two rows")
    allv.sort(key=lambda p: p[0])
    for (v1, r1), (v2, r2) in zip(allv, allv[1:]):
        a, b = parse_version(r1["linux"]), parse_version(r2["linux"])
        if a is not None and b is not None and b < a:
            problems.append(f"drivers: CUDA {v2} needs an older Linux driver ({r2['linux']}) than CUDA {v1} ({r1['linux']})")
    br = sorted(d.get("branch", []), key=lambda b: b["branch"])
    if len({b["branch"] for b in br}) != len(br):
        problems.append("drivers: a branch is listed twice")
    for b1, b2 in zip(br, br[1:]):
        if not (ver("drivers", f"branch {b2['branch']}", b2["cuda"]) and major_minor(b2["cuda"]) > major_minor(b1["cuda"])):
            problems.append(f"drivers: branch R{b2['branch']} does not report a newer CUDA than R{b1['branch']}")
    for b in br:
        for s in b.get("seen", []):
            if ver("drivers", f"branch {b['branch']}", s) and not (b["branch"] <= parse_version(s).release[0] < b["branch"] + 5):
                problems.append(f"drivers: banner {s} does not belong to branch R{b['branch']}")
    mvc = sorted(d.get("minor_compat", []), key=lambda m: m["major"])
    _disjoint([(m["branch_min"], m.get("branch_max_exclusive", 10**6) - 1, f"major {m['major']}") for m in mvc],
              "drivers minor_compat", problems)
    for m in mvc:
        ver("drivers", f"minor_compat {m['major']}", m["linux"])
    # torch: releases unique, variants unique per release, archs are known ccs and sorted
    known = {a.get("cc") for a in tables["archs"].get("arch", [])}
    rels = tables["torch"].get("release", [])
    if len({r["torch"] for r in rels}) != len(rels):
        problems.append("torch: a release is listed twice")
    for rel in rels:
        ver("torch", rel["torch"], rel["torch"])
        cus = [v["cu"] for v in rel.get("variant", [])]
        if len(set(cus)) != len(cus):
            problems.append(f"torch {rel['torch']}: a variant is listed twice")
        if rel.get("pypi_default") and rel["pypi_default"] not in cus:
            problems.append(f"torch {rel['torch']}: PyPI default {rel['pypi_default']} is not one of its variants")
        for v in rel.get("variant", []):
            lab = f"{rel['torch']} {v['cu']}"
            mm = major_minor(v.get("cuda"))
            if mm is None or v["cu"] != f"cu{mm[0]}{mm[1]}":
                problems.append(f"torch {lab}: cu tag and cuda {v.get('cuda')} disagree")
            for a in v.get("archs", []) + v.get("ptx", []):
                if a not in known:
                    problems.append(f"torch {lab}: arch {a} is not in archs.toml")
            keys = [tuple(int(x) for x in a.split(".")) for a in v.get("archs", [])]
            if keys != sorted(keys):
                problems.append(f"torch {lab}: archs not in ascending order")
            if v.get("cudnn"):
                ver("torch", lab, v["cudnn"])
    # cudnn: version ranges disjoint; cuda ranges parse
    rows = tables["cudnn"].get("cudnn", [])
    rng = []
    for r in rows:
        lab = f"{r.get('first')}-{r.get('last')}"
        if ver("cudnn", lab, r.get("first")) and ver("cudnn", lab, r.get("last")):
            rng.append((major_minor(r["first"]), major_minor(r["last"]), lab))
        for c in r.get("cuda", []):
            try:
                lo, hi = split_range(c)
                if lo > hi:
                    problems.append(f"cudnn {lab}: empty CUDA range {c}")
            except ValueError as e:
                problems.append(f"cudnn {lab}: {e}")
        for c in (r.get("cc_min"), r.get("cc_max")):
            if c not in known:
                problems.append(f"cudnn {lab}: cc {c} is not in archs.toml")
        for k, v in (r.get("min_driver_linux") or {}).items():
            ver("cudnn", lab, v)
    _disjoint(rng, "cudnn", problems)
    # compilers: disjoint CUDA ranges; gcc_max never falls as CUDA rises
    comp = tables["compilers"].get("toolkit", [])
    rng = []
    for r in comp:
        lab = f"{r.get('cuda_first')}-{r.get('cuda_last')}"
        if ver("compilers", lab, r.get("cuda_first")) and ver("compilers", lab, r.get("cuda_last")):
            rng.append((major_minor(r["cuda_first"]), major_minor(r["cuda_last"]), lab))
        if not isinstance(r.get("gcc_max"), int):
            problems.append(f"compilers {lab}: gcc_max must be an integer")
    _disjoint(rng, "compilers", problems)
    ordered = sorted(comp, key=lambda r: major_minor(r["cuda_first"]) or (0, 0))
    for r1, r2 in zip(ordered, ordered[1:]):
        if isinstance(r1.get("gcc_max"), int) and isinstance(r2.get("gcc_max"), int) and r2["gcc_max"] < r1["gcc_max"]:
            problems.append(f"compilers: CUDA {r2['cuda_first']} accepts an older gcc than CUDA {r1['cuda_last']}")
    _validate_index(tables, problems)
    return problems


# package on the index -> (table, the newest version that table has, in major.minor)
_COVERS = {
    "torch": ("torch", lambda t: [r["torch"] for r in t["torch"].get("release", [])]),
    "cuda-toolkit": ("drivers", lambda t: [r["cuda"] for r in t["drivers"].get("toolkit", [])]),
    "nvidia-cudnn-cu12": ("cudnn", lambda t: [r["last"] for r in t["cudnn"].get("cudnn", [])]),
    "nvidia-cudnn-cu13": ("cudnn", lambda t: [r["last"] for r in t["cudnn"].get("cudnn", [])]),
}


def _validate_index(tables: dict, problems: list) -> None:
    """matrix/index.toml: what the index had when the data was refreshed. The tables must cover it:
    a torch, CUDA toolkit or cuDNN the index had on that day but the tables lack is a refresh left
    half done."""
    idx = tables.get("index") or {}
    if not idx:
        return
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(idx.get("checked", ""))):
        problems.append(f"index: checked {idx.get('checked')!r} is not a date (YYYY-MM-DD)")
    for name, e in (idx.get("newest") or {}).items():
        v = (e or {}).get("version") if isinstance(e, dict) else None
        if parse_version(v) is None:
            problems.append(f"index newest {name}: {v!r} does not parse as a version")
            continue
        if name in _COVERS and tables.get(_COVERS[name][0]):
            have = [major_minor(x) for x in _COVERS[name][1](tables) if major_minor(x)]
            if have and major_minor(v) > max(have):
                problems.append(f"index: the index had {name} {v} on {idx.get('checked')}, but the "
                                f"{_COVERS[name][0]} table stops at {'.'.join(map(str, max(have)))}")
