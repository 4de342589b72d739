"""The knowledge database's file (`KnowledgeFile`, the base of `Knowledge`): notes and verified
answers per database, in edge-sql's own SQLite file; `notes.py` and `verified.py` hold their
calls, `store.py` puts them together.

It lives in the model store (`$EDGE_SQL_HOME/knowledge.sqlite`), never in or beside the user's
database. WAL journal, synchronous writes, and one transaction per change: a process killed while
writing leaves the change whole or absent, and several processes (a REPL and a server) may write at
once (each waits its turn, `BUSY_TIMEOUT_S`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from edge_sql.errors import ClosedError, KnowledgeError
from edge_sql.knowledge import changes, retrieval
from edge_sql.knowledge.evidence import TokenCounter, utf8_bytes
from edge_sql.knowledge.seen import Seen
from edge_sql.tools import ReadOnlyDatabase, opened

Db = str | Path | ReadOnlyDatabase
"""What the calls take for the user's database, as `Agent.ask` does: a path (opened read-only
for the call) or an open database."""

FILE_NAME = "knowledge.sqlite"
BUSY_TIMEOUT_S = 30.0
# PRAGMA user_version: the format of this file. Still 1 with the history and the stale marks
# (issue 61): they only add a table and columns that an older edge-sql ignores, so it reads and
# writes the same file safely; a change an older one cannot read raises it.
SCHEMA_VERSION = 1
_ADDED_COLUMNS = (
    ("verified", "broken", "TEXT"),  # why its SQL no longer holds, when it was last found so (holds.py)
    ("verified", "absent", "TEXT"),  # JSON: the values its checks did not find when it was verified
)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schemas (identity TEXT PRIMARY KEY, tables TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
    "text TEXT NOT NULL, question TEXT, tables TEXT NOT NULL, created TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS verified (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
    "question TEXT NOT NULL, normalised TEXT NOT NULL, evidence TEXT, sql TEXT NOT NULL, tables TEXT NOT NULL, "
    "verified_at TEXT NOT NULL, follows TEXT)",
    "CREATE INDEX IF NOT EXISTS verified_by_question ON verified (normalised)",
    *changes.SCHEMA,
)


class KnowledgeFile:
    """The SQLite file of notes and verified answers for any number of databases.

    `count_tokens` measures hints against their bound: the model's tokenizer when an Agent opens it,
    else UTF-8 bytes (an upper bound for a byte-level BPE). Safe to share between threads. Every
    call after `close` raises ClosedError (`closed_message` says what was closed).
    """

    closed_message = "this knowledge database is closed"

    def __init__(self, path: Path, *, count_tokens: TokenCounter | None = None) -> None:
        self.path = path
        self.count_tokens: TokenCounter = count_tokens or utf8_bytes
        self._lock = threading.RLock()
        self._closed = False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            self._prepare()
        except (sqlite3.Error, OSError) as exc:
            if getattr(self, "_conn", None) is not None:
                self._conn.close()
            raise KnowledgeError(
                f"cannot open the knowledge database {path}: {exc} (ask with knowledge off, or set EDGE_SQL_HOME)"
            ) from None

    def _prepare(self) -> None:
        """WAL, synchronous commits, and the tables (created, or checked to be this format)."""
        path = self.path
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        with self.writing() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise KnowledgeError(
                    f"{path} was written by a newer edge-sql (knowledge format {version}; this one reads "
                    f"{SCHEMA_VERSION}): upgrade edge-sql, or set EDGE_SQL_HOME to another store"
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            for table, column, kind in _ADDED_COLUMNS:  # a file written before them gets them, empty
                if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            retrieval.create_index(conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the file (idempotent); every call after raises ClosedError."""
        with self._lock:
            self._closed = True
            self._conn.close()

    def connection(self) -> sqlite3.Connection:
        """The open connection (hold `_lock`); ClosedError once closed."""
        if self._closed:
            raise ClosedError(self.closed_message)
        return self._conn

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: it waits for other writers, then holds the lock)."""
        with self._lock:
            conn = self.connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def removing(
        self, db: Db, kind: changes.Kind, row_id: int, missing: str, surface: changes.Surface
    ) -> Iterator[tuple[sqlite3.Connection, dict[str, Any]]]:  # Any: sqlite3
        """One removal of a note or verified answer of `db`, in one write transaction: yields the
        connection and the old row (the caller deletes it), then records it in the history.
        KnowledgeError(`missing`, its `{db}` the database's name) when `db` has no such row."""
        with opened(db) as database:
            seen = Seen.of(database)
        with self.writing() as conn:
            old = changes.old_row(conn, kind, row_id)
            if old is None or (seen.path != old["path"] and seen.identity != old["identity"]):
                raise KnowledgeError(missing.format(db=Path(seen.path).name))
            yield conn, old
            changes.record(conn, seen, surface, "removed", kind, question=old["question"], old=old)

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:  # Any: sqlite3
        """The rows of one read (for the store's own modules: changes.py, transfer.py)."""
        with self._lock:
            return self.connection().execute(sql, params).fetchall()

    def _remember(self, conn: sqlite3.Connection, seen: Seen) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO schemas (identity, tables) VALUES (?, ?)", (seen.identity, json.dumps(seen.tables))
        )
