"""The JSON report: `Report.to_dict()` (versioned schema), scrubbed of secrets."""

from __future__ import annotations

import json

from cudadoctor.redact import Redactor


def scrub_tree(value, scrub):
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(k)): scrub_tree(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_tree(v, scrub) for v in value]
    return value


def render_json(report, env, hide_identity: bool = False, user: str = "", host: str = "") -> str:
    scrub = Redactor(env, hide_identity=hide_identity, user=user, host=host)
    return json.dumps(scrub_tree(report.to_dict(), scrub), indent=2, ensure_ascii=False)
