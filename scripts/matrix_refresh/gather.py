"""Ask the indexes (through a Fetcher) and read the wheels that matter; everything lands in a Snapshot.

Wheels and toolkit headers are read over HTTP ranges (`wheel.HttpRanges`); what was read is recorded
as a small JSON summary next to the index answers, so a replay needs neither network nor wheels.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from datetime import date, timedelta

from matrix_refresh import hostcfg
from matrix_refresh.index import (
    FetchError,
    _slug,
    ask_pypi,
    ask_torch_index,
    cu_tag,
    linux_x86_wheel,
    pins,
    variant_wheel,
)
from matrix_refresh.propose import (
    Snapshot,
    candidate_cus,
    new_torch_minors,
    new_toolkit_versions,
)
from matrix_refresh.wheel import HttpRanges, WheelError, _SeekableRanges, read_wheel_archs

DRIVER_REDIST = "https://developer.download.nvidia.com/compute/nvidia-driver/redist/"
_REDIST_ENTRY = re.compile(r"redistrib_(\d+\.\d+(?:\.\d+)?)\.json(?:(?!redistrib_).){0,200}?(\d{4}-\d{2}-\d{2})", re.S)


class Reader:
    """Reads (or replays) a wheel's archs and Requires-Dist, and a crt wheel's host_config.h limits."""

    def __init__(self, fetcher, open_ranges=HttpRanges):
        self.fetcher, self.open_ranges = fetcher, open_ranges

    def _cached(self, key: str, read) -> dict:
        path = os.path.join(self.fetcher.folder or "", "read-" + _slug(key) + ".json")
        if self.fetcher.mode == "replay":
            try:
                with open(path, encoding="utf-8") as f:
                    return json.load(f)
            except OSError:
                return {"error": "not recorded"}
        try:
            out = read()
        except (WheelError, OSError, ValueError) as e:
            out = {"error": str(e)}
        if self.fetcher.mode == "record":
            os.makedirs(self.fetcher.folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1, sort_keys=True)
        return out

    def wheel(self, url: str, filename: str) -> dict:
        def read():
            r = self.open_ranges(url)
            w = read_wheel_archs(r)
            return {"filename": filename, "sass_counts": w.sass_counts, "ptx_counts": w.ptx_counts,
                    "requires_dist": requires_dist(r), "stored": w.stored, "fetched_bytes": r.bytes,
                    "requests": r.requests, "seconds": round(w.seconds, 1)}
        return self._cached(filename, read)

    def crt(self, url: str, version: str) -> dict:
        return self._cached(f"nvidia-cuda-crt-{version}", lambda: dict(hostcfg.read_limits(self.open_ranges(url)),
                                                                       version=version))


def requires_dist(ranges) -> list:
    """Requires-Dist lines of the wheel's *.dist-info/METADATA (a small member next to the big ones)."""
    z = zipfile.ZipFile(_SeekableRanges(ranges))
    name = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
    if name is None:
        return []
    text = z.read(name).decode("utf-8", errors="replace")
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]


def ask_driver_redist(fetcher, days: set) -> list:
    """[(driver, release day)] of the drivers NVIDIA's redist lists within a day of `days`."""
    try:
        text = fetcher.get(DRIVER_REDIST)
    except FetchError:
        return []
    near = {d + timedelta(days=k) for d in (date.fromisoformat(x) for x in days) for k in (-1, 0, 1)}
    out = []
    for drv, listed in _REDIST_ENTRY.findall(text):
        if date.fromisoformat(listed) not in near:
            continue
        try:  # the manifest's own release_date, not the listing's upload time
            day = json.loads(fetcher.get(f"{DRIVER_REDIST}redistrib_{drv}.json")).get("release_date", listed)
        except (FetchError, ValueError):
            day = listed
        out.append((drv, str(day)[:10]))
    return out


def gather(m, fetcher, reader: Reader, today: str, read_wheels: bool = True) -> Snapshot:
    pypi = ask_pypi(fetcher)
    if all(p.error for p in pypi.values()):
        raise FetchError("the PyPI JSON API answered nothing: " + pypi["torch"].error)
    snap = Snapshot(today, pypi, notes=[f"{n}: {p.error}" for n, p in pypi.items() if p.error])
    minors = new_torch_minors(m, pypi)
    if minors:
        snap.torch_index = ask_torch_index(fetcher, candidate_cus(m, pypi))
        down = [cu for cu, v in snap.torch_index.items() if isinstance(v, dict)]
        if down:
            snap.notes.append(f"the PyTorch wheel index did not answer for {', '.join(down)} "
                              f"({snap.torch_index[down[0]]['error']}): only PyPI's variant is proposed for those")
        if read_wheels:
            default = pins(pypi["torch"].requires_dist).get("cuda")
            for rel_mm, rels in minors.items():
                wanted = [linux_x86_wheel(rels[-1].files)]  # PyPI's own variant
                wanted += [variant_wheel(wheels, rel_mm, cu) for cu, wheels in snap.torch_index.items()
                           if isinstance(wheels, list) and cu != (cu_tag(default) if default else "")]
                for w in filter(None, wanted):
                    snap.wheels[w["filename"]] = reader.wheel(w["url"], w["filename"])
    new_tk = new_toolkit_versions(m, pypi)
    beyond = sorted({".".join(r.version.split(".")[:2]) for r in new_tk
                     if tuple(map(int, r.version.split(".")[:2])) > tuple(map(int, m.compilers_data_stops_at.split(".")))})
    for mm in beyond:
        rel = hostcfg.crt_release_for(pypi.get("nvidia-cuda-crt"), mm)
        f = next((x for x in (rel.files if rel else []) if "x86_64" in x["filename"] and "linux" in x["filename"]), None)
        snap.crt[mm] = reader.crt(f["url"], rel.version) if f else {"error": f"no nvidia-cuda-crt {mm}.x on PyPI"}
    if new_tk:
        snap.drivers = ask_driver_redist(fetcher, {r.date for r in new_tk})
        if not snap.drivers:
            snap.notes.append("NVIDIA's driver redist listed no driver released with the new toolkits (or did not answer)")
    return snap
