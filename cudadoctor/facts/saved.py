"""Facts from a saved report (`check --json`), read with today's meaning, for `check --facts` and the fleet.

Reports of every 1.x schema load: unknown keys are ignored and missing ones take their defaults
(model.from_jsonable). On top of that, what older versions recorded differently is brought to
today's form here, so today's checks judge an old report as they would judge the same machine now:

- 0.1.0's torch fact was FAILED (or TIMEOUT) as a whole when the probe died after torch had answered
  is_available(); today the stages it finished stand and the death belongs to the stage it was in.

A fact an old report does not have at all is "not in saved report" (FactState.NOT_APPLICABLE), never a
crash: the step that needs it says so.
"""

from __future__ import annotations

from cudadoctor.facts.registry import closure, facts_from_dict, load_all
from cudadoctor.facts.torch import kind_from_text, settle
from cudadoctor.model import Fact

NOT_SAVED = "not in saved report"


def upgrade(facts: dict) -> dict:
    """Saved facts brought to today's form (see the module's docstring); a new dict."""
    out = dict(facts)
    t = out.get("torch")
    if t is not None:
        out["torch"] = settle(t, kind_from_text(t.state, t.error))
    return out


def facts_from_report(raw: dict) -> dict:
    """Typed, upgraded facts of a parsed report (its "facts" object)."""
    load_all()
    return upgrade(facts_from_dict(raw.get("facts") if isinstance(raw.get("facts"), dict) else {}))


def not_saved(name: str) -> Fact:
    return Fact.not_applicable(name, NOT_SAVED)


def with_not_saved(given: dict, names) -> dict:
    """The saved facts, plus "not in saved report" for every fact `names` need (with what they need) that the
    report lacks (an older cudadoctor did not gather it); a new dict."""
    out = dict(given)
    for name in closure(names):
        out.setdefault(name, not_saved(name))
    return out
