"""Find every signature in a text or a stream of bytes, in bounded memory and time.

The input is read in 1 MiB blocks cut at line ends (a line longer than 64 KiB is cut, with an
overlap so no hit is lost at the cut). Each block is searched as bytes, ASCII-lower-cased once:
every literal of every pattern (ASCII by rule) is found with bytes.find (fast, no backtracking, no
decoding, so invalid UTF-8 and binary junk cost nothing). Only the line window around a hit (at
most 2 * WINDOW bytes) is decoded (errors="replace") and given to a pattern's regex, so no regex
ever sees more than a few KB. Past its first 4 MiB a large log's blocks may go to forked workers (scan_pool.py,
`scan_stream(..., workers=N)`), whose partial results merge into the serial scan's result.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Optional

CHUNK = 1 << 20
MAX_CARRY = 1 << 16  # longest line kept whole; longer lines are cut
OVERLAP = 4096  # kept across a cut inside a very long line
WINDOW = 1000  # characters either side of a hit that make up its line window
SHOW = 400  # characters of a line shown as evidence
MAX_EVIDENCE = 3  # hits kept per pattern
MAX_TRIES = 5000  # regex evaluations per literal per block (bounds time on junk)
BEFORE = 6000  # characters kept before the first hit of a keep_before signature
MAX_REBUILDS = 6  # rebuilds of the large-block regex as context literals are found (then only when 3 more are)
SMALL_BLOCK = 1 << 16  # blocks up to this size are searched literal by literal (no regex to compile)


@dataclass
class Hit:
    line_no: int
    text: str
    pos: int  # character offset in the (decoded) input, for ordering
    captures: dict = field(default_factory=dict)
    before: str = ""


@dataclass
class ScanResult:
    hits: dict = field(default_factory=dict)  # (sig index, pattern index) -> [Hit]
    counts: dict = field(default_factory=dict)  # (sig index, pattern index) -> int
    context_seen: set = field(default_factory=set)
    bytes: int = 0
    lines: int = 0
    blank: bool = True  # only whitespace (or nothing) was read
    truncated_counts: bool = False


class Scanner:
    def __init__(self, signatures: Iterable) -> None:
        self.signatures = tuple(signatures)
        self.targets: dict = {}  # literal (bytes) -> [(sig index, pattern index)]
        context: set = set()
        for si, sig in enumerate(self.signatures):
            for pi, pat in enumerate(sig.patterns):
                for lit in pat.contains:
                    self.targets.setdefault(lit.encode("ascii"), []).append((si, pi))
                context.update(c.encode("ascii") for c in pat.context + pat.unless)
        self.context = sorted(context)
        self._rx = None  # the anchored trie regex, built for the first large block only
        self._rx_seen: frozenset = frozenset()  # context literals already found when it was built
        self._builds = 0
        self._at: dict = {}  # suffix matched by the regex -> [(literal, anchor, is_context)]

    def _regex(self, seen: set):
        """One regex for every literal (pattern and context ones), each anchored at its rarest byte:
        the trie starts at that byte, so the engine skips most positions of a log with a one-byte
        test instead of entering the trie at every letter. A match at q is a literal at q - anchor
        once the bytes before q are checked. Compiling it costs tens of ms, which a pasted message
        never pays (see _occurrences)."""
        # a context literal found once is done: rebuild without it (each stale one costs a Python-level step per
        # occurrence, e.g. 'kernel' in a training log); a few rebuilds at most, each costs a compile
        grown = len(seen) - len(self._rx_seen)
        if self._rx is None or (grown > 0 and self._builds < MAX_REBUILDS) or grown > 2:
            self._builds += 1
            self._rx_seen = frozenset(seen)
            ctx = [c for c in self.context if c.decode("ascii") not in seen]
            by_sfx: dict = {}
            for lit, is_ctx in [(t, False) for t in self.targets] + [(c, True) for c in ctx]:
                a = _anchor(lit)
                by_sfx.setdefault(lit[a:], []).append((lit, a, is_ctx))
            sfx = sorted(by_sfx, key=len, reverse=True)
            # the regex reports the longest suffix at q; every suffix it starts with starts there too
            # (every prefix of m that is itself a suffix, longest first: a dict look-up per length, not a
            # scan of every suffix, so a rebuild stays linear in the literals)
            self._at = {m: [x for k in range(len(m), 0, -1) if m[:k] in by_sfx for x in by_sfx[m[:k]]] for m in sfx}
            self._rx = re.compile(_trie_pattern(sfx))
        return self._rx

    def _occurrences(self, low: bytes, skip: int, res: "ScanResult"):
        """(position, literal) of every pattern literal, roughly first position first; context
        literals found on the way are recorded in res. Small blocks (a pasted error) are searched
        literal by literal with bytes.find; large ones with the anchored regex."""
        if len(low) <= SMALL_BLOCK:
            self._context_by_find(low, skip, res)
            found = []
            for lit in self.targets:
                i = low.find(lit)
                while i >= 0:
                    if i + len(lit) > skip:
                        found.append((i, lit))
                    i = low.find(lit, i + 1)
            found.sort(key=lambda t: (t[0], -len(t[1])))
            yield from found
            return
        seen = res.context_seen
        search = self._regex(seen).search
        pos = 0
        while True:
            mt = search(low, pos)
            if mt is None:
                return
            q = mt.start()
            pos = q + 1  # literals may overlap: look again from the next byte
            for lit, a, is_ctx in self._at[mt.group()]:
                p = q - a
                if p < 0 or (a and low[p:q] != lit[:a]):
                    continue
                if is_ctx:
                    seen.add(lit.decode("ascii"))  # (rebuilt without it at a later block)
                elif p + len(lit) > skip:
                    yield p, lit

    def _context_by_find(self, low: bytes, skip: int, res: "ScanResult") -> None:
        for c in self.context:  # only whether they occur at all matters
            name = c.decode("ascii")
            if name not in res.context_seen and low.find(c, max(0, skip - len(c) + 1)) >= 0:
                res.context_seen.add(name)

    def scan_text(self, text: str) -> ScanResult:
        return self.scan_stream(io.BytesIO(text.encode("utf-8", "surrogateescape")))

    def scan_stream(self, f: BinaryIO, max_bytes: Optional[int] = None, workers: int = 1) -> ScanResult:
        """Scan a binary stream to its end (or `max_bytes`). With workers > 1, the blocks after the first few MiB are
        scanned by that many forked processes (scan_pool: only from a process with no other thread); same result."""
        from cudadoctor.explain import scan_pool

        res = ScanResult()
        blocks = scan_pool.Blocks(self, res, workers)
        carry = b""
        skip = 0  # leading bytes of this block already scanned (the overlap of a cut line)
        pos_base = 0  # byte offset of this block in the input
        line_base = 0
        read = 0
        try:
            while True:
                want = CHUNK if max_bytes is None else min(CHUNK, max(0, max_bytes - read))
                block = f.read(want) if want else b""
                read += len(block)
                data = carry + block
                if not data:
                    break
                overlap = 0
                if not block:
                    proc, carry = data, b""
                else:
                    nl = data.rfind(b"\n")
                    if nl >= 0 and len(data) - nl - 1 <= MAX_CARRY:
                        proc, carry = data[: nl + 1], data[nl + 1:]
                    elif len(data) > MAX_CARRY:  # inside a very long line: cut it, keep an overlap
                        proc, carry = data, data[-OVERLAP:]
                        overlap = len(carry)
                    else:
                        carry = data
                        continue
                if res.blank and proc[skip:].strip():
                    res.blank = False
                blocks.add(proc, skip, pos_base, line_base)  # searched ASCII-lower-cased; literals are ASCII
                line_base += proc.count(b"\n")
                pos_base += len(proc) - overlap
                skip = overlap
                if not block:
                    break
            blocks.finish()
        except BaseException:
            blocks.abort()
            raise
        res.bytes = read
        res.lines = line_base + (0 if res.blank or proc.endswith(b"\n") else 1)
        return res

    def _scan_block(self, data: bytes, low: bytes, skip: int, pos_base: int, line_base: int,
                    res: ScanResult) -> None:
        n = len(low)
        tries: dict = {}
        done: set = set()  # (literal, line start): one hit per literal per line
        windows: dict = {}  # line start -> decoded line window
        for p, lit in self._occurrences(low, skip, res):
            ls = low.rfind(b"\n", max(0, p - WINDOW), p)
            ls = max(0, p - WINDOW) if ls < 0 else ls + 1
            if (lit, ls) in done:
                continue
            done.add((lit, ls))
            t = tries[lit] = tries.get(lit, 0) + 1
            if t > MAX_TRIES:
                res.truncated_counts = True
                continue
            window = windows.get(ls)
            if window is None:
                le = low.find(b"\n", p, min(n, p + WINDOW))
                le = min(n, p + WINDOW) if le < 0 else le
                window = windows[ls] = data[ls:le].decode("utf-8", "replace")
            for key in self.targets[lit]:
                self._hit(key, window, data, low, ls, p, pos_base, line_base, res)

    def _hit(self, key, window, data, low, ls, p, pos_base, line_base, res) -> None:
        si, pi = key
        sig = self.signatures[si]
        pat = sig.patterns[pi]
        m = None
        if pat.regex is not None:
            m = pat.regex.search(window)
            if m is None:
                return
        res.counts[key] = res.counts.get(key, 0) + 1
        kept = res.hits.setdefault(key, [])
        if len(kept) >= MAX_EVIDENCE:
            return
        line_no = line_base + low.count(b"\n", 0, p) + 1
        if pat.capture is not None and pat.weight == 0:
            # a reading (for a gate) takes every value on the line: a line naming two wheels or two GPUs gives both
            # (in line order, at the literal's byte position)
            for r in pat.capture.finditer(window):
                caps = {k: v.strip() for k, v in r.groupdict().items() if v and v.strip()}
                if caps and len(kept) < MAX_EVIDENCE and not any(h.line_no == line_no and h.captures == caps
                                                                 for h in kept):
                    kept.append(Hit(line_no=line_no, text=_show(window, r.start()), pos=pos_base + p, captures=caps))
            return
        at = len(data[ls:p].decode("utf-8", "replace"))  # the literal's place in the window
        if pat.capture is not None:
            m = pat.capture.search(window) or m
        caps = {k: v.strip() for k, v in (m.groupdict() if m else {}).items() if v and v.strip()}
        kept.append(Hit(
            line_no=line_no,
            text=_show(window, at),
            pos=pos_base + p,
            captures=caps,
            before=data[max(0, ls - BEFORE):ls].decode("utf-8", "replace") if sig.keep_before else "",
        ))


# Bytes of lower-cased logs, most common first (English letters, digits, path and log punctuation).
# A literal is anchored at its rarest byte; a byte not listed counts as rarest of all.
_COMMON = b" etaoinsrlcdhu0123456789m.p_:/-fgybw=v,k()x'[]\"jqz"


def _commonness(ch: int) -> tuple:
    """Sort key: bytes common in logs first (_COMMON order), then the rest by value."""
    i = _COMMON.find(bytes([ch]))
    return (i if i >= 0 else len(_COMMON), ch)


# words so common in GPU logs that a literal must not be anchored on them as its whole suffix ("after upgrading
# the kernel" anchored at its 'k' would stop at every "kernel" of a training log for a Python-level check)
_LOG_WORDS = frozenset(b"kernel device driver memory module system library version python failed errors cudnn "
                       b"nvidia tensor stream thread launch".split())


def _anchor(lit: bytes) -> int:
    """Index of the rarest byte of `lit` that leaves at least 6 bytes from it (a short suffix such
    as 'vice' matches every 'device' in a log, and each match costs a Python-level check) and whose
    suffix is not one of _LOG_WORDS; the earliest of equals."""
    last = max(0, len(lit) - 6)
    rank = [(-_commonness(lit[i])[0], i) for i in range(last + 1) if i == 0 or lit[i:] not in _LOG_WORDS]
    return min(rank)[1]


def _trie_pattern(words: list) -> bytes:
    """One regex matching any of `words` (bytes), built as a trie so the engine never backtracks
    across alternatives: at each position it follows one path of fixed characters."""
    trie: dict = {}
    for w in words:
        d = trie
        for ch in w:
            d = d.setdefault(ch, {})
        d[-1] = {}

    def build(d: dict) -> bytes:
        # the engine tries alternatives in order and each position matches at most one first byte:
        # the bytes most common in logs first, so a position tries few before the one it matches
        alts = [re.escape(bytes([ch])) + build(d[ch]) for ch in sorted((k for k in d if k != -1), key=_commonness)]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        return b"(?:" + body + b")?" if -1 in d else body

    return build(trie)


def _show(window: str, at: int) -> str:
    w = window.replace("\r", " ").replace("\x00", " ")
    if len(w) > SHOW:
        lo = max(0, min(at - SHOW // 3, len(w) - SHOW))
        w = ("…" if lo else "") + w[lo: lo + SHOW] + ("…" if lo + SHOW < len(w) else "")
    return " ".join(w.split())
