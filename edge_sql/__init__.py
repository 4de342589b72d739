"""edge-sql: a small text-to-SQL agent that runs offline with llama.cpp.

The public API: `Agent` (load a model once, ask many questions), the `EpisodeResult` it
returns, the `Budget` that bounds an episode, `check_sql` (the checks of any SQL against a
database, no model needed) with the `Checks` it returns, `list_tables_for` (what `list_tables`
shows the model for a question: ranked when the schema is too big), and `EdgeSqlError`, the base of every
error a user can cause (`edge_sql.errors`). All but the error are imported on first use, so the CLI
starts without loading llama.cpp.
"""

from typing import Any

from edge_sql.errors import EdgeSqlError
from edge_sql.runtime.llama.threads import apply_wait_policy

# OpenMP's wait, set before llama.cpp's libraries load (libgomp reads it once): a short spin,
# so a busy machine does not stall every decode step (runtime/llama/threads.py says why)
WAIT_POLICY = apply_wait_policy()

__version__ = "0.1.0"
__all__ = ["Agent", "Budget", "Checks", "EdgeSqlError", "EpisodeResult", "check_sql", "list_tables_for"]

_LAZY = {
    "Agent": "edge_sql.api",
    "Budget": "edge_sql.agent.budget",
    "EpisodeResult": "edge_sql.agent.result",
    "Checks": "edge_sql.checks.findings",
    "check_sql": "edge_sql.checks.checker",
    "list_tables_for": "edge_sql.tools.schema_view",
}


def __getattr__(name: str) -> Any:
    """`edge_sql.Agent` (and the other lazy names), imported on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'edge_sql' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
