"""Plain-text and JSON output of explain (no rich: explain starts fast)."""

from __future__ import annotations

import textwrap

SCHEMA = "cudadoctor-explain/1"


def match_dict(m, personal=None) -> dict:
    s = m.signature
    return {
        "id": s.id,
        "title": s.title,
        "confidence": m.confidence,
        "priority": s.priority,
        "layer": s.layer,
        "count": m.count,
        "evidence": [{"line": h.line_no, "text": h.text} for h in m.evidence],
        "captures": dict(m.captures),
        "meaning": s.meaning,
        "causes": list(m.causes),
        "confirm": list(s.confirm),
        "fixes": list(m.fixes),
        "docs": list(s.docs),
        "related_checks": list(s.related_checks),
        "on_this_machine": list(personal.notes) if personal else [],
        "commands": list(personal.commands) if personal else [],
    }


NEXT_STEP = "cudadoctor check"  # what to run when the text alone does not pin the cause


def low_confidence(matches: list) -> bool:
    """No match is strong: the answer is a guess and says so."""
    return not any(m.strong for m in matches)


def result_dict(matches: list, personals: dict, scan, closest: list, facts_used: list, offline: bool) -> dict:
    low = low_confidence(matches)
    return {
        "schema": SCHEMA,
        "matches": [match_dict(m, personals.get(m.id)) for m in matches],
        # guesses (a model of labelled reports, shared words) when no match is strong (score = their low confidence)
        "closest": [{"id": s.id, "title": s.title, "score": score, "confidence": score, "fix": s.fixes[0]}
                    for score, s in closest],
        "low_confidence": low,
        "next_step": NEXT_STEP if low else None,
        "input": {"bytes": scan.bytes, "lines": scan.lines, "counts_are_lower_bounds": scan.truncated_counts},
        "facts_used": facts_used,
        "offline": offline,
    }


def _wrap(text: str, indent: str) -> str:
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def text_report(matches: list, personals: dict, closest: list, scan, offline: bool, brief_after: int = 1) -> str:
    more = "+" if getattr(scan, "truncated_counts", False) else ""
    out = []
    if not matches:
        out.append("cudadoctor explain: not recognised: no known CUDA error signature in this text "
                   f"({scan.lines} line(s), {scan.bytes} bytes).")
        out.extend(_guesses(closest, "Closest causes (low confidence: guessed from the words and by a model of labelled real reports, not matched):"))
        out.append(f"Next step: run `{NEXT_STEP}` on the machine that failed: it tests each layer and names the "
                   "broken one.")
        out.append("See every signature with: cudadoctor explain --list")
        return "\n".join(out) + "\n"
    n = len(matches)
    out.append(f"cudadoctor explain: {n} known signature{'s' if n != 1 else ''} found, most likely cause first.")
    if low_confidence(matches):
        out.append(f"Low confidence: no match is strong. Next step: run `{NEXT_STEP}` on the machine that failed.")
    for i, m in enumerate(matches, 1):
        s = m.signature
        p = personals.get(m.id)
        out.append("")
        out.append(f"{i}. {s.title}  [{s.id}, confidence {m.confidence:.2f}]")
        for h in m.evidence[:2]:
            out.append(f"   seen at line {h.line_no}: {h.text}")
        if m.count > len(m.evidence):
            out.append(f"   ({m.count}{more} matching lines in all)")
        if i > brief_after:
            out.append(_wrap(s.meaning, "   "))
            if p and p.notes:
                out.append("   details: " + "; ".join(p.notes))
            if p and p.commands:
                out.append(f"   fix: {p.commands[0]}")
            else:
                out.append(f"   fix: {m.fixes[0]}")
            continue
        out.append("   What it means:")
        out.append(_wrap(s.meaning, "     "))
        if p and p.notes:
            out.append("   From the message:" if offline else "   From the message and this machine:")
            out.extend(_wrap(f"- {x}", "     ") for x in p.notes)
        elif not offline:
            out.append("   On this machine: nothing more could be learnt (the facts it needs did not answer).")
        out.append("   Likely causes, most likely first:")
        out.extend(_wrap(f"{k}. {c}", "     ") for k, c in enumerate(m.causes, 1))
        out.append("   Confirm with:")
        out.extend(f"     $ {c}" for c in s.confirm)
        out.append("   Fix:")
        if p and p.commands:
            out.extend(f"     $ {c}" for c in p.commands)
        out.extend(_wrap(f"- {f}", "     ") for f in m.fixes if not covered(f, p.commands if p else []))
        if s.docs:
            out.append("   Docs: " + " ".join(s.docs))
        if s.related_checks:
            out.append("   Related checks: " + ", ".join(s.related_checks) + "  (cudadoctor check)")
    if closest:
        out.append("")
        out.extend(_guesses(closest, "Other possible causes (low confidence):"))
    return "\n".join(out) + "\n"


def covered(fix: str, commands: list) -> bool:
    """A generic fix whose example ('e.g. TORCH_CUDA_ARCH_LIST="8.6" pip ...') a personalised command already
    gives with this machine's values: shown after it, the generic example would contradict it."""
    example = fix.partition("e.g. ")[2].split()
    if not example or not commands:
        return False
    key = example[0].split("=")[0] + "=" if "=" in example[0] else example[0]
    return any(c.split()[0].startswith(key) if key.endswith("=") else c.split()[0] == key
               for c in commands if c.split())


def _guesses(closest: list, head: str) -> list:
    if not closest:
        return []
    out = [head]
    for score, s in closest:
        out.append(f"  - {s.title}  [{s.id}, confidence {score:.2f}]")
        out.append(_wrap(f"fix: {s.fixes[0]}", "      "))
    return out


def list_text(signatures: tuple) -> str:
    rows = sorted(signatures, key=lambda s: (-s.priority, s.id))
    w = max(len(s.id) for s in rows)
    lines = [f"{'id'.ljust(w)}  prio  layer          title"]
    lines += [f"{s.id.ljust(w)}  {s.priority:>4}  {s.layer:<13}  {s.title}" for s in rows]
    return "\n".join(lines) + "\n"


def list_dict(signatures: tuple) -> dict:
    return {"schema": SCHEMA, "signatures": [
        {"id": s.id, "title": s.title, "priority": s.priority, "layer": s.layer,
         "facts": list(s.facts), "related_checks": list(s.related_checks)}
        for s in sorted(signatures, key=lambda s: (-s.priority, s.id))]}
