"""The signature data: one TOML file per signature in this package's signatures/ folder."""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SIGNATURE_DIR = Path(__file__).resolve().parent / "signatures"
ERROR_CODES = Path(__file__).resolve().parent / "error_codes.toml"


class SignatureError(ValueError):
    """A signature file is malformed (a bug in the shipped data)."""


class LazyRegex:
    """A regex compiled at its first search: the shipped patterns' ~110 regexes cost ~25 ms to compile, which a
    pasted message that reaches a few of them should not pay at start-up (the 0.3 s target). Tests compile every
    shipped regex (test_explain_signatures), so a bad one still fails CI."""

    __slots__ = ("source", "_rx")

    def __init__(self, source: str) -> None:
        self.source = source
        self._rx = None

    def compiled(self) -> "re.Pattern":
        if self._rx is None:
            self._rx = re.compile(self.source, re.IGNORECASE)
        return self._rx

    @property
    def pattern(self) -> str:
        return self.source

    def search(self, text: str):
        return self.compiled().search(text)

    def finditer(self, text: str):
        return self.compiled().finditer(text)


@dataclass(frozen=True)
class Pattern:
    contains: tuple  # lowercase substrings; a line with one of them is a candidate
    regex: "re.Pattern | None" = None  # must match that line (case-insensitive)
    capture: "re.Pattern | None" = None  # only extracts named groups; never rejects a line
    weight: float = 0.9  # 0 = capture only: reads values for a gate, never a match on its own
    context: tuple = ()  # one of these must appear anywhere in the input
    unless: tuple = ()  # the pattern does not count when one of these appears anywhere in the input
    alternatives: tuple = ()  # ids this wording is often confused with, offered before the signature's own
    hint: bool = False  # context or prose, not an error line: never outranks another signature's error line
    words: bool = True  # its literals feed the guesses' vocabulary (rank.closest); not a CUDA error number's forms,
    # nor a pattern marked guess_words = false
    code: int = 0  # the CUDA error number this pattern reads (error_codes.toml); 0 for a signature's own pattern
    cause: int = 0  # which of the signature's causes this wording points to (1-based; 0: none): listed first
    fix: int = 0  # which of its fixes this wording calls for (1-based; 0: none): given first


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    layer: str
    priority: int
    meaning: str
    causes: tuple
    confirm: tuple
    fixes: tuple
    docs: tuple
    related_checks: tuple
    facts: tuple
    patterns: tuple
    explains: tuple = ()
    alternatives: tuple = ()  # ids to offer next when this signature matched only weakly (a guess)
    keywords: tuple = ()  # words its reports often use: guesses only (rank.closest), never a match
    gate: tuple = ()  # ((key, value), ...): versions read by capture-only patterns that confirm it (versions.py)
    keep_before: bool = False  # keep the text before the first hit (tracebacks name the binary)
    source: str = ""


_REQUIRED = ("id", "title", "layer", "priority", "meaning", "causes", "confirm", "fixes")


def _tuple_of_str(d: dict, key: str, where: str) -> tuple:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise SignatureError(f"{where}: {key} must be a list of strings")
    return tuple(v)


def _require_ascii(values: tuple, what: str) -> None:
    """Literals the scan looks for must be ASCII: it searches bytes, lower-cased byte-wise."""
    if not all(v.isascii() for v in values):
        raise SignatureError(f"{what} must be ASCII (the scan is byte-wise)")


def _regex(source: str, lazy: bool):
    return LazyRegex(source) if lazy else re.compile(source, re.IGNORECASE)


# `not_in_source = true` on a pattern: the line is not the source line that raises or prints the message, as a Python
# traceback or a code excerpt shows it (`raise CudaDriverError("CUDA initialized before forking")` above the real error)
_NOT_SOURCE = r"^(?!.*(?:\braise\s+\w|warnings\.warn\(|\blog(?:ger)?\.\w+\(|\bprint\(|\bthrow\s+\w))"


def _not_in_source(rx: Optional[str]) -> str:
    """The pattern's regex behind the source-line guard (its own lookaheads at the line's start stay there)."""
    if not rx:
        return _NOT_SOURCE
    return _NOT_SOURCE + (rx[1:] if rx.startswith("^") else f".*?(?:{rx})")


def _check_known(names: tuple, ids, where: str) -> None:
    """explains, alternatives and a gate's readings_from may only name ids that exist."""
    unknown = [e for e in names if e not in ids]
    if unknown:
        raise SignatureError(f"{where}: explains/alternatives/readings_from name unknown ids {unknown}")


def parse(data: dict, where: str = "<data>", lazy: bool = False, shared: Optional[dict] = None) -> Signature:
    """One signature from its TOML data; lazy: regexes compile at first use (the shipped, CI-checked data); shared:
    the sets every signature file may name (_sets.toml)."""
    for k in _REQUIRED:
        if k not in data:
            raise SignatureError(f"{where}: missing {k!r}")
    sets = _sets(data, where, shared)
    pats = []
    for i, p in enumerate(data.get("pattern", [])):
        pw = f"{where} pattern {i + 1}"
        contains = tuple(s.lower() for s in _tuple_of_str(p, "contains", pw))
        if not contains or any(not s.strip() for s in contains):
            raise SignatureError(f"{pw}: needs at least one non-empty 'contains' substring")
        context, unless = (_expand(_tuple_of_str(p, k, pw), sets, pw) for k in ("context", "unless"))
        _require_ascii(contains + context + unless, f"{pw}: 'contains', 'context' and 'unless'")
        rx = p.get("regex")
        guard = p.get("not_in_source", False)
        if not isinstance(guard, bool):
            raise SignatureError(f"{pw}: not_in_source must be true or false")
        if guard:
            rx = _not_in_source(rx)
        try:
            compiled = _regex(rx, lazy) if rx else None
        except re.error as e:
            raise SignatureError(f"{pw}: bad regex: {e}") from e
        cap = p.get("capture")
        try:
            cap_rx = _regex(cap, lazy) if cap else None
        except re.error as e:
            raise SignatureError(f"{pw}: bad capture regex: {e}") from e
        w = float(p.get("weight", 0.9))
        if not 0 <= w <= 1:
            raise SignatureError(f"{pw}: weight must be in [0, 1]")
        hint, words = p.get("hint", False), p.get("guess_words", True)
        if not isinstance(hint, bool) or not isinstance(words, bool):
            raise SignatureError(f"{pw}: hint and guess_words must be true or false")
        pointers = {}
        for key, listed in (("cause", "causes"), ("fix", "fixes")):
            v = p.get(key, 0)
            n = len(data.get(listed, ()) or ())
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= n:
                raise SignatureError(f"{pw}: {key} must be the number of one of the {n} {listed} (1-{n})")
            pointers[key] = v
        pats.append(Pattern(contains, compiled, cap_rx, w, tuple(s.lower() for s in context),
                            tuple(s.lower() for s in unless), _tuple_of_str(p, "alternatives", pw), hint, words,
                            cause=pointers["cause"], fix=pointers["fix"]))
    if not pats:
        raise SignatureError(f"{where}: no [[pattern]]")
    return Signature(
        id=data["id"], title=data["title"], layer=data["layer"], priority=int(data["priority"]),
        meaning=data["meaning"].strip(), causes=_tuple_of_str(data, "causes", where),
        confirm=_tuple_of_str(data, "confirm", where), fixes=_tuple_of_str(data, "fixes", where),
        docs=_tuple_of_str(data, "docs", where), related_checks=_tuple_of_str(data, "related_checks", where),
        facts=_tuple_of_str(data, "facts", where), patterns=tuple(pats),
        explains=_tuple_of_str(data, "explains", where), alternatives=_tuple_of_str(data, "alternatives", where),
        keywords=_tuple_of_str(data, "keywords", where),
        gate=_gate(data.get("gate", {}), f"{where} gate"),
        keep_before=bool(data.get("keep_before", False)),
        source=where,
    )


def _sets(data: dict, where: str, shared: Optional[dict] = None) -> dict:
    """A file's named substring lists (`[sets]`): one list that several patterns' context or unless name as "@name",
    written once (wsl.toml's "WSL as a word" list served eight patterns as copies); with the shared ones of
    _sets.toml, which a file may not redefine."""
    sets = data.get("sets", {})
    if not isinstance(sets, dict):
        raise SignatureError(f"{where}: sets must be a table of lists")
    for name in sets:
        _tuple_of_str(sets, name, f"{where} sets")
    clash = sorted(set(sets) & set(shared or {}))
    if clash:
        raise SignatureError(f"{where}: sets {clash} are already in _sets.toml")
    return {**(shared or {}), **sets}


def _expand(values: tuple, sets: dict, where: str) -> tuple:
    """context/unless values with each "@name" replaced by the file's set of that name."""
    out: list = []
    for v in values:
        if v.startswith("@"):
            if v[1:] not in sets:
                raise SignatureError(f"{where}: no set {v[1:]!r} in this file's [sets] or _sets.toml")
            out.extend(sets[v[1:]])
        else:
            out.append(v)
    return tuple(out)


_GATE_KEYS = {"needs", "has", "weight", "test", "hint", "all", "readings_from"}


def _gate(g: dict, where: str) -> tuple:
    """A signature's gate (`gate = {...}`; none: {})."""
    if not isinstance(g, dict) or (g and not {"needs", "has", "weight"} <= set(g)):
        raise SignatureError(f"{where}: a gate needs needs, has and weight")
    if not g:
        return ()
    if set(g) - _GATE_KEYS:
        raise SignatureError(f"{where}: unknown gate keys {sorted(set(g) - _GATE_KEYS)}")
    if not isinstance(g.get("all", False), bool) or not isinstance(g.get("hint", False), bool):
        raise SignatureError(f"{where}: gate all and hint must be true or false")
    if not 0 < float(g["weight"]) <= 1:
        raise SignatureError(f"{where}: gate weight must be in (0, 1]")
    shared = _tuple_of_str(g, "readings_from", where)  # signatures whose capture-only readings this gate reads too
    return tuple(sorted({**g, "readings_from": shared}.items()))


def _read(path: Path) -> dict:
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise SignatureError(f"{path.name}: {e}") from e


def shipped_tables() -> dict:
    """The shipped signature files and error-code table as parsed TOML, {path: table}. Parsing the ~40 files is most
    of explain's start-up (tomllib is pure Python), so the parsed tables are kept as JSON in cudadoctor's cache dir,
    keyed by every file's path, size and mtime and cudadoctor's version: an edited or upgraded file is parsed again.
    Where the cache dir cannot be written (a read-only home), the files are parsed each time."""
    import hashlib
    import json
    import os

    from cudadoctor import __version__

    files = sorted(SIGNATURE_DIR.glob("*.toml")) + [ERROR_CODES]
    try:
        stamp = [(str(p), st.st_size, st.st_mtime_ns) for p in files for st in (p.stat(),)]
    except OSError:
        return {str(p): _read(p) for p in files}
    key = hashlib.sha256(repr((__version__, stamp)).encode()).hexdigest()[:20]
    try:
        from cudadoctor.paths import cache_dir

        folder = cache_dir() / "explain"
        cached = folder / f"signatures-{key}.json"
    except Exception:  # noqa: BLE001 - no cache dir to be had (platformdirs missing, no home): parse every time
        return {str(p): _read(p) for p in files}
    try:
        tables = json.loads(cached.read_bytes())
        if isinstance(tables, dict) and sorted(tables) == sorted(str(p) for p in files):
            return tables
    except (OSError, ValueError):
        pass
    tables = {str(p): _read(p) for p in files}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".signatures-{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(tables))
        os.replace(tmp, cached)
        for old in folder.glob("signatures-*.json"):  # earlier versions' tables
            if old != cached:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    return tables


def load_dir(folder: Path, lazy: bool = False, tables: Optional[dict] = None) -> tuple:
    """Every signature of a folder (one `<id>.toml` each); `_sets.toml` holds the sets several files name. `tables`:
    the files already parsed, {path: table} (shipped_tables)."""
    def read(path: Path) -> dict:
        return tables[str(path)] if tables is not None and str(path) in tables else _read(path)

    shared_file = folder / "_sets.toml"
    shared = _sets(read(shared_file), shared_file.name) if shared_file.exists() else {}
    sigs = []
    for path in sorted(folder.glob("*.toml")):
        if path.name.startswith("_"):
            continue
        sig = parse(read(path), path.name, lazy, shared)
        if path.stem != sig.id:
            raise SignatureError(f"{path.name}: file name must be the id ({sig.id}.toml)")
        sigs.append(sig)
    ids = [s.id for s in sigs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SignatureError(f"duplicate signature ids: {sorted(dup)}")
    for s in sigs:
        _check_known(s.explains + s.alternatives + tuple(a for p in s.patterns for a in p.alternatives)
                     + tuple(dict(s.gate).get("readings_from", ())), ids, s.source)
    return tuple(sigs)


# How tools print a bare CUDA error number: a CUDA name first on the line (cudaMalloc, cuInit, CUDA_CHECK, GPUassert,
# err_no, cudaError_t), then a word that introduces a code, then the number ("CUDA error code 209", "GPUassert: code
# 700", "Cuda error (err_no=30)", "cuInit returned 803", "CUDA error(2)"). make's "] Error 2" is no CUDA code.
_CODE_NAME = (r"(?:\bcuda\w*|\bcu(?:init|mem\w*|launch\w*|ctx\w*|module\w*|device\w*|stream\w*|event\w*|graph\w*|func\w*"
              r"|result|getdevice\w*)|\bgpu\s?assert|\bgpu_?(?:err\w*|check\w*)|\bcheck_?cuda\w*|\berr_no)")
_CODE_WORD = r"(?:returned|returns|(?<!\] )error(?:_t)?|(?<!exit )(?<!return )code|result|err_no|errno|(?<!exit )status)"
# the number ends there: not 2.5, not "35 lines", "2 GPUs", "700 MiB"; not a C++ front end's diagnostic number ("error #35:
# #error directive", "error #101-D")
_CODE_END = (r"(?![\d.]|-d\b|:\s*#error|\s*(?:lines?\b|times\b|[kmgt]i?b\b|bytes\b|%|ms\b|s\b|secs?\b|gpus?\b|devices?\b"
             r"|errors\b|warnings?\b))")
# (round 31) "code : {n}": PaddlePaddle's form ("cudaGetDeviceCount failed in ..., error code : 35")
_CODE_FORMS = ("error {n}", "error: {n}", "error={n}", "error = {n}", "error({n}", "error ({n}", "error_t {n}",
               "code {n}", "code: {n}", "code : {n}", "code={n}", "code({n}", "returned {n}", "returns {n}", "err_no={n}",
               "err_no: {n}", "errno={n}", "result {n}", "result: {n}", "({n} vs", "error #")


def code_pattern(entry: dict, where: str) -> Pattern:
    """The pattern that reads one CUDA error number (error_codes.toml) in the forms tools print it."""
    n = entry.get("number")
    if not isinstance(n, int) or n <= 0:
        raise SignatureError(f"{where}: number must be a positive integer")
    w = float(entry.get("weight", 0.8))
    if not 0 < w <= 1:
        raise SignatureError(f"{where}: weight must be in (0, 1]")
    core = rf"{_CODE_NAME}.{{0,80}}?{_CODE_WORD}\W{{0,4}}{n}{_CODE_END}|\({n} vs"
    unless = tuple(u.lower() for u in _tuple_of_str(entry, "unless", where))
    _require_ascii(unless, f"{where}: 'unless'")
    # `not_on_line`: the number does not count on a line that names one of these (999 where CUDA initialises)
    off = tuple(u.lower() for u in _tuple_of_str(entry, "not_on_line", where))
    _require_ascii(off, f"{where}: 'not_on_line'")
    rx = LazyRegex(f"^(?!.*(?:{'|'.join(map(re.escape, off))}))(?:.*?)(?:{core})" if off else core)
    return Pattern(tuple(f.format(n=n) for f in _CODE_FORMS), rx, None, w, unless=unless,
                   alternatives=_tuple_of_str(entry, "alternatives", where), words=False, code=n)


def with_codes(sigs: tuple, path: Path, tables: Optional[dict] = None) -> tuple:
    """The signatures with one more pattern per CUDA error number of the table at path, on the id it names."""
    table = (tables[str(path)] if tables is not None and str(path) in tables else _read(path)).get("code", [])
    by_id = {s.id: [] for s in sigs}
    seen: set = set()
    for i, entry in enumerate(table):
        where = f"{path.name} code {i + 1}"
        if entry.get("id") not in by_id:
            raise SignatureError(f"{where}: unknown id {entry.get('id')!r}")
        if entry.get("number") in seen:
            raise SignatureError(f"{where}: number {entry.get('number')} listed twice")
        seen.add(entry.get("number"))
        pat = code_pattern(entry, where)
        _check_known(pat.alternatives, by_id, where)
        by_id[entry["id"]].append(pat)
    return tuple(replace(s, patterns=s.patterns + tuple(by_id[s.id])) if by_id[s.id] else s for s in sigs)


@functools.lru_cache(maxsize=1)
def load() -> tuple:
    """Every shipped signature, in file-name order, each with the CUDA error numbers that name it (error_codes.toml)."""
    tables = shipped_tables()
    return with_codes(load_dir(SIGNATURE_DIR, lazy=True, tables=tables), ERROR_CODES, tables)
