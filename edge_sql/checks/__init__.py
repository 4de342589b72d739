"""Checks of an answer's SQL that a user can read: names and values traced and looked up in the
database, the result read for the usual signs of a wrong query, and a confidence with its reasons.

No check writes to the database or runs a model: `check_sql` needs only SQL and a read-only
database; `attach_provenance` adds where an episode showed each name and value.

Its names are imported on first use (PEP 562): `from edge_sql import Agent` reads the findings'
types without sqlglot (the parser `check_sql` needs), which loads with the first check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sql.lazy import lazy_exports

_EXPORTS = {
    "check_sql": "edge_sql.checks.checker",
    "attach_provenance": "edge_sql.checks.provenance",
    **{
        name: "edge_sql.checks.findings"
        for name in ("CONFIDENCE_LEVELS", "Checks", "Finding", "NameUse", "Sighting", "ValueCheck")
    },
}
__all__ = [
    "CONFIDENCE_LEVELS",
    "Checks",
    "Finding",
    "NameUse",
    "Sighting",
    "ValueCheck",
    "attach_provenance",
    "check_sql",
]

if TYPE_CHECKING:
    from edge_sql.checks.checker import check_sql
    from edge_sql.checks.findings import CONFIDENCE_LEVELS, Checks, Finding, NameUse, Sighting, ValueCheck
    from edge_sql.checks.provenance import attach_provenance

__getattr__ = lazy_exports(__name__, _EXPORTS)
