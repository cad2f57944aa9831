"""What the package indexes know: the PyPI JSON API and the PyTorch wheel index (PEP 503 pages).

Every answer comes through a `Fetcher`: live (urllib, a timeout on each request), recording (live,
and each answer saved to a folder), or replaying a recorded folder (the tests: no network). A
PyPI answer is saved trimmed to the fields read here (`trim_pypi`), in the index's own JSON shape.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

PYPI = "https://pypi.org/pypi/{name}/json"
TORCH_INDEX = "https://download.pytorch.org/whl/{cu}/torch/"
PACKAGES = ("torch", "cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13",
            "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cuda-crt")
TIMEOUT = 30.0
USER_AGENT = "cudadoctor-matrix-refresh (+https://github.com/cudadoctor)"


class FetchError(RuntimeError):
    """An index could not be asked (network, HTTP error, not JSON/HTML, not recorded). `missing`: the
    index answered that there is no such page (HTTP 404): a variant that does not exist."""

    def __init__(self, text: str, missing: bool = False):
        super().__init__(text)
        self.missing = missing


MISSING = "__HTTP_404__"  # what a recording holds for a page the index said does not exist


def _slug(url: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1]).strip("_")[:180]


class Fetcher:
    """GET a URL's text. mode: "live", "record" (live + save to `folder`) or "replay" (from `folder`)."""

    def __init__(self, mode: str = "live", folder: Optional[str] = None, timeout: float = TIMEOUT, opener=None):
        if mode not in ("live", "record", "replay") or (mode != "live" and not folder):
            raise ValueError(f"bad fetcher mode {mode!r} / folder {folder!r}")
        self.mode, self.folder, self.timeout = mode, folder, timeout
        self._open = opener or urllib.request.urlopen
        self.log: list = []  # (url, "ok" | error text)

    def path(self, url: str) -> str:
        return os.path.join(self.folder or "", _slug(url))

    def get(self, url: str, trim=None) -> str:
        if self.mode == "replay":
            try:
                with open(self.path(url), encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                self.log.append((url, "not recorded"))
                raise FetchError(f"{url}: not recorded in {self.folder} ({e.strerror})") from e
            if text == MISSING:
                self.log.append((url, "404"))
                raise FetchError(f"{url}: HTTP 404 (recorded)", missing=True)
            self.log.append((url, "ok"))
            return text
        req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        try:
            with self._open(req, timeout=self.timeout) as r:
                text = r.read().decode("utf-8", errors="replace")
        except OSError as e:  # URLError, HTTPError, timeouts, DNS
            self.log.append((url, str(e)))
            missing = getattr(e, "code", None) == 404
            if missing and self.mode == "record":
                self._save(url, MISSING)
            raise FetchError(f"{url}: {e}", missing=missing) from e
        self.log.append((url, "ok"))
        if self.mode == "record":
            self._save(url, trim(text) if trim else text)
        return text

    def _save(self, url: str, text: str) -> None:
        os.makedirs(self.folder, exist_ok=True)
        with open(self.path(url), "w", encoding="utf-8") as f:
            f.write(text)


# ---------------------------------------------------------------- PyPI


def _final(v: str) -> Optional[Version]:
    try:
        pv = Version(v)
    except InvalidVersion:
        return None
    return None if (pv.is_prerelease or pv.is_devrelease) else pv


FILE_KEYS = ("filename", "upload_time", "size", "url", "yanked", "packagetype", "requires_python")


def trim_pypi(text: str) -> str:
    """A PyPI answer cut to what is read here (same JSON shape): info's version and pins, and per
    release the upload time, name, size and URL of each Linux x86_64 file."""
    d = json.loads(text)
    info = d.get("info") or {}

    def files_of(files):  # Linux x86_64 files when a release has any (the matrix's scope), else all
        x86 = [f for f in files if "x86_64" in (f.get("filename") or "")]
        return [{k: f.get(k) for k in FILE_KEYS} for f in (x86 or files)]
    keep = {"info": {k: info.get(k) for k in ("name", "version", "requires_dist", "requires_python")},
            "releases": {v: files_of(files or []) for v, files in (d.get("releases") or {}).items()}}
    return json.dumps(keep, indent=1, sort_keys=True)


@dataclass
class Release:
    version: str
    date: str  # the first file's upload day, YYYY-MM-DD
    files: list = field(default_factory=list)  # [{filename, url, size}]


@dataclass
class Package:
    name: str
    latest: str = ""
    requires_dist: list = field(default_factory=list)
    releases: list = field(default_factory=list)  # [Release], oldest first, final versions only
    error: str = ""

    def newest(self) -> Optional[Release]:
        return self.releases[-1] if self.releases else None


def parse_pypi(name: str, text: str, base_url: str) -> Package:
    try:
        d = json.loads(text)
    except ValueError as e:
        return Package(name, error=f"not JSON: {e}")
    info = d.get("info") or {}
    out = []
    for v, files in (d.get("releases") or {}).items():
        files = [f for f in files or [] if not f.get("yanked")]
        pv = _final(v)
        if pv is None or not files:
            continue
        day = min(str(f.get("upload_time") or "")[:10] for f in files)
        out.append((pv, Release(v, day, [{"filename": f.get("filename", ""), "size": f.get("size"),
                                          "url": urllib.parse.urljoin(base_url, f.get("url") or "")}
                                         for f in files])))
    out.sort(key=lambda p: p[0])
    return Package(name, str(info.get("version") or ""), list(info.get("requires_dist") or []), [r for _, r in out])


def ask_pypi(fetcher: Fetcher, names=PACKAGES) -> dict:
    """name -> Package (a Package with `error` when the index could not be asked)."""
    out = {}
    for n in names:
        url = PYPI.format(name=n)
        try:
            out[n] = parse_pypi(n, fetcher.get(url, trim=trim_pypi), url)
        except FetchError as e:
            out[n] = Package(n, error=str(e))
    return out


# ---------------------------------------------------------------- pins in a torch wheel's Requires-Dist


def pins(requires_dist) -> dict:
    """{'cuda': '13.2', 'cuda_full': '13.2.2', 'cudnn': '9.26.0.51', 'nccl': '2.30.7'} from a torch wheel's
    Requires-Dist (cuda-toolkit==X or nvidia-cuda-runtime-cuXX==X; nvidia-cudnn-cuXX; nvidia-nccl-cuXX)."""
    out: dict = {}
    for line in requires_dist or []:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in r.specifier if s.operator == "=="]
        if not exact:
            continue
        name, v = r.name.lower(), exact[0].rstrip(".*")
        if name == "cuda-toolkit" or re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name):
            out.setdefault("cuda_full", v)
            out.setdefault("cuda", ".".join(v.split(".")[:2]))
        elif re.fullmatch(r"nvidia-cudnn-cu\d+", name):
            out["cudnn"] = v
        elif re.fullmatch(r"nvidia-nccl-cu\d+", name):
            out["nccl"] = v
    return out


def cu_tag(cuda: str) -> str:
    a, b = cuda.split(".")[:2]
    return f"cu{a}{b}"


# ---------------------------------------------------------------- the PyTorch wheel index (PEP 503)


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def parse_simple(text: str, base_url: str) -> list:
    """[{filename, url, version, local, python, platform}] of the torch wheels on a PEP 503 page."""
    p = _Links()
    p.feed(text)
    out = []
    for href in p.links:
        url = urllib.parse.urljoin(base_url, href.split("#", 1)[0])
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        try:
            dist, ver, _build, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if dist != "torch":
            continue
        tag = sorted(tags, key=str)[0]
        out.append({"filename": name, "url": url, "version": ver.public, "local": ver.local or "",
                    "python": tag.interpreter, "platform": tag.platform})
    return out


def ask_torch_index(fetcher: Fetcher, cus) -> dict:
    """cu tag -> [wheel] listed on download.pytorch.org/whl/<cu>/torch/ ({'error': text} when unreachable)."""
    out = {}
    for cu in cus:
        url = TORCH_INDEX.format(cu=cu)
        try:
            out[cu] = parse_simple(fetcher.get(url), url)
        except FetchError as e:
            out[cu] = [] if e.missing else {"error": str(e)}  # 404: no such variant
    return out


def linux_x86_wheel(files: list) -> Optional[dict]:
    """The manylinux x86_64 CPython wheel of the highest Python among `files` (not free-threaded)."""
    cands = [f for f in files if "manylinux" in f.get("platform", f["filename"]) and "x86_64" in f["filename"]
             and not re.search(r"cp3\d+t-", f["filename"])]

    def py(f):
        m = re.search(r"-cp3(\d+)-", f["filename"])
        return int(m.group(1)) if m else 0
    return max(cands, key=py) if cands else None


def variant_wheel(wheels: list, rel_mm: str, cu: str) -> Optional[dict]:
    """The wheel that stands for variant `cu` of release `rel_mm` ('2.15'): its newest version's Linux
    x86_64 wheel."""
    mine = [w for w in wheels if w["local"] == cu and ".".join(w["version"].split(".")[:2]) == rel_mm]
    if not mine:
        return None
    top = max(Version(w["version"]) for w in mine)
    return linux_x86_wheel([w for w in mine if Version(w["version"]) == top])
