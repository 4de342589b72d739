"""User-facing errors: the CLI prints their message as one line and exits non-zero.

Every error a user can cause is an `EdgeSqlError` and is defined here, so callers catch one
family and read structured attributes (`path`, `spec`, ...) instead of parsing messages.
"""

from __future__ import annotations

from pathlib import Path


class EdgeSqlError(Exception):
    """An error caused by the user's input or environment, with a message fit to show them."""


class _PathError(EdgeSqlError):
    """An error about one file or folder; `path` says which (None when there is no single one)."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None


class ConversionError(_PathError):
    """A checkpoint cannot be converted or quantized (`path`: the input or output concerned)."""


class ModelFileError(_PathError):
    """A model file is missing, not a GGUF, or of an architecture edge-sql cannot run (`path`: the file)."""


class SettingsError(_PathError):
    """A settings file (`edge-sql.toml`, `config.toml`) cannot be read, or names an unknown
    setting, a bad value or a profile that no file defines."""


class DatabaseError(_PathError):
    """A database file is missing, not SQLite, or unusable (`path`: the database file)."""


class FileLoadError(DatabaseError):
    """A data file (CSV, TSV, JSON Lines, Excel, Parquet) or folder of them that cannot be loaded into
    SQLite: unreadable, malformed, empty, or needing the `files` extra (`path`: the file or folder)."""


class DatasetError(_PathError):
    """A questions file is missing, not JSON, or not in the expected format (`path`: the file)."""


class PredictionsError(_PathError):
    """A predictions file is missing, not JSON, or does not fit the questions (`path`: the file)."""


class ReportError(_PathError):
    """A report cannot be written where the user asked (`path`: the target)."""


class GrammarError(EdgeSqlError):
    """A grammar that llguidance cannot compile."""


class BudgetError(EdgeSqlError, ValueError):
    """A `Budget` field out of range (`Budget(max_rounds=0)`); a ValueError too, as it was."""


class ClosedError(EdgeSqlError, RuntimeError):
    """A session, its llama.cpp context or an Agent used after `close()`: the one error for all
    three (a RuntimeError too, as the runtime's raised before)."""


class ContextFullError(EdgeSqlError):
    """The tokens to evaluate do not fit in the context window."""


class QueryError(EdgeSqlError):
    """A statement failed: an SQL error, a refused write, or a time-out."""


class TurnParseError(EdgeSqlError):
    """An assistant turn that does not follow the protocol."""


class PromptFileError(EdgeSqlError):
    """A prompt template file that cannot be read or lacks a field or placeholder."""


class RayUnavailableError(EdgeSqlError):
    """`--ray` was asked for but Ray is not installed."""


class HubError(EdgeSqlError):
    """The hub answered, but the download cannot go on (bad revision, server error, broken transfer)."""


class HubUnreachableError(HubError):
    """The hub cannot be reached (no network, DNS failure, offline mode) and the cache cannot stand in."""


class RepoNotFoundError(HubError):
    """The hub has no such repository (or it is private or gated)."""


class ModelNotPulledError(ModelFileError):
    """The model is known but its variant is not in the store (or its file was deleted).

    `name` and `variant` say which; `pull_spec` is what to give `edge-sql pull` to make it;
    `file_missing` is True when the store records the file but it is gone.
    """

    def __init__(self, message: str, *, name: str, pull_spec: str, variant: str, file_missing: bool) -> None:
        super().__init__(message)
        self.name = name
        self.pull_spec = pull_spec
        self.variant = variant
        self.file_missing = file_missing


class BenchSetupError(EdgeSqlError):
    """The bench's inputs (model files, variants, dataset) do not fit together."""


class ImatrixError(_PathError):
    """An importance matrix that cannot be read, collected, or used with a model (`path`: the file)."""


class KnowledgeError(EdgeSqlError):
    """A note, verified answer or knowledge file that is refused (empty, over its bound in tokens,
    SQL that writes or does not run, a file that is not a knowledge export), or no such note."""


class VerifiedExists(KnowledgeError):
    """A question that already has a verified answer with other SQL: replacing it needs the person
    to say so (`notes verify --replace`, `"replace": true`, a confirmation), never silently.
    `answer_id`, `question` and `sql` name the stored answer (HTTP 409).

    >>> VerifiedExists(7, "How many orders?", "SELECT COUNT(*) FROM orders", "pass --replace to replace it").args[0]
    'refused: "How many orders?" already has a verified answer (v7): SELECT COUNT(*) FROM orders; pass --replace to replace it'
    """

    def __init__(self, answer_id: int, question: str, sql: str, hint: str) -> None:
        super().__init__(f'refused: "{question}" already has a verified answer (v{answer_id}): {sql}; {hint}')
        self.answer_id, self.question, self.sql = answer_id, question, sql

    def hinted(self, hint: str) -> VerifiedExists:
        """The same refusal with the way to replace that this surface offers."""
        return VerifiedExists(self.answer_id, self.question, self.sql, hint)


class TeachingRefused(EdgeSqlError):
    """A request to teach (add or remove a note, verify, replace, undo) without the server's teach
    token, where one is set (`serve --teach-token`): HTTP 403, an MCP tool error."""


# ---- serving: what `edge-sql serve` tells its operator and its clients --------------------


class ListenError(EdgeSqlError):
    """The HTTP server cannot listen where the operator asked (port in use, unknown host, no permission)."""


class BadRequest(EdgeSqlError):
    """A request that is malformed, has a wrong field or breaks a limit (HTTP 422, an MCP tool error)."""


class QuestionError(BadRequest, ValueError):
    """A question that cannot be asked: empty, or only spaces (a ValueError too)."""


class RequestTooLarge(BadRequest):
    """A request body over the server's size limit (HTTP 413)."""


class UnknownDatabase(EdgeSqlError):
    """A client named a database the server was not started with."""


class RetryLater(EdgeSqlError):
    """The server (or an Agent's queue of calls waiting for a session) is busy, not broken: `retry_after_s` is a fair guess for trying again (HTTP 503)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueFull(RetryLater):
    """Every place in the queue is taken (serve's, or an Agent's `max_waiting`)."""


class QueueTimeout(RetryLater):
    """The request waited longer than the queue's time limit and was removed without running."""


class Cancelled(EdgeSqlError):
    """The client went away (or cancelled) before its request started."""


class ChartFileError(_PathError):
    """`run --chart FILE` cannot write the chart: the name ends in neither .svg nor .png, or the
    `charts` extra (vl-convert-python) is not installed (`path`: the file asked for)."""


def os_error_message(exc: OSError) -> str:
    """One line for an operating-system error that nothing closer to it explained (a full disk,
    a folder without write permission, a read-only file system): what failed, on which path, and
    what to do, in words rather than a class name."""
    import errno

    reason = exc.strerror or str(exc) or "the operating system refused"
    where = f": {exc.filename}" if exc.filename is not None else ""
    advice = {
        errno.ENOSPC: "; free some space or write somewhere else",
        errno.EDQUOT: "; free some space or write somewhere else",
        errno.EFBIG: "; write somewhere else",
        errno.EACCES: "; check the permissions, or write somewhere else",
        errno.EPERM: "; check the permissions, or write somewhere else",
        errno.EROFS: "; write somewhere else",
    }.get(exc.errno or 0, "")
    return f"{reason[:1].lower()}{reason[1:]}{where}{advice}"
