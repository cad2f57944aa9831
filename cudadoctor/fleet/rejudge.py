"""Reports made by an older cudadoctor, judged again with this version's checks.

Fleets keep reports for months: a report saved by 0.1.0 carries 0.1.0's verdicts, some of them since
corrected (a torch probe that died in the op was "torch sees CUDA: fail"). Its facts are what the node
was; today's checks judge them again, for the steps the report was made with. A report from this or a
newer version keeps its own verdicts (a newer one may have steps this version does not know).
"""

from __future__ import annotations

from typing import Optional


def older_than_this(report: dict) -> Optional[str]:
    """The report's tool version when an older cudadoctor made it (an older tool version, or an older 1.x
    schema: 0.1.0 wrote 1.0), else None."""
    from packaging.version import InvalidVersion, Version

    from cudadoctor import __version__
    from cudadoctor.model import SCHEMA_VERSION

    saved = str(report.get("tool_version") or "")
    try:
        older_tool = bool(saved) and Version(saved) < Version(__version__)
    except InvalidVersion:
        older_tool = False
    try:
        older_schema = Version(str(report.get("schema_version") or "")) < Version(SCHEMA_VERSION)
    except InvalidVersion:
        older_schema = False
    return (saved or "?") if older_tool or older_schema else None


def rejudge(report: dict) -> dict:
    """The report with this version's steps and exit code for its saved facts (a new dict). When nothing can
    be judged again (none of its steps exists any more) or judging fails, the report as it was."""
    from cudadoctor.doctor import judge_saved
    from cudadoctor.facts.saved import facts_from_report

    asked = [s.get("id") for s in report.get("steps") or [] if isinstance(s, dict) and isinstance(s.get("id"), str)]
    try:
        from cudadoctor.checks.registry import load_all

        known = load_all()
        asked = [i for i in asked if i in known]
        if not asked:
            return report
        steps, code = judge_saved(facts_from_report(report), asked)
    except Exception:  # noqa: BLE001 - a report this version cannot judge keeps its own verdicts
        return report
    out = dict(report)
    out["steps"] = [s.to_dict() for s in steps]
    out["exit_code"] = code
    return out
