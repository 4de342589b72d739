"""Checks of an answer's SQL that a user can read: names and values traced and looked up in the
database, the result read for the usual signs of a wrong query, and a confidence with its reasons.

No check writes to the database or runs a model: `check_sql` needs only SQL and a read-only
database; `attach_provenance` adds where an episode showed each name and value.
"""

from edge_sql.checks.checker import check_sql
from edge_sql.checks.findings import CONFIDENCE_LEVELS, Checks, Finding, NameUse, Sighting, ValueCheck
from edge_sql.checks.provenance import attach_provenance

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
