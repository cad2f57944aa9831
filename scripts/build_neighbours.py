"""Build cudadoctor/explain/neighbours.jsonl from every labelled set of real reports under tests/data.

    python scripts/build_neighbours.py          # write the index
    python scripts/build_neighbours.py --check  # exit 1 when the index is not what the sets give (a test runs this)

One line per report: its cause id, the set it comes from, its thread, and the sorted words of its text (explain's
tokeniser; no text is kept). The review sets (tests/data/explain_review: cases written to test patterns) and the expert
answers (explain_oracle) are not real reports with a settled cause, and stay out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cudadoctor.explain import neighbours  # noqa: E402
from explain_sets import DATA, cases  # noqa: E402

SKIP = {"explain_review", "explain_oracle"}


def rows() -> list:
    out = []
    for d in sorted(p for p in DATA.glob("explain_*") if p.is_dir() and p.name not in SKIP):
        for c in cases(d):
            out.append({"id": c["id"], "set": d.name, "url": c.get("url", ""), "words": sorted(neighbours.words(c["text"]))})
    return out


def render(rs: list) -> str:
    return "".join(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n" for r in rs)


def main(argv: list) -> int:
    text = render(rows())
    if "--check" in argv:
        ok = neighbours.INDEX.is_file() and neighbours.INDEX.read_text(encoding="utf-8") == text
        print("neighbours.jsonl is current" if ok else "neighbours.jsonl is stale: run python scripts/build_neighbours.py")
        return 0 if ok else 1
    neighbours.INDEX.write_text(text, encoding="utf-8")
    print(f"wrote {neighbours.INDEX} ({text.count(chr(10))} reports)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
