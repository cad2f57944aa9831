"""JSON Schemas of what cudadoctor prints. `report-1.json` describes `check --json` (schema_version 1.x)."""

from __future__ import annotations

import json
from pathlib import Path

REPORT_SCHEMA_FILE = Path(__file__).with_name("report-1.json")


def report_schema() -> dict:
    """The report's JSON Schema (draft 2020-12), as shipped in the package."""
    return json.loads(REPORT_SCHEMA_FILE.read_text(encoding="utf-8"))
