"""Which installed distribution a binary belongs to, read from the installers' own records.

- `*.dist-info/RECORD` (PEP 376/627): every file a wheel install put there, relative to its site
  folder; the dist-info folder's name holds the distribution and version (`flash_attn-2.8.3.dist-info`).
- `*.dist-info/direct_url.json` (PEP 610): `{"url": "file:///src/proj", "dir_info": {"editable": true}}`
  for `pip install -e`; its RECORD lists the `__editable__.*.pth` and finder it installed.
- `<name>.egg-link` (setuptools `develop`): the source folder; the version is in
  `<source>/<name>.egg-info/PKG-INFO`.

importlib.metadata would give the same through the target interpreter; reading the few files here
keeps the child stdlib-small and lets tests use the System fakes. Each site folder is indexed once,
on the first binary that needs an owner, and only RECORD lines of loadable files are kept.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import unquote, urlparse

from cudadoctor.probes.fatbin import is_candidate_name
from cudadoctor.probes.where import _abs, _first_line


@dataclass(frozen=True)
class Owner:
    dist: str = ""  # the distribution's name as installed ('flash_attn', 'my-ext')
    version: str = ""
    kind: str = ""  # "wheel", "editable" (PEP 660 / PEP 610), "develop" (egg-link) or ""
    source: str = ""  # the source folder of an editable install


_RE_DISTINFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)\.dist-info$")


class Owners:
    def __init__(self, system, site_dirs: list):
        self.system = system
        self.site_dirs = list(site_dirs)
        self._files: dict = {}  # realpath -> Owner
        self._editable: list = []  # (source realpath, Owner)
        self._by_install_file: dict = {}  # realpath of a .pth / finder -> Owner
        self._indexed = False

    def _index(self) -> None:
        if self._indexed:
            return
        self._indexed = True
        s = self.system
        for sd in self.site_dirs:
            for name in s.listdir(sd):
                m = _RE_DISTINFO.match(name)
                if m:
                    self._index_dist(sd, name, m.group("name"), m.group("version"))
                elif name.endswith(".egg-link"):
                    self._index_egg_link(sd, name)

    def _index_dist(self, sd: str, name: str, dist: str, version: str) -> None:
        s = self.system
        folder = os.path.join(sd, name)
        owner = Owner(dist, version, "wheel")
        du = s.read_text(os.path.join(folder, "direct_url.json"), 1 << 16)
        if du:
            try:
                d = json.loads(du)
            except ValueError:
                d = {}
            url = d.get("url") or "" if isinstance(d, dict) else ""
            if isinstance(d, dict) and (d.get("dir_info") or {}).get("editable") and url.startswith("file:"):
                src = s.realpath(unquote(urlparse(url).path))
                owner = Owner(dist, version, "editable", src)
                self._editable.append((src, owner))
        record = s.read_text(os.path.join(folder, "RECORD"), 64 << 20) or ""
        for line in record.splitlines():
            rel = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
            base = rel.rsplit("/", 1)[-1]
            if is_candidate_name(base) or base.startswith("__editable__") or base.endswith(".pth"):
                real = s.realpath(_abs(rel, sd))
                if base.startswith("__editable__") or base.endswith(".pth"):
                    self._by_install_file[real] = owner
                else:
                    self._files.setdefault(real, owner)

    def _index_egg_link(self, sd: str, name: str) -> None:
        s = self.system
        src = _first_line(s, os.path.join(sd, name))
        if not src:
            return
        src = s.realpath(_abs(src, sd))
        dist = name[:-len(".egg-link")]
        version = ""
        for n in s.listdir(src):
            if n.endswith(".egg-info"):
                pkg = s.read_text(os.path.join(src, n, "PKG-INFO"), 1 << 16) or ""
                m = re.search(r"^Version:\s*(\S+)", pkg, re.M)
                if m and n[:-len(".egg-info")].replace("-", "_").lower() == dist.replace("-", "_").lower():
                    version = m.group(1)
                    break
        self._editable.append((src, Owner(dist, version, "develop", src)))

    def installed_by(self, install_file: str) -> Owner:
        """The distribution whose RECORD lists this .pth or editable finder (Owner() when none does)."""
        self._index()
        return self._by_install_file.get(self.system.realpath(install_file), Owner())

    def owner(self, path: str, via: str = "") -> Owner:
        """The distribution `path` belongs to ('' fields when none says so). `via` is the .pth, finder or
        egg-link that put the file's folder on the path, when it did."""
        self._index()
        real = self.system.realpath(path)
        if real in self._files:
            return self._files[real]
        best: Optional[tuple] = None
        for src, owner in self._editable:
            if real == src or real.startswith(src.rstrip("/") + "/"):
                if best is None or len(src) > len(best[0]):
                    best = (src, owner)
        if best:
            return best[1]
        if via:
            o = self._by_install_file.get(self.system.realpath(via))
            if o:
                return o
        return Owner()
