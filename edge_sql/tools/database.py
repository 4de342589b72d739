"""A read-only SQLite database with hard limits on every statement, and schema helpers.

The connection lives in a worker process (sql_worker.py, driven by statement_runner.py): a
statement that overruns its time limit (while compiling, inside one slow function call, or
waiting for another program's lock) is ended by killing that process, and its memory is capped
(RLIMIT_AS and SQLite's hard_heap_limit there), so neither can hang or kill this process.
Four independent guards keep the file unchanged: only one SELECT/WITH/VALUES or PRAGMA
statement runs, the URI opens it with `mode=ro` (or a private copy: db_file.py), `PRAGMA
query_only=ON` refuses any write, and an allowlist authorizer (policy.py) refuses every action
that is not a read, every pragma that is not one of the few that only read included.
"""

from __future__ import annotations

import math
import re
import shutil
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sql.errors import DatabaseError, QueryError
from edge_sql.files import database_file, is_data_source
from edge_sql.tools import db_file
from edge_sql.tools.identifiers import fold_identifier, unquote_identifier
from edge_sql.tools.policy import READ_ONLY_TABLE_FUNCTIONS
from edge_sql.tools.statement_runner import (
    StatementRunner,
    WorkerDied,
    WorkerInterrupted,
    WorkerTimeout,
)

DEFAULT_MAX_CELL_CHARS = 500
MAX_VALUE_BYTES = 64 * 1024 * 1024  # no string or blob a query builds may exceed this
DEFAULT_MEMORY_LIMIT_MB = 1024
READ_STATEMENTS = ("SELECT", "WITH", "VALUES")
# A PRAGMA runs as the model wrote it when the authorizer lists it as a read (the training
# environment ran `PRAGMA table_info(t)` on a read-only connection); every other is refused there.
RUNNABLE_STATEMENTS = (*READ_STATEMENTS, "PRAGMA")
_AUTO = object()
_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z))*", re.S)
_KEYWORD = re.compile(r"[A-Za-z]+")


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


def kill_grace_s(limit: float) -> float:
    """How long past its limit a statement may take before its worker is killed: the worker's
    own progress handler ends ordinary statements at the limit, without a restart."""
    return min(1.0, max(0.1, 0.25 * limit))


def first_keyword(sql: str) -> str | None:
    """The statement's first keyword, upper-cased, after comments; None if there is none."""
    leading = _LEADING.match(sql)
    assert leading is not None  # the pattern matches the empty string too
    rest = sql[leading.end() :]
    if not rest:
        return None
    word = _KEYWORD.match(rest)
    return word.group(0).upper() if word else rest[:1]


def _cleanup(runner: StatementRunner | None, copy_dir: Path | None) -> None:
    if runner is not None:
        runner.close()
    if copy_dir is not None:
        shutil.rmtree(copy_dir, ignore_errors=True)


class ReadOnlyDatabase:
    """One SQLite file opened read-only. Safe to share between threads (statements serialize).

    Raises `DatabaseError` with a one-line message when the file is missing, not a regular
    file, not SQLite, locked, left half-written by a crashed writer, or has no tables.
    `memory_limit_mb` caps what one statement's process may use.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        time_limit_s: float = 5.0,
        memory_limit_mb: float = DEFAULT_MEMORY_LIMIT_MB,
        wal_copy_limit_mb: float = db_file.DEFAULT_WAL_COPY_LIMIT_MB,
    ) -> None:
        self.path = Path(path).expanduser()
        opened = self.path
        if is_data_source(self.path):  # CSV, Parquet, a folder, ...: their SQLite copy in the store
            opened = database_file(self.path)
        self.time_limit_s = _checked_limit(time_limit_s)
        self.memory_limit_mb = memory_limit_mb
        self._lock = threading.RLock()
        self._runner: StatementRunner | None = None
        target = db_file.prepare(opened, wal_copy_limit_mb=wal_copy_limit_mb)
        self._real_path = target.real_path
        self._runner = StatementRunner(target.uri, memory_limit_bytes=int(memory_limit_mb * 1024 * 1024))
        self._finalizer = weakref.finalize(self, _cleanup, self._runner, target.copy_dir)
        self._foreign_keys: list[ForeignKey] | None = None
        try:
            self._schema = self._read_schema()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _read_schema(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every user table and view, in creation order."""
        sql = (
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        )
        try:
            rows = self._run(sql, (), None, None, self.time_limit_s).rows
        except QueryError as exc:
            message = str(exc)
            if "not a database" in message:
                raise DatabaseError(f"{self.path} is not a SQLite database ({message})") from None
            if message.startswith(("the database ", "cannot open")):
                raise DatabaseError(message) from None
            raise DatabaseError(f"cannot read database {self.path}: {message}") from None
        if not any(kind == "table" for kind, _, _ in rows):
            raise DatabaseError(f"{self.path} has no tables (empty database)")
        return [(kind, name, sql or "") for kind, name, sql in rows]

    def close(self) -> None:
        """Stop the worker and remove any private copy (idempotent)."""
        self._runner = None
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> ReadOnlyDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Stop the running statement at once, from another thread or a signal handler."""
        runner = self._runner
        if runner is not None:
            runner.interrupt()

    # -- statements ----------------------------------------------------------------------

    def execute(
        self,
        sql: str,
        *,
        max_rows: int | None,
        time_limit_s: float | None = None,
        max_cell_chars: int | object | None = _AUTO,
        params: Sequence[Any] = (),  # Any: sqlite3 (bound parameters)
    ) -> QueryResult:
        """Run one read-only statement and fetch at most `max_rows` rows.

        Only a single SELECT, WITH or VALUES statement runs, or a PRAGMA that only reads the
        schema or the file's header (policy.py), with the rows `sqlite3` gives for it.
        `max_rows=None` fetches every row exactly (no cell cap unless one is given): that is
        what scoring uses. Otherwise long cells are cut to `max_cell_chars` (default
        `DEFAULT_MAX_CELL_CHARS`) with a `[truncated, N chars]` marker. Raises `QueryError`.
        """
        if not isinstance(sql, str):
            raise QueryError(f"the SQL must be text, not {type(sql).__name__}")
        if not sql.strip():
            raise QueryError("empty SQL statement")
        if max_cell_chars is _AUTO:
            max_cell_chars = None if max_rows is None else DEFAULT_MAX_CELL_CHARS
        limit = self.time_limit_s if time_limit_s is None else _checked_limit(time_limit_s)
        keyword = first_keyword(sql)
        if keyword is None:
            raise QueryError("the SQL is only a comment; send one SELECT statement")
        if keyword not in RUNNABLE_STATEMENTS:
            self._refuse(sql, keyword, params, limit)
        return self._run(sql, tuple(params), max_rows, max_cell_chars, limit)

    def _refuse(self, sql: str, keyword: str, params: Sequence[Any], limit: float) -> None:  # Any: sqlite3
        """Raise for a statement that is not a read: the policy's own reason when it has one
        (compiling with EXPLAIN runs nothing), else that only reads may run."""
        if keyword != "EXPLAIN":
            self._run("EXPLAIN " + sql, tuple(params), 0, None, limit)
        raise QueryError(
            f"not allowed: the database is read-only, and only a single SELECT, WITH or VALUES "
            f"statement can run (this one starts with {keyword})"
        )

    def _run(self, sql: str, params: tuple, max_rows: int | None, max_cell_chars: object, limit: float) -> QueryResult:
        with self._lock:
            runner = self._runner
            if runner is None:
                raise QueryError("the database is closed")
            request = ("exec", sql, params, max_rows, max_cell_chars, limit)
            try:
                reply = runner.request(request, limit + kill_grace_s(limit))
            except ValueError:
                raise QueryError("query parameters must be numbers, text, bytes or None") from None
            except WorkerTimeout:
                raise QueryError(f"query exceeded the {format_seconds(limit)} time limit") from None
            except WorkerInterrupted:
                raise QueryError("query was interrupted") from None
            except WorkerDied:
                raise QueryError(
                    f"the query crashed the SQL process (most likely it needed more than the "
                    f"{self.memory_limit_mb:g} MB memory limit); the database was reopened"
                ) from None
        if reply[0] == "ok":
            _, columns, rows, truncated = reply
            return QueryResult(columns=list(columns), rows=[tuple(r) for r in rows], truncated=bool(truncated))
        raise self._query_error(reply, limit)

    def _query_error(self, reply: tuple, limit: float) -> QueryError:
        kind, message = reply[1], reply[2]
        denial = reply[3] if len(reply) > 3 else ""
        if kind == "open":
            return QueryError(f"cannot open database {self.path}: {message}")
        if kind == "timeout":
            return QueryError(f"query exceeded the {format_seconds(limit)} time limit")
        if kind == "memory" or message == "out of memory":
            return QueryError(f"the query ran out of memory (the limit is {self.memory_limit_mb:g} MB)")
        if message == "interrupted":
            return QueryError("query was interrupted")
        if "one statement at a time" in message:
            return QueryError("only one SQL statement is allowed at a time")
        if message.startswith("not authorized") or message == "authorization denied":
            refused = denial or "this statement"
            return QueryError(f"not allowed: the database is read-only ({refused} is refused)")
        if message.startswith("access to ") and message.endswith(" is prohibited"):
            allowed = ", ".join(sorted(READ_ONLY_TABLE_FUNCTIONS))
            return QueryError(
                f"not allowed: {denial or 'reading this table'} is refused (the table-valued "
                f"functions that may be read: {allowed})"
            )
        if "database is locked" in message or "database table is locked" in message:
            return QueryError(
                f"the database is locked by another program (waited {format_seconds(limit)}); "
                f"try again when that program has finished writing to it"
            )
        if "readonly database" in message:
            journal = db_file.journal_path(self._real_path)
            if journal.exists():
                return QueryError(
                    f"the database {self.path} has a leftover rollback journal ({journal.name}): "
                    f"a program writing to it crashed before finishing. Open it once with a "
                    f'program that can write to it (for example `sqlite3 {self.path} "PRAGMA '
                    f'integrity_check"`), which undoes the unfinished change, then try again'
                )
            return QueryError("not allowed: the database is read-only")
        if message.startswith("Incorrect number of bindings"):
            return QueryError(
                "the SQL has a parameter placeholder (?, :name or $name) but no value is given "
                "for it; write the values into the SQL"
            )
        if "string or blob too big" in message:
            return QueryError(
                f"a value in the query grew past the {MAX_VALUE_BYTES // (1024 * 1024)} MB "
                f"limit (string or blob too big)"
            )
        return QueryError(message)

    # -- schema --------------------------------------------------------------------------

    def table_names(self) -> list[str]:
        """User tables (not views, not sqlite_ internals), in creation order."""
        return [name for kind, name, _ in self._schema if kind == "table"]

    def schema_entries(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every user table and view, in creation order (read at opening)."""
        return list(self._schema)

    def view_names(self) -> list[str]:
        return [name for kind, name, _ in self._schema if kind == "view"]

    def resolve_table(self, name: str) -> str:
        """The stored name of a table or view, matched as SQLite does (ASCII case-insensitive,
        one layer of quotes allowed). Raises `QueryError("no such table: X")`."""
        wanted = fold_identifier(unquote_identifier(name))
        for _, stored, _ in self._schema:
            if fold_identifier(stored) == wanted:
                return stored
        raise QueryError(f"no such table: {_shown(name)}")

    def create_statement(self, table: str) -> str:
        """The CREATE TABLE (or CREATE VIEW) statement as stored in the schema."""
        stored = self.resolve_table(table)
        return next(sql for _, name, sql in self._schema if name == stored)

    def column_names(self, table: str) -> list[str]:
        stored = self.resolve_table(table)
        return [row[1] for row in self._pragma("table_info", stored)]

    def table_info(self, table: str) -> list[tuple]:
        """`PRAGMA table_info` rows of a table or view: (cid, name, type, notnull, default, pk)."""
        return self._pragma("table_info", self.resolve_table(table))

    def resolve_column(self, table: str, column: str) -> str:
        """The stored name of a column (case-insensitive). Raises `QueryError`."""
        wanted = fold_identifier(unquote_identifier(column))
        for stored in self.column_names(table):
            if fold_identifier(stored) == wanted:
                return stored
        raise QueryError(f"no such column: {_shown(column)} (in table {self.resolve_table(table)})")

    def primary_key(self, table: str) -> list[str]:
        columns = self._pragma("table_info", self.resolve_table(table))
        return [row[1] for row in sorted((c for c in columns if c[5] > 0), key=lambda c: c[5])]

    def _pragma(self, pragma: str, table: str) -> list[tuple]:
        """A schema pragma about one table. (The table-valued `pragma_*()` functions are not
        used: preparing them asks the authorizer for a write to sqlite_master.)"""
        literal = "'" + table.replace("'", "''") + "'"
        return self._run(f"PRAGMA {pragma}({literal})", (), None, None, self.time_limit_s).rows

    def foreign_keys(self) -> list[ForeignKey]:
        """Every foreign key of every table (read once, then cached)."""
        if self._foreign_keys is None:
            self._foreign_keys = [fk for t in self.table_names() for fk in self._table_fks(t)]
        return list(self._foreign_keys)

    def table_foreign_keys(self, table: str) -> list[ForeignKey]:
        """The foreign keys of one table (a stored name), without reading every table's."""
        return self._table_fks(table)

    def _table_fks(self, table: str) -> list[ForeignKey]:
        # SQLite numbers a table's foreign keys last-declared first; list them as declared.
        rows = sorted(self._pragma("foreign_key_list", table), key=lambda r: (-r[0], r[1]))
        grouped: dict[int, list[tuple[str, str, str | None]]] = {}
        for fk_id, _seq, target, source_col, target_col, *_ in rows:
            grouped.setdefault(fk_id, []).append((target, source_col, target_col))
        keys = []
        for parts in grouped.values():
            target = self._known_table_or_same(parts[0][0])
            target_cols: Sequence[str | None] = [t for _, _, t in parts]
            if any(c is None for c in target_cols) and target in self.table_names():
                target_cols = self.primary_key(target)  # REFERENCES t without columns
            keys.append(ForeignKey(table, tuple(s for _, s, _ in parts), target, tuple(c or "?" for c in target_cols)))
        return keys

    def _known_table_or_same(self, name: str) -> str:
        try:
            return self.resolve_table(name)
        except QueryError:
            return name


def _checked_limit(seconds: Any) -> float:  # Any: caller (checked here)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise QueryError(f"a time limit must be a number of seconds, not {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise QueryError(f"a time limit must be a positive number of seconds, not {seconds!r}")
    return float(seconds)


def _shown(name: str, limit: int = 100) -> str:
    """A name as an error message echoes it: a long one is cut, with its length."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name)} characters)"


@contextmanager
def opened(db: str | Path | ReadOnlyDatabase) -> Iterator[ReadOnlyDatabase]:
    """`db` open read-only: a path is opened here and closed after; an open database is used as is."""
    if isinstance(db, ReadOnlyDatabase):
        yield db
        return
    with ReadOnlyDatabase(db) as database:
        yield database
