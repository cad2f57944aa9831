"""The version matrix: data in matrix/*.toml (shipped in the wheel), read into typed queries.

Every row carries `source` (keys of matrix/sources.toml) and `confidence` ("verified",
"verified-secondary" or "inferred"). Queries return plain data (dicts, lists, strings) so checks,
commands and --json output can use them directly.
"""

from __future__ import annotations

import functools
import sys
from typing import Optional

from cudadoctor.compat import NATIVE, NO_IMAGE, PTX_JIT, select_image
from cudadoctor.matrix.versions import (
    cc_key,
    cc_text,
    cuda_in_ranges,
    major_minor,
    mm_text,
    parse_version,
)
from cudadoctor.paths import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLES = ("sources", "archs", "drivers", "torch", "cudnn", "compilers", "index")
INDEX_URL = "https://download.pytorch.org/whl/{cu}"


def read_table(name: str) -> dict:
    with open(data_dir("matrix") / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def pip_command(torch_release: str, cu: str) -> str:
    return f"pip install 'torch=={torch_release}.*' --index-url {INDEX_URL.format(cu=cu)}"


def arch_list_of(variant: dict) -> list:
    """The arch list as torch.cuda.get_arch_list() prints it: sm_XY for SASS, compute_XY for PTX."""
    out = [f"sm_{a.replace('.', '')}" for a in variant.get("archs", [])]
    out += [f"compute_{a.replace('.', '')}" for a in variant.get("ptx", [])]
    return out


class Matrix:
    def __init__(self, tables: Optional[dict] = None) -> None:
        t = tables if tables is not None else {name: read_table(name) for name in TABLES}
        self.tables = t
        self.sources = t.get("sources", {})
        self.archs = t.get("archs", {}).get("arch", [])
        drivers = t.get("drivers", {})
        self.toolkits = drivers.get("toolkit", [])
        self.minor_compat = drivers.get("minor_compat", [])
        self.branches = sorted(drivers.get("branch", []), key=lambda b: b["branch"])
        self.torch_releases = sorted(t.get("torch", {}).get("release", []),
                                     key=lambda r: parse_version(r["torch"]))
        self.cudnn = t.get("cudnn", {}).get("cudnn", [])
        self.compilers = t.get("compilers", {}).get("toolkit", [])
        self.index = t.get("index", {})  # what the package index knew at the last refresh

    # ------------------------------------------------------------ where the data stops

    @property
    def cuda_data_stops_at(self) -> str:
        return max((r["cuda"] for r in self.toolkits), key=parse_version)

    @property
    def nvcc_data_stops_at(self) -> str:
        firsts = [a["nvcc_first"] for a in self.archs] + [r["cuda_last"] for r in self.compilers]
        return max(firsts, key=parse_version)

    @property
    def torch_data_stops_at(self) -> str:
        return self.torch_releases[-1]["torch"]

    @property
    def branch_data_stops_at(self) -> int:
        return self.branches[-1]["branch"]

    @property
    def cudnn_data_stops_at(self) -> str:
        return max((r["last"] for r in self.cudnn), key=parse_version)

    @property
    def compilers_data_stops_at(self) -> str:
        return max((r["cuda_last"] for r in self.compilers), key=parse_version)

    def data_stops_at(self) -> dict:
        """The newest of everything in the data (and when it was checked against the index)."""
        b = self.branches[-1]
        return {"torch": self.torch_data_stops_at, "cuda": self.cuda_data_stops_at,
                "driver_branch": f"R{b['branch']}", "driver_cuda": b["cuda"],
                "nvcc_targets": self.nvcc_data_stops_at, "host_compilers": self.compilers_data_stops_at,
                "cudnn": self.cudnn_data_stops_at, "checked": self.index.get("checked") or None}

    def driver_beyond_data(self, driver: str) -> bool:
        """Is this driver from a branch newer than the data? Branches are at least 5 apart (R610,
        R615, R620) and a branch's Windows numbers run at most 2 above it (R615: 617.14)."""
        v = parse_version(driver)
        return bool(v is not None and self.branches and v.release[0] >= self.branch_data_stops_at + 5)

    # ------------------------------------------------------------ architectures

    def arch_for_cc(self, cc: tuple):
        """The row of matrix/archs.toml for compute capability (major, minor), or None."""
        key = cc_text(cc)
        return next((a for a in self.archs if a.get("cc") == key), None)

    def arch_name(self, cc: tuple) -> str:
        row = self.arch_for_cc(cc)
        return row["architecture"] if row else ""

    def nvcc_supports_cc(self, nvcc_version: str, cc: tuple) -> Optional[bool]:
        """Can this nvcc build sm_XY / compute_XY for `cc`? None when the data cannot say."""
        row = self.arch_for_cc(cc)
        v = major_minor(nvcc_version)
        if row is None or v is None:
            return None
        if v < major_minor(row["nvcc_first"]):
            return False
        if row.get("nvcc_last"):
            return v <= major_minor(row["nvcc_last"])
        if v[0] > major_minor(self.nvcc_data_stops_at)[0]:
            return None  # a newer major than the data knows may drop it
        return True

    def nvcc_for_cc(self, cc: tuple) -> Optional[dict]:
        """The nvcc range that can target `cc`, with the arch-specific and family variants."""
        row = self.arch_for_cc(cc)
        if row is None:
            return None
        num = cc_text(cc).replace(".", "")
        return {
            "sm": f"sm_{num}", "compute": f"compute_{num}",
            "first": row["nvcc_first"], "last": row.get("nvcc_last"),
            "variants": [{"target": f"sm_{num}{v['suffix']}", "first": v["nvcc_first"]}
                         for v in row.get("variants", [])],
            "renamed_to": row.get("renamed_to"),
        }

    def newest_nvcc_for_cc(self, cc: tuple) -> Optional[str]:
        """The newest toolkit (major.minor) known to target `cc` (its last, or the newest in the data)."""
        row = self.arch_for_cc(cc)
        if row is None:
            return None
        return row.get("nvcc_last") or self.cuda_data_stops_at

    def find_gpu(self, name: str) -> list:
        """Rows whose example GPU names match `name` (token-wise, 'NVIDIA'/'GeForce' optional)."""
        from cudadoctor.matrix.gpu_names import match_examples

        return match_examples(name, self.archs)

    # ------------------------------------------------------------ drivers

    def _toolkit_rows(self, mm: tuple) -> list:
        return [r for r in self.toolkits if major_minor(r["cuda"]) == mm]

    def minor_compat_for(self, major: int) -> Optional[dict]:
        return next((m for m in self.minor_compat if m["major"] == major), None)

    def min_driver(self, cuda: str, os: str = "linux") -> Optional[dict]:
        """Minimum drivers for CUDA `cuda` ('12.4' or '12.4.1'): full compatibility and the
        minor-version-compatibility floor of its major. None when `cuda` does not parse or is older
        than the data (9.0); for a toolkit newer than the data, `full` is None and `note` says so.
        """
        v = parse_version(cuda)
        mm = major_minor(cuda)
        if v is None or mm is None or mm < major_minor(self.toolkits[0]["cuda"]):
            return None
        rows = self._toolkit_rows(mm)
        full = None
        note = ""
        if rows:
            rows = sorted(rows, key=lambda r: min(parse_version(x) for x in r["versions"]))
            full = rows[0]
            if len(v.release) >= 3:
                exact = [r for r in rows if any(parse_version(x) == v for x in r["versions"])]
                below = [r for r in rows if min(parse_version(x) for x in r["versions"]) <= v]
                full = exact[0] if exact else (below[-1] if below else rows[0])
                if not exact:
                    note = f"CUDA {cuda} is not in the data; using {full['cuda']} {full['release']}"
        elif mm > major_minor(self.cuda_data_stops_at):
            note = f"the data stops at CUDA {self.cuda_data_stops_at}; CUDA {mm_text(mm)} needs a newer driver than any listed"
        else:
            note = f"there is no CUDA {mm_text(mm)} toolkit in NVIDIA's tables"
        mvc = self.minor_compat_for(mm[0]) if mm >= (11, 1) else None
        out = {
            "cuda": cuda,
            "os": os,
            "full": None if full is None else {
                "release": f"{full['cuda']} {full['release']}", "linux": full["linux"],
                "windows": full["windows"] or None, "source": full["source"], "confidence": full["confidence"]},
            "minor_compat": None if mvc is None else {
                "major": mvc["major"], "linux": mvc["linux"], "windows": mvc["windows"] or None,
                "branch_min": mvc["branch_min"], "source": mvc["source"], "confidence": mvc["confidence"],
                "limits": "PTX built by a newer toolkit than the driver cannot be JIT-compiled (CUDA error 222); "
                          "APIs that need a newer driver return error 36"},
            "data_stops_at": self.cuda_data_stops_at,
            "note": note,
        }
        key = "windows" if os.lower().startswith("win") else "linux"
        out["driver"] = (out["full"] or {}).get(key)
        return out

    def branch_for_driver(self, driver: str) -> Optional[dict]:
        v = parse_version(driver)
        if v is None or not self.branches:
            return None
        major = v.release[0]
        rows = [b for b in self.branches if b["branch"] <= major]
        return rows[-1] if rows else None

    def max_cuda_for_driver(self, driver: str) -> Optional[str]:
        """The newest CUDA a driver runs (what nvidia-smi prints as 'CUDA Version'); None if unknown."""
        row = self.branch_for_driver(driver)
        return row["cuda"] if row else None

    def driver_runs_cuda(self, driver: str, cuda: str, driver_cuda: Optional[str] = None) -> str:
        """'full', 'minor-version', 'too-old' or 'unknown': can this driver run code of CUDA `cuda`?

        `driver_cuda` (the driver's own 'CUDA Version', when known) wins over the branch table.
        """
        want = major_minor(cuda)
        have = major_minor(driver_cuda) if driver_cuda else None
        from_table = have is None
        if have is None and driver:
            have = major_minor(self.max_cuda_for_driver(driver) or "")
        if want is None or have is None:
            return "unknown"
        if have >= want:
            return "full"
        if from_table and self.driver_beyond_data(driver):
            return "unknown"  # a newer branch than the data may run it: the table cannot say
        if have[0] == want[0] and want >= (11, 1):
            mvc = self.minor_compat_for(want[0])
            dv = parse_version(driver or "")
            if mvc and dv is not None and dv.release[0] >= mvc["branch_min"]:
                return "minor-version"
            if mvc and dv is None:
                return "minor-version"
        return "too-old"

    # ------------------------------------------------------------ torch wheels

    def torch_release(self, torch_version: str) -> Optional[dict]:
        mm = major_minor((torch_version or "").split("+")[0])
        if mm is None:
            return None
        return next((r for r in self.torch_releases if major_minor(r["torch"]) == mm), None)

    def _variant_dict(self, rel: dict, var: dict) -> dict:
        return {
            "torch": rel["torch"], "cu": var["cu"], "cuda": var["cuda"], "role": var["role"],
            "archs": list(var["archs"]), "ptx": list(var.get("ptx", [])), "arch_list": arch_list_of(var),
            "cudnn": var.get("cudnn") or None, "nccl": var.get("nccl") or None,
            "pypi_default": rel.get("pypi_default") == var["cu"],
            "index_url": INDEX_URL.format(cu=var["cu"]), "pip": pip_command(rel["torch"], var["cu"]),
            "source": var["source"], "confidence": var["confidence"], "note": var.get("note", ""),
        }

    def torch_variants(self, torch_version: str) -> list:
        rel = self.torch_release(torch_version)
        if rel is None:
            return []
        return [self._variant_dict(rel, v) for v in rel.get("variant", [])]

    def variant_for(self, torch_version: str, cuda: Optional[str]) -> Optional[dict]:
        """The variant of `torch_version` built for `cuda` ('12.8'), from e.g. '2.8.0+cu128'."""
        mm = major_minor(cuda or "")
        if mm is None and "+cu" in (torch_version or ""):
            tag = torch_version.split("+cu", 1)[1]
            mm = (int(tag[:-1]), int(tag[-1])) if tag.isdigit() and len(tag) >= 3 else None
        return next((v for v in self.torch_variants(torch_version) if major_minor(v["cuda"]) == mm), None)

    @staticmethod
    def runs_on(variant: dict, cc: tuple) -> str:
        """NATIVE, PTX_JIT or NO_IMAGE for this wheel variant on a GPU of compute capability `cc`."""
        sass = [f"sm_{a.replace('.', '')}" for a in variant["archs"]]
        ptx = [f"compute_{a.replace('.', '')}" for a in variant.get("ptx", [])]
        return select_image(sass, ptx, tuple(cc)).verdict

    def recommend_torch(self, cc: Optional[tuple], driver: Optional[str],
                        driver_cuda: Optional[str] = None) -> list:
        """Torch wheels that run on this GPU and driver, newest torch first (then newest CUDA).

        `cc` None: any GPU. `driver` None: any driver. Each entry: torch, cu, cuda, index_url, pip,
        gpu ('native' or 'ptx-jit'), driver ('full', 'minor-version' or 'unknown'), pypi_default.
        """
        out = []
        for rel in reversed(self.torch_releases):
            # stable variants first, newest CUDA first: PyTorch calls the others experimental, and an
            # experimental variant of the newest release may be one the data could only infer
            vars_ = sorted(rel.get("variant", []), key=lambda v: (v.get("role") != "experimental",
                                                                 parse_version(v["cuda"])), reverse=True)
            for var in vars_:
                gpu = self.runs_on(var, cc) if cc else "any"
                if gpu == NO_IMAGE:
                    continue
                drv = self.driver_runs_cuda(driver, var["cuda"], driver_cuda) if (driver or driver_cuda) else "unknown"
                if drv == "too-old":
                    continue
                d = self._variant_dict(rel, var)
                d.update({"gpu": {NATIVE: "native", PTX_JIT: "ptx-jit"}.get(gpu, gpu), "driver": drv})
                out.append(d)
        return out

    def torch_support_for_cc(self, cc: tuple) -> dict:
        """Which wheel variants include `cc` (SASS or PTX), and the newest and oldest torch that do."""
        hits = []
        for rel in self.torch_releases:
            for var in rel.get("variant", []):
                verdict = self.runs_on(var, cc)
                if verdict != NO_IMAGE:
                    hits.append({"torch": rel["torch"], "cu": var["cu"],
                                 "image": "sass" if verdict == NATIVE else "ptx"})
        return {
            "variants": hits,
            "newest_torch": hits[-1]["torch"] if hits else None,
            "oldest_torch": hits[0]["torch"] if hits else None,
            "data_stops_at": self.torch_data_stops_at,
        }

    # ------------------------------------------------------------ cuDNN and compilers

    def cudnn_row(self, version: str) -> Optional[dict]:
        mm = major_minor(version)
        if mm is None:
            return None
        return next((r for r in self.cudnn
                     if major_minor(r["first"]) <= mm <= major_minor(r["last"])), None)

    def nearest_cudnn_row(self, version: str) -> Optional[dict]:
        """The newest cuDNN row starting at or below `version` (the last row for a newer cuDNN)."""
        mm = major_minor(version)
        rows = sorted((r for r in self.cudnn if mm is not None and major_minor(r["first"]) <= mm),
                      key=lambda r: major_minor(r["first"]))
        return rows[-1] if rows else None

    def nearest_compiler_bounds(self, cuda: str) -> Optional[dict]:
        """compiler_bounds of the newest row at or below `cuda` (for an nvcc newer than the data)."""
        mm = major_minor(cuda)
        rows = [r for r in self.compilers if mm is not None and major_minor(r["cuda_first"]) <= mm]
        if not rows:
            return None
        return self.compiler_bounds(max(rows, key=lambda r: major_minor(r["cuda_last"]))["cuda_last"])

    def cudnn_supports_cuda(self, cudnn_version: str, cuda: str) -> Optional[bool]:
        row = self.cudnn_row(cudnn_version)
        mm = major_minor(cuda)
        if row is None or mm is None:
            return None
        return cuda_in_ranges(mm, row["cuda"])

    def compiler_bounds(self, cuda: str) -> Optional[dict]:
        mm = major_minor(cuda)
        if mm is None:
            return None
        row = next((r for r in self.compilers
                    if major_minor(r["cuda_first"]) <= mm <= major_minor(r["cuda_last"])), None)
        if row is None:
            return None
        return {
            "cuda": mm_text(mm), "rows_cover": f"{row['cuda_first']}-{row['cuda_last']}",
            "gcc_min": row.get("gcc_min"), "gcc_max": row.get("gcc_max"), "clang_max": row.get("clang_max"),
            "msvc": row.get("msvc"), "source": row["source"], "confidence": row["confidence"],
            "note": row.get("note", ""),
        }

    def first_cuda_for_gcc(self, gcc_major: int) -> Optional[str]:
        """The oldest toolkit row whose gcc_max admits `gcc_major` (the first nvcc that accepts it)."""
        for r in sorted(self.compilers, key=lambda r: parse_version(r["cuda_first"])):
            if r.get("gcc_max") is not None and r["gcc_max"] >= gcc_major:
                return r["cuda_first"]
        return None

    def newest_gcc_for_cuda(self, cuda: str) -> Optional[int]:
        b = self.compiler_bounds(cuda)
        return b["gcc_max"] if b else None

    def source(self, key: str) -> dict:
        return self.sources.get(key, {})


@functools.lru_cache(maxsize=1)
def load() -> Matrix:
    return Matrix()


__all__ = ["Matrix", "load", "read_table", "pip_command", "arch_list_of", "cc_key", "TABLES"]
