"""Reports from files and folders. A file that is not a readable cudadoctor report is listed with
the reason, never fatal. Many files are read by a pool of worker processes (JSON parsing is the
cost); each worker turns a report into a small NodeRecord, so little crosses back.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Optional

from cudadoctor.fleet.node import from_report
from cudadoctor.fleet.rejudge import older_than_this, rejudge
from cudadoctor.system.base import System

REPORT_LIMIT = 64 * 1024 * 1024  # bytes; a real report is well under 1 MiB
PARALLEL_FROM = 256  # files; fewer are read in this process
SUPPORTED_MAJOR = "1"


@dataclass(frozen=True)
class BadFile:
    path: str
    reason: str

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}


def find_files(system: System, paths: Iterable[str]) -> tuple:
    """([report files], [BadFile]) for files and folders (folders: every *.json below, sorted)."""
    files, bad = [], []
    for p in paths:
        if system.is_dir(p):
            found = [f for f in system.walk(p, max_files=10_000_000) if f.endswith(".json")]
            if not found:
                bad.append(BadFile(p, "folder holds no .json file"))
            files.extend(found)
        elif system.exists(p):
            files.append(p)
        else:
            bad.append(BadFile(p, "no such file or folder"))
    return files, bad


# The facts a fleet compares (fleet/node.py reads only these).
FLEET_FACTS = ("kernel_module", "nvidia_smi", "nvml", "toolkit", "torch")  # sorted
_decoder = json.JSONDecoder()


def quick_parse(data: bytes) -> Optional[dict]:
    """The parts of a report the fleet reads, without parsing the rest (ldconfig's library list and
    the like are most of a report's bytes). Works on reports as `check --json` prints them (indent 2),
    where a newline plus indentation only occurs between values (JSON strings escape newlines), so
    `\\n    "nvml": ` after `\\n  "facts": {` is that fact's key, and the next `\\n    "` the next
    fact's. Searches bytes and decodes only the slices it parses. None for any other layout: the
    caller then parses the whole file."""
    steps_key = b'\n  "steps": '
    steps_at = data.find(steps_key)
    facts_at = data.find(b'\n  "facts": {\n', steps_at + 1)
    if not data.startswith(b'{\n  "') or steps_at < 0 or facts_at < 0:
        return None
    try:
        head = json.loads(data[:steps_at].rstrip().rstrip(b",") + b"\n}")
        steps, _ = _decoder.raw_decode(data[steps_at + len(steps_key):facts_at].decode("utf-8", errors="replace"))
        facts = {}
        pos = facts_at
        for name in FLEET_FACTS:  # in sorted order, as reports list facts: each search goes on from the last
            key = b'\n    "' + name.encode() + b'": '
            at = data.find(key, pos)
            if at < 0 and pos != facts_at:
                at = data.find(key, facts_at)
            if at >= 0:
                pos = at
                at += len(key)
                end = data.find(b'\n    "', at)
                chunk = data[at:end if end >= 0 else len(data)].decode("utf-8", errors="replace")
                facts[name], _ = _decoder.raw_decode(chunk)
    except ValueError:
        return None
    if not isinstance(head, dict) or not isinstance(steps, list):
        return None
    head["steps"] = steps
    head["facts"] = facts
    return head


def parse_report(data: Optional[bytes], path: str, error: str = ""):
    """NodeRecord, or BadFile saying why `data` is not a report cudadoctor can read."""
    if data is None:
        return BadFile(path, f"cannot read it ({error or 'unreadable'})")
    if not data.strip():
        return BadFile(path, "empty file")
    if len(data) >= REPORT_LIMIT:
        return BadFile(path, f"larger than {REPORT_LIMIT // (1024 * 1024)} MiB: not a cudadoctor report")
    rep = quick_parse(data)
    if rep is None:
        try:
            rep = json.loads(data.decode("utf-8", errors="replace"))
        except ValueError as e:
            return BadFile(path, f"not JSON ({e})")
    if not isinstance(rep, dict) or rep.get("tool") != "cudadoctor" or not isinstance(rep.get("steps"), list):
        return BadFile(path, "not a cudadoctor report (`cudadoctor check --json` makes one)")
    version = str(rep.get("schema_version", ""))
    if version.split(".")[0] != SUPPORTED_MAJOR:
        return BadFile(path, f"schema_version {version or '?'}: this cudadoctor reads 1.x reports")
    stem = os.path.splitext(os.path.basename(path))[0]
    old = older_than_this(rep)
    if old:  # an older cudadoctor's verdicts: judge its facts again with today's checks (all of them: a full parse)
        if not isinstance(rep.get("facts"), dict) or set(rep["facts"]) <= set(FLEET_FACTS):
            try:
                rep = json.loads(data.decode("utf-8", errors="replace"))
            except ValueError:
                pass
        rep = rejudge(rep)
    rec = from_report(rep, source=path, name=str(rep.get("node") or rep.get("host") or stem))
    if old:
        rec.rejudged_from = old
    return rec


_host = None


def _read_one(path: str):
    global _host
    if _host is None:
        from cudadoctor.system.host import HostSystem

        _host = HostSystem()
    data = _host.read_bytes(path, REPORT_LIMIT)
    return parse_report(data, path, "" if data is not None else _host.read_error(path))


def _read_many(paths: list) -> list:
    return [_read_one(p) for p in paths]


def load_reports(system: System, paths: Iterable[str], jobs: Optional[int] = None) -> tuple:
    """([NodeRecord], [BadFile]) from report files and folders.

    When one node has several reports, the newest (by `created`) is used and the others are listed
    as bad files, saying so. `jobs`: worker processes (default: CPUs; 1 reads in this process).
    """
    files, bad = find_files(system, paths)
    results: list = []
    from cudadoctor.system.host import HostSystem

    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if isinstance(system, HostSystem) and workers > 1 and len(files) >= PARALLEL_FROM:
        batch = max(16, len(files) // (workers * 8))
        batches = [files[i:i + batch] for i in range(0, len(files), batch)]
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                for part in pool.map(_read_many, batches):
                    results.extend(part)
        except (OSError, RuntimeError, ImportError):  # no processes here (a sandbox): read them ourselves
            results = _read_many(files)
    else:
        for f in files:
            data = system.read_bytes(f, REPORT_LIMIT)
            results.append(parse_report(data, f, "" if data is not None else system.read_error(f)))
    records: dict = {}
    for r in results:
        if isinstance(r, BadFile):
            bad.append(r)
            continue
        old = records.get(r.node)
        if old is None:
            records[r.node] = r
            continue
        newer, older = (r, old) if r.created > old.created else (old, r)
        records[r.node] = newer
        bad.append(BadFile(older.source, f"an older report of node {r.node} (the newest, {newer.source}, is used)"))
    return list(records.values()), bad
