"""A read-only SQLite connection with a time limit, row and cell caps, and schema helpers.

Three independent guards keep the file unchanged: the URI opens it with `mode=ro`,
`PRAGMA query_only=ON` refuses any write, and an allowlist authorizer (`policy.py`) refuses
every statement that is not a read. A progress handler stops a statement at its time limit.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from edge_sql.errors import DatabaseError, EdgeSqlError
from edge_sql.tools.identifiers import fold_identifier, unquote_identifier
from edge_sql.tools.policy import ReadOnlyAuthorizer

SQLITE_HEADER = b"SQLite format 3\x00"
DEFAULT_MAX_CELL_CHARS = 500
MAX_VALUE_BYTES = 64 * 1024 * 1024  # no string or blob a query builds may exceed this
_PROGRESS_EVERY_N_OPS = 1000
_AUTO = object()


class QueryError(EdgeSqlError):
    """A statement failed: an SQL error, a refused write, or a time-out."""


@dataclass(frozen=True)
class QueryResult:
    """Column names, the fetched rows, and whether rows were left out by the row cap."""

    columns: list[str]
    rows: list[tuple]
    truncated: bool


@dataclass(frozen=True)
class ForeignKey:
    """`from_table(from_columns)` references `to_table(to_columns)`."""

    from_table: str
    from_columns: tuple[str, ...]
    to_table: str
    to_columns: tuple[str, ...]


def format_seconds(seconds: float) -> str:
    """`5 s`, `0.5 s`: a time limit as the error messages show it."""
    return f"{seconds:g} s"


def _sqlite_uri(path: Path, *, immutable: bool) -> str:
    posix = path.as_posix()
    if not posix.startswith("/"):
        posix = "/" + posix  # Windows drive paths: file:/C:/...
    uri = "file:" + quote(posix, safe="/") + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


def _check_file(path: Path) -> bytes:
    """Reject what is plainly not a SQLite database before SQLite sees it; return the header."""
    if not path.exists():
        raise DatabaseError(f"database file not found: {path}")
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory, not a SQLite database file")
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise DatabaseError(f"cannot read database file {path}: {exc.strerror}") from None
    if not header:
        raise DatabaseError(f"{path} is an empty file (0 bytes), not a SQLite database")
    if not header.startswith(SQLITE_HEADER):
        raise DatabaseError(f"{path} is not a SQLite database (it lacks the SQLite file header)")
    return header


def _is_wal_without_log(path: Path, header: bytes) -> bool:
    """A WAL-mode file whose -wal log is absent: opening it normally would leave -wal/-shm."""
    in_wal_mode = len(header) >= 20 and header[18] == 2 and header[19] == 2
    return in_wal_mode and not Path(str(path) + "-wal").exists()


def _cap_cell(value: Any, max_chars: int) -> Any:
    if isinstance(value, str) and len(value) > max_chars:
        return f"{value[:max_chars]}... [truncated, {len(value)} chars]"
    if isinstance(value, bytes) and len(value) > max_chars:
        return f"<blob, {len(value)} bytes>"
    return value


class ReadOnlyDatabase:
    """One SQLite file opened read-only. Safe to share between threads (statements serialize).

    Raises `DatabaseError` with a one-line message when the file is missing, a directory,
    not SQLite, or has no tables.
    """

    def __init__(self, path: str | Path, *, time_limit_s: float = 5.0) -> None:
        self.path = Path(path).expanduser()
        self.time_limit_s = time_limit_s
        header = _check_file(self.path)
        self._lock = threading.RLock()
        self._authorizer = ReadOnlyAuthorizer()
        self._conn = self._connect(immutable=_is_wal_without_log(self.path, header))
        self._foreign_keys: list[ForeignKey] | None = None
        try:
            self._schema = self._read_schema()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _connect(self, *, immutable: bool) -> sqlite3.Connection:
        uri = _sqlite_uri(self.path.resolve(), immutable=immutable)
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise DatabaseError(f"cannot open database {self.path}: {exc}") from None
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.execute("PRAGMA query_only=ON")
        conn.set_authorizer(self._authorizer)
        return conn

    def _read_schema(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every user table and view, in creation order."""
        try:
            rows = self._conn.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise DatabaseError(f"{self.path} is not a SQLite database ({exc})") from None
            raise DatabaseError(f"cannot read database {self.path}: {exc}") from None
        if not any(kind == "table" for kind, _, _ in rows):
            raise DatabaseError(f"{self.path} has no tables (empty database)")
        return [(kind, name, sql or "") for kind, name, sql in rows]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None

    def __enter__(self) -> ReadOnlyDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Stop the running statement from another thread or a signal handler."""
        if self._conn is not None:
            self._conn.interrupt()

    # -- statements ----------------------------------------------------------------------

    def execute(
        self,
        sql: str,
        *,
        max_rows: int | None,
        time_limit_s: float | None = None,
        max_cell_chars: int | None | object = _AUTO,
        params: Sequence[Any] = (),
    ) -> QueryResult:
        """Run one read-only statement and fetch at most `max_rows` rows.

        `max_rows=None` fetches every row exactly (no cell cap unless one is given): that is
        what scoring uses. Otherwise long cells are cut to `max_cell_chars` (default
        `DEFAULT_MAX_CELL_CHARS`) with a `[truncated, N chars]` marker. Raises `QueryError`.
        """
        if not sql.strip():
            raise QueryError("empty SQL statement")
        if max_cell_chars is _AUTO:
            max_cell_chars = None if max_rows is None else DEFAULT_MAX_CELL_CHARS
        limit = self.time_limit_s if time_limit_s is None else time_limit_s
        with self._lock:
            if self._conn is None:
                raise QueryError("the database is closed")
            deadline = time.monotonic() + limit
            self._authorizer.last_denial = None
            self._conn.set_progress_handler(
                lambda: int(time.monotonic() > deadline), _PROGRESS_EVERY_N_OPS
            )
            cursor = None
            try:
                cursor = self._conn.execute(sql, tuple(params))
                columns = [d[0] for d in cursor.description] if cursor.description else []
                if max_rows is None:
                    rows, truncated = cursor.fetchall(), False
                else:
                    rows = cursor.fetchmany(max_rows + 1)
                    truncated = len(rows) > max_rows
                    rows = rows[:max_rows]
            except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
                raise self._query_error(exc, limit, deadline) from None
            finally:
                if cursor is not None:
                    cursor.close()
                self._conn.set_progress_handler(None, 0)
        if max_cell_chars is not None:
            rows = [tuple(_cap_cell(v, max_cell_chars) for v in row) for row in rows]
        return QueryResult(columns=columns, rows=rows, truncated=truncated)

    def _query_error(self, exc: Exception, limit: float, deadline: float) -> QueryError:
        message = str(exc)
        if message == "interrupted":
            if time.monotonic() >= deadline:
                return QueryError(f"query exceeded the {format_seconds(limit)} time limit")
            return QueryError("query was interrupted")
        if "one statement at a time" in message:
            return QueryError("only one SQL statement is allowed at a time")
        if message.startswith("not authorized") or message == "authorization denied":
            refused = self._authorizer.last_denial or "this statement"
            return QueryError(f"not allowed: the database is read-only ({refused} is refused)")
        if "readonly database" in message:
            return QueryError("not allowed: the database is read-only")
        return QueryError(message)

    # -- schema --------------------------------------------------------------------------

    def table_names(self) -> list[str]:
        """User tables (not views, not sqlite_ internals), in creation order."""
        return [name for kind, name, _ in self._schema if kind == "table"]

    def view_names(self) -> list[str]:
        return [name for kind, name, _ in self._schema if kind == "view"]

    def resolve_table(self, name: str) -> str:
        """The stored name of a table or view, matched as SQLite does (ASCII case-insensitive,
        one layer of quotes allowed). Raises `QueryError("no such table: X")`."""
        wanted = fold_identifier(unquote_identifier(name))
        for _, stored, _ in self._schema:
            if fold_identifier(stored) == wanted:
                return stored
        raise QueryError(f"no such table: {name}")

    def create_statement(self, table: str) -> str:
        """The CREATE TABLE (or CREATE VIEW) statement as stored in the schema."""
        stored = self.resolve_table(table)
        return next(sql for _, name, sql in self._schema if name == stored)

    def column_names(self, table: str) -> list[str]:
        stored = self.resolve_table(table)
        return [row[1] for row in self._pragma("table_info", stored)]

    def resolve_column(self, table: str, column: str) -> str:
        """The stored name of a column (case-insensitive). Raises `QueryError`."""
        wanted = fold_identifier(unquote_identifier(column))
        for stored in self.column_names(table):
            if fold_identifier(stored) == wanted:
                return stored
        raise QueryError(f"no such column: {column} (in table {self.resolve_table(table)})")

    def primary_key(self, table: str) -> list[str]:
        columns = self._pragma("table_info", self.resolve_table(table))
        return [row[1] for row in sorted((c for c in columns if c[5] > 0), key=lambda c: c[5])]

    def _pragma(self, pragma: str, table: str) -> list[tuple]:
        """A schema pragma about one table. (The table-valued `pragma_*()` functions are not
        used: preparing them asks the authorizer for a write to sqlite_master.)"""
        literal = "'" + table.replace("'", "''") + "'"
        return self.execute(f"PRAGMA {pragma}({literal})", max_rows=None).rows

    def foreign_keys(self) -> list[ForeignKey]:
        """Every foreign key of every table (read once, then cached)."""
        if self._foreign_keys is None:
            self._foreign_keys = [fk for t in self.table_names() for fk in self._table_fks(t)]
        return list(self._foreign_keys)

    def _table_fks(self, table: str) -> list[ForeignKey]:
        # SQLite numbers a table's foreign keys last-declared first; list them as declared.
        rows = sorted(self._pragma("foreign_key_list", table), key=lambda r: (-r[0], r[1]))
        grouped: dict[int, list[tuple[str, str, str | None]]] = {}
        for fk_id, _seq, target, source_col, target_col, *_ in rows:
            grouped.setdefault(fk_id, []).append((target, source_col, target_col))
        keys = []
        for parts in grouped.values():
            target = self._known_table_or_same(parts[0][0])
            target_cols = [t for _, _, t in parts]
            if any(c is None for c in target_cols) and target in self.table_names():
                target_cols = self.primary_key(target)  # REFERENCES t without columns
            keys.append(ForeignKey(table, tuple(s for _, s, _ in parts), target,
                                   tuple(c or "?" for c in target_cols)))
        return keys

    def _known_table_or_same(self, name: str) -> str:
        try:
            return self.resolve_table(name)
        except QueryError:
            return name
