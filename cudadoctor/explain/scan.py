"""Find every signature in a text or a stream of bytes, in bounded memory and time.

The input is read in 1 MiB blocks cut at line ends (a line longer than 64 KiB is cut, with an
overlap so no hit is lost at the cut). Each block is searched as bytes, ASCII-lower-cased once:
every literal of every pattern (ASCII by rule) is found with bytes.find (fast, no backtracking, no
decoding, so invalid UTF-8 and binary junk cost nothing). Only the line window around a hit (at
most 2 * WINDOW bytes) is decoded (errors="replace") and given to a pattern's regex, so no regex
ever sees more than a few KB.
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
                context.update(c.encode("ascii") for c in pat.context)
        self.context = sorted(context)
        lits = sorted(self.targets, key=len, reverse=True)
        # a hit on a literal is also a hit on every literal it contains
        self.expand = {lit: [o for o in lits if o in lit] for lit in lits}
        self.rx = re.compile(_trie_pattern(lits)) if lits else None

    def scan_text(self, text: str) -> ScanResult:
        return self.scan_stream(io.BytesIO(text.encode("utf-8", "surrogateescape")))

    def scan_stream(self, f: BinaryIO, max_bytes: Optional[int] = None) -> ScanResult:
        """Scan a binary stream to its end (or `max_bytes`)."""
        res = ScanResult()
        carry = b""
        skip = 0  # leading bytes of this block already scanned (the overlap of a cut line)
        pos_base = 0  # byte offset of this block in the input
        line_base = 0
        read = 0
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
            low = proc.lower()  # ASCII-only lower-casing; literals are ASCII
            self._scan_block(proc, low, skip, pos_base, line_base, res)
            line_base += low.count(b"\n")
            pos_base += len(proc) - overlap
            skip = overlap
            if not block:
                break
        res.bytes = read
        res.lines = line_base + (0 if res.blank or proc.endswith(b"\n") else 1)
        return res

    def _scan_block(self, data: bytes, low: bytes, skip: int, pos_base: int, line_base: int,
                    res: ScanResult) -> None:
        for c in self.context:  # only whether they occur at all matters
            name = c.decode("ascii")
            if name not in res.context_seen and low.find(c, max(0, skip - len(c) + 1)) >= 0:
                res.context_seen.add(name)
        if self.rx is None:
            return
        n = len(low)
        tries: dict = {}
        done: set = set()  # (literal, line start): one hit per literal per line
        search = self.rx.search
        pos = 0
        while True:
            mt = search(low, pos)
            if mt is None:
                break
            p = mt.start()
            pos = p + 1  # literals may overlap: look again from the next byte
            if mt.end() <= skip:
                continue
            ls = low.rfind(b"\n", max(0, p - WINDOW), p)
            ls = max(0, p - WINDOW) if ls < 0 else ls + 1
            le = low.find(b"\n", p, min(n, p + WINDOW))
            le = min(n, p + WINDOW) if le < 0 else le
            window = None
            for lit in self.expand[mt.group()]:
                if (lit, ls) in done:
                    continue
                done.add((lit, ls))
                t = tries[lit] = tries.get(lit, 0) + 1
                if t > MAX_TRIES:
                    res.truncated_counts = True
                    continue
                if window is None:
                    window = data[ls:le].decode("utf-8", "replace")
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
        if pat.capture is not None:
            m = pat.capture.search(window) or m
        caps = {k: v.strip() for k, v in (m.groupdict() if m else {}).items() if v and v.strip()}
        kept.append(Hit(
            line_no=line_base + low.count(b"\n", 0, p) + 1,
            text=_show(window, len(data[ls:p].decode("utf-8", "replace"))),
            pos=pos_base + p,
            captures=caps,
            before=data[max(0, ls - BEFORE):ls].decode("utf-8", "replace") if sig.keep_before else "",
        ))


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
        alts = [re.escape(bytes([ch])) + build(d[ch]) for ch in sorted(k for k in d if k != -1)]
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
