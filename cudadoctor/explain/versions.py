"""Versions read from a pasted report, compared: the root cause a dump shows without an error line.

`torch.utils.collect_env`, `nvidia-smi` and `deviceQuery` print the CUDA a program was built for
and the newest CUDA the driver runs, often with no error message at all ("is_available() is
False"). A signature may declare a gate (data: `gate = {needs = ..., has = ..., weight = ...}`) over
two values its capture-only patterns (weight 0) read; when the text shows `needs` newer than `has`
the signature is confirmed with the gate's weight.
"""

from __future__ import annotations

import re
from typing import Optional

from cudadoctor import compat

_NUM = re.compile(r"^(\d+)(?:\.(\d+))?")


def cuda_version(text: str) -> Optional[tuple]:
    """'12.4' -> (12, 4); a wheel tag's digits '124' or 'cu118' -> (12, 4) / (11, 8); None if unreadable."""
    t = text.strip().lower().removeprefix("cu")
    if t.isdigit() and len(t) in (2, 3):  # cu90, cu102, cu118: the last digit is the minor
        return int(t[:-1]), int(t[-1])
    m = _NUM.match(t)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


def pretty(text: str) -> str:
    """A CUDA version as people write it: 'cu121' -> '12.1', '12.4' stays; unreadable text unchanged."""
    v = cuda_version(text)
    return f"{v[0]}.{v[1]}" if v else text


def driver_too_old(needs: str, has: str) -> bool:
    """Is a driver whose newest CUDA is `has` too old for code built with CUDA `needs`? From CUDA 11
    on, a driver runs any minor release of its major one (minor version compatibility, no PTX JIT);
    before 11 the minor release had to be supported too."""
    n, h = cuda_version(needs), cuda_version(has)
    if n is None or h is None:
        return False
    if n[0] != h[0]:
        return n[0] > h[0]
    return n[0] < 11 and n[1] > h[1]


def differs(needs: str, has: str) -> bool:
    """Do two CUDA versions (torch's build, the nvcc release) differ at major.minor?"""
    n, h = cuda_version(needs), cuda_version(has)
    return n is not None and h is not None and n != h


def gpu_cc_text(text: str) -> str:
    """'sm_61' / '61' / '6.1' -> '6.1'; '' for a GPU name."""
    cc = compat.parse_cc(text)
    return compat.cc_str(cc) if cc else ""


def gpu_ccs(text: str) -> set:
    """Compute capabilities a report's GPU reading names: 'sm_61', '6.1', '61', or a GPU name ('GTX 1050', 'V100')
    looked up in the matrix's architecture table (every row whose example names it)."""
    cc = compat.parse_cc(text)
    if cc:
        return {cc}
    from cudadoctor import matrix
    from cudadoctor.matrix.gpu_names import match_examples

    name = re.sub(r"(\d)(ti|super)\b", r"\1 \2", text.strip().lower())  # "5070TI" as the table writes it, "5070 ti"
    name = re.sub(r"\b(gtx|rtx|gt|mx)(?=\d)", r"\1 ", name)  # (round 27) "RTX3090", "GTX1080": "rtx 3090", "gtx 1080"
    return {compat.parse_cc(r["cc"]) for r in match_examples(name, matrix.load().archs)}


_WHEEL = re.compile(r"^(?P<v>\d+\.\d+(?:\.\d+)?)(?:\+cu(?P<tag>\d{2,3})|.*?cuda\s*(?P<cuda>\d{1,2}\.\d))?", re.I)


def wheel_lacks_arch(gpu: str, torch: str) -> bool:
    """Does the torch wheel a report names carry no kernel and no PTX for the report's GPU ('sm_61', '6.1',
    'GTX 1050'), by the version matrix? The wheel: '2.8.0+cu128', or '2.9 with CUDA 12.8'; a bare '2.5.1' counts only
    when every wheel of that release lacks the GPU; a torch program with no release named (the reading is then its
    torch words, e.g. "import torch") when most wheels of the releases the matrix knows lack it: a GPU at either edge
    of torch's support (compute capability 3.7 and older, Blackwell's 10.x and 12.x), a prior rather than a proof, so
    the reading is void where the report names another binary with kernels of its own. False when the matrix does
    not know the release, the wheel or the GPU: the gate then proves nothing."""
    try:
        from cudadoctor import matrix

        w = _WHEEL.match(torch.strip())
        if not w:  # a torch program's own words, no release named (the `_fallback` reading): most wheels it knows
            lacking, total = wheels_lacking(gpu)  # (0, 0) for a GPU the matrix cannot place
            return 2 * lacking > total
        m, ccs = matrix.load(), gpu_ccs(gpu)
        if not ccs or m.torch_release(w["v"]) is None:
            return False
        cuda = pretty(w["tag"]) if w["tag"] else w["cuda"]
        variants = [m.variant_for(w["v"], cuda)] if cuda else m.torch_variants(w["v"])
        return bool(variants) and None not in variants and all(
            m.runs_on(v, cc) == compat.NO_IMAGE for v in variants for cc in ccs)
    except Exception:  # noqa: BLE001 - the matrix is optional to explain: no data, no confirmation
        return False


def wheels_lacking(gpu: str) -> tuple:
    """(how many, of how many) torch wheel variants in the version matrix have no kernel and no PTX for the GPU
    (every compute capability its name may mean); (0, 0) when the matrix or the GPU is unknown."""
    try:
        from cudadoctor import matrix

        m, ccs = matrix.load(), gpu_ccs(gpu)
        variants = [v for rel in m.torch_releases for v in m.torch_variants(rel["torch"])]
        if not ccs or not variants:
            return 0, 0
        return min(sum(m.runs_on(v, cc) == compat.NO_IMAGE for v in variants) for cc in ccs), len(variants)
    except Exception:  # noqa: BLE001 - the matrix is optional to explain
        return 0, 0


def nvcc_lacks_arch(arch: str, nvcc: str) -> bool:
    """Can the nvcc a report shows ('12.6', from its version line) not build the architecture the report targets
    ('sm_100', 'compute_35', 'sm_90a'), by the version matrix (the arch's first and last nvcc)? False when the matrix
    cannot say (an arch or a release it does not know): the gate then proves nothing."""
    try:
        from cudadoctor import matrix

        cc = compat.parse_cc(arch)
        return bool(cc) and matrix.load().nvcc_supports_cc(nvcc, cc) is False
    except Exception:  # noqa: BLE001 - the matrix is optional to explain
        return False


def toolkit_lacks_gpu(gpu: str, toolkit: str) -> bool:
    """Can the CUDA toolkit a report names ('10.2', a build's or a library's CUDA) build no cubin the report's GPU
    ('RTX 3090', 'sm_86', '8.6') runs, by the version matrix: a GPU of a newer major than the toolkit knows (an RTX 30
    under CUDA 10, an RTX 50 under CUDA 12.6), or one the toolkit has dropped? Not a Turing card under CUDA 9: an sm_70
    cubin runs on 7.5. Every compute capability the GPU's name may mean must be out of reach. Its library kernels
    (cuDNN's, cuBLAS's, cuRAND's) then have no code the GPU runs unless they carried PTX. False when the matrix
    cannot say."""
    try:
        from cudadoctor import matrix

        ccs, m = gpu_ccs(gpu), matrix.load()
        return bool(ccs) and all(not _builds_for(m, toolkit, cc) for cc in ccs)
    except Exception:  # noqa: BLE001 - the matrix is optional to explain
        return False


def _cubin_rows(m, cc: tuple) -> list:
    """The matrix's architecture rows whose cubins a GPU of compute capability `cc` runs: its own and the older minors of
    its major (a cubin for X.Y runs on X.Z, Z >= Y: compat.sass_runs_on), newest first."""
    return [r for r in (m.arch_for_cc((cc[0], minor)) for minor in range(cc[1], -1, -1)) if r is not None]


def _builds_for(m, toolkit: str, cc: tuple) -> bool:
    """Can this toolkit build a cubin the GPU runs? True when the matrix cannot say."""
    known = [m.nvcc_supports_cc(toolkit, compat.parse_cc(r["cc"])) for r in _cubin_rows(m, cc)]
    return not known or any(k is not False for k in known)


def first_toolkit_for(cc: tuple) -> Optional[str]:
    """The oldest CUDA toolkit that builds a cubin a GPU of this compute capability runs, by the version matrix; None
    when it cannot say."""
    try:
        from cudadoctor import matrix
        from cudadoctor.matrix import major_minor

        firsts = [r["nvcc_first"] for r in _cubin_rows(matrix.load(), cc) if r.get("nvcc_first")]
        return min(firsts, key=major_minor) if firsts else None
    except Exception:  # noqa: BLE001 - the matrix is optional to explain
        return None


GATES = {"driver_too_old": driver_too_old, "differs": differs,  # name in the signature data -> comparison
         "wheel_lacks_arch": wheel_lacks_arch, "nvcc_lacks_arch": nvcc_lacks_arch,
         "toolkit_lacks_gpu": toolkit_lacks_gpu}


def reading(caps: dict, name: str) -> Optional[str]:
    """caps[name], or caps[name_<anything>] (a regex cannot repeat a group name across alternatives): the first of
    readings() over the one value each group kept."""
    if not name:
        return None
    found = readings({k: [v] for k, v in caps.items() if v}, name)
    return found[0] if found else None


def readings(allcaps: dict, name: str) -> list:
    """Every value of `name` the text showed, or, when it showed none, every value of `name_<anything>`; values of
    `name_fallback` only when nothing else of `name` was read (a torch program's words stand in for its release only
    when the report names none)."""
    if allcaps.get(name):
        return list(allcaps[name])
    found = [v for k, vs in sorted(allcaps.items()) if k.startswith(name + "_") and k != name + "_fallback" for v in vs]
    return found or list(allcaps.get(name + "_fallback", []))


def gate_holds(gate: dict, caps: dict, allcaps: Optional[dict] = None) -> bool:
    """Do the versions the text shows confirm the signature? With `all = true` in the gate every value each side
    read must agree (a report naming two GPUs, or the wheel it had and the one it has now, proves nothing unless
    all of them do); otherwise the first value of each side is compared."""
    test = GATES.get(gate.get("test", "driver_too_old"))
    if test is None:
        return False
    if gate.get("all") and allcaps is not None:
        needs_all, has_all = readings(allcaps, gate.get("needs", "")), readings(allcaps, gate.get("has", ""))
        if gate.get("needs") == "gpu":  # (round 32) a GPU name the matrix cannot place ("RTX5000") proves nothing
            needs_all = [g for g in needs_all if gpu_ccs(g)]  # either way: the others decide
        return bool(needs_all and has_all) and all(test(n, h) for n in needs_all for h in has_all)
    needs, has = reading(caps, gate.get("needs", "")), reading(caps, gate.get("has", ""))
    return bool(needs and has and test(needs, has))
