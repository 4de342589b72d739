"""edge-sql: a small text-to-SQL agent that runs offline with llama.cpp.

The public API: `Agent` (load a model once, ask many questions; `Agent.from_config` with the
command line's settings), the `EpisodeResult` it returns, the `Budget` that bounds an episode,
`Ask` (one question of `ask_many`), `check_sql` (the checks of any SQL against a database, no
model needed) with the `Checks` it returns, `list_tables_for` (what `list_tables` shows the model
for a question: ranked when the schema is too big), and every error a caller can meet:
`EdgeSqlError` is the base of them all (docs/usage.md lists when each is raised). All but the
errors are imported on first use, so the CLI starts without loading llama.cpp; type checkers
see them all (the TYPE_CHECKING imports below, and `py.typed`).
"""

from typing import TYPE_CHECKING

from edge_sql.errors import (
    BadRequest,
    BenchSetupError,
    BudgetError,
    Cancelled,
    ChartFileError,
    ClosedError,
    ContextFullError,
    ConversionError,
    DatabaseError,
    DatasetError,
    EdgeSqlError,
    FileLoadError,
    GrammarError,
    HubError,
    HubUnreachableError,
    ImatrixError,
    KnowledgeError,
    ListenError,
    ModelFileError,
    ModelNotPulledError,
    PredictionsError,
    PromptFileError,
    QueryError,
    QuestionError,
    QueueFull,
    QueueTimeout,
    RayUnavailableError,
    RepoNotFoundError,
    ReportError,
    RequestTooLarge,
    RetryLater,
    SettingsError,
    TeachingRefused,
    TurnParseError,
    UnknownDatabase,
    VerifiedExists,
)
from edge_sql.lazy import lazy_exports
from edge_sql.runtime.llama.threads import apply_wait_policy

if TYPE_CHECKING:  # what the lazy `__getattr__` below hands out, for type checkers
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.api import Agent, Ask
    from edge_sql.checks.checker import check_sql
    from edge_sql.checks.findings import Checks
    from edge_sql.tools.schema_view import list_tables_for

# OpenMP's wait, set before llama.cpp's libraries load (libgomp reads it once): a short spin,
# so a busy machine does not stall every decode step (runtime/llama/threads.py says why)
WAIT_POLICY = apply_wait_policy()

__version__ = "0.1.0"
__all__ = [
    "Agent",
    "Ask",
    "BadRequest",
    "BenchSetupError",
    "Budget",
    "BudgetError",
    "Cancelled",
    "ChartFileError",
    "Checks",
    "ClosedError",
    "ContextFullError",
    "ConversionError",
    "DatabaseError",
    "DatasetError",
    "EdgeSqlError",
    "EpisodeResult",
    "FileLoadError",
    "GrammarError",
    "HubError",
    "HubUnreachableError",
    "ImatrixError",
    "KnowledgeError",
    "ListenError",
    "ModelFileError",
    "ModelNotPulledError",
    "PredictionsError",
    "PromptFileError",
    "QueryError",
    "QuestionError",
    "QueueFull",
    "QueueTimeout",
    "RayUnavailableError",
    "RepoNotFoundError",
    "ReportError",
    "RequestTooLarge",
    "RetryLater",
    "SettingsError",
    "TeachingRefused",
    "TurnParseError",
    "UnknownDatabase",
    "VerifiedExists",
    "check_sql",
    "list_tables_for",
]

_LAZY = {
    "Agent": "edge_sql.api",
    "Ask": "edge_sql.api",
    "Budget": "edge_sql.agent.budget",
    "EpisodeResult": "edge_sql.agent.result",
    "Checks": "edge_sql.checks.findings",
    "check_sql": "edge_sql.checks.checker",
    "list_tables_for": "edge_sql.tools.schema_view",
}


__getattr__ = lazy_exports(__name__, _LAZY)  # `edge_sql.Agent` (and the other lazy names), imported on first use


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
