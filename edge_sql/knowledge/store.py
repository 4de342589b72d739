"""The knowledge database: notes and verified answers per database, in edge-sql's own SQLite file.

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
from typing import Any

from edge_sql.agent.given import Note, VerifiedAnswer
from edge_sql.errors import KnowledgeError
from edge_sql.knowledge import retrieval
from edge_sql.knowledge.evidence import (
    EXAMPLES_PER_QUESTION,
    TokenCounter,
    check_item,
    example_hint,
    utf8_bytes,
)
from edge_sql.knowledge.identity import normalise_question, tables_named, words
from edge_sql.knowledge.seen import Seen, check_read_only, now
from edge_sql.tools import ReadOnlyDatabase

FILE_NAME = "knowledge.sqlite"
BUSY_TIMEOUT_S = 30.0
SCHEMA_VERSION = 1  # PRAGMA user_version: the format of this file
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schemas (identity TEXT PRIMARY KEY, tables TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
    "text TEXT NOT NULL, question TEXT, tables TEXT NOT NULL, created TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS verified (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
    "question TEXT NOT NULL, normalised TEXT NOT NULL, evidence TEXT, sql TEXT NOT NULL, tables TEXT NOT NULL, "
    "verified_at TEXT NOT NULL, follows TEXT)",
    "CREATE INDEX IF NOT EXISTS verified_by_question ON verified (normalised)",
)


class Knowledge:
    """Notes and verified answers for any number of databases, in one SQLite file.

    `count_tokens` measures hints against their bound: the model's tokenizer when an Agent opens it,
    else UTF-8 bytes (an upper bound for a byte-level BPE). Safe to share between threads.
    """

    def __init__(self, path: Path, *, count_tokens: TokenCounter | None = None) -> None:
        self.path = path
        self.count_tokens: TokenCounter = count_tokens or utf8_bytes
        self._lock = threading.RLock()
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
            retrieval.create_index(conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @classmethod
    def open(cls, home: Path | None = None, *, count_tokens: TokenCounter | None = None) -> Knowledge:
        """The knowledge database in `home` (default: the model store, `$EDGE_SQL_HOME`)."""
        if home is None:
            from edge_sql.store.home import store_root

            home = store_root()
        return cls(Path(home) / FILE_NAME, count_tokens=count_tokens)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Knowledge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: it waits for other writers, then holds the lock)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _remember(self, conn: sqlite3.Connection, seen: Seen) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO schemas (identity, tables) VALUES (?, ?)", (seen.identity, json.dumps(seen.tables))
        )

    # ---- notes -------------------------------------------------------------------------

    def add_note(self, db: ReadOnlyDatabase, text: str, *, question: str | None = None) -> Note:
        """Store a note about `db`; with `question`, a note given only to questions with those words."""
        text = (text or "").strip()
        if not text:
            raise KnowledgeError("empty note: write what the model should know, e.g. 'amounts are in cents'")
        tie = question.strip() if question and question.strip() else None
        if question is not None and tie is None:
            raise KnowledgeError("empty question for a tied note: give the words it applies to, or none")
        check_item("the note", text, self.count_tokens)
        seen = Seen.of(db)
        created = now()
        with self.writing() as conn:
            self._remember(conn, seen)
            cursor = conn.execute(
                "INSERT INTO notes (identity, path, text, question, tables, created) VALUES (?, ?, ?, ?, ?, ?)",
                (seen.identity, seen.path, text, tie, json.dumps(tables_named(text, seen.tables)), created),
            )
        assert cursor.lastrowid is not None
        return Note(cursor.lastrowid, text, tie, created)

    def notes(self, db: ReadOnlyDatabase) -> list[Note]:
        """Every note of `db` (its schema identity or its file), oldest first, stale ones flagged."""
        return self._notes(Seen.of(db))

    def _notes(self, seen: Seen) -> list[Note]:
        rows = self._rows(
            "SELECT id, text, question, created, tables FROM notes WHERE identity = ? OR path = ? ORDER BY id",
            (seen.identity, seen.path),
        )
        return [Note(i, text, tie, created, seen.stale(json.loads(named))) for i, text, tie, created, named in rows]

    def applicable_notes(self, db: ReadOnlyDatabase, question: str, *, seen: Seen | None = None) -> list[Note]:
        """The notes to give with `question`: those that always apply and those tied to words the
        question has (each tied word but the stopwords, a trailing plural `s` aside), none stale."""
        have = {_stem(w) for w in words(question)}
        return [
            n
            for n in self._notes(seen or Seen.of(db))
            if n.stale is None and (n.question is None or _content_words(n.question) <= have)
        ]

    def remove_note(self, db: ReadOnlyDatabase, note_id: int) -> None:
        """Delete one note of `db`; KnowledgeError when it has none with that id."""
        seen = Seen.of(db)
        with self.writing() as conn:
            deleted = conn.execute(
                "DELETE FROM notes WHERE id = ? AND (identity = ? OR path = ?)", (note_id, seen.identity, seen.path)
            ).rowcount
        if not deleted:
            raise KnowledgeError(f"no note {note_id} for {Path(seen.path).name} (`edge-sql notes list` shows them)")

    # ---- verified answers ---------------------------------------------------------------

    def verify(
        self, db: ReadOnlyDatabase, question: str, sql: str, *, evidence: str | None = None, follows: str | None = None
    ) -> VerifiedAnswer:
        """Store `sql` as the confirmed answer to `question` on `db` (replacing an earlier one for
        the same question). `follows`: the question it followed, for a follow-up's answer (reused
        at once only after that question again, and never an example: alone its words mislead).
        Refused: an empty question, SQL that writes or does not run, a hint over the bound."""
        if not question or not normalise_question(question):
            raise KnowledgeError("empty question: a verified answer needs the question it answers")
        sql = (sql or "").strip()
        check_read_only(db, sql)
        seen = Seen.of(db)
        stamp = now()
        answer = VerifiedAnswer(
            0, question.strip(), evidence.strip() if evidence else None, sql, stamp, follows=follows
        )
        check_item("the verified answer", example_hint(answer), self.count_tokens)
        schema = retrieval.schema_words(db)
        with self.writing() as conn:
            self._remember(conn, seen)
            answer_id = self.store_answer(conn, seen, answer, schema)
        return VerifiedAnswer(answer_id, answer.question, answer.evidence, sql, stamp, follows=follows)

    def store_answer(self, conn: sqlite3.Connection, seen: Seen, answer: VerifiedAnswer, schema: frozenset[str]) -> int:
        """Insert and index one verified answer (in the caller's transaction), replacing an earlier
        answer of this database to the same question."""
        normalised = normalise_question(answer.question)
        follows = normalise_question(answer.follows) if answer.follows else None
        for old, old_follows in conn.execute(
            "SELECT id, follows FROM verified WHERE normalised = ? AND (identity = ? OR path = ?)",
            (normalised, seen.identity, seen.path),
        ).fetchall():
            if (normalise_question(old_follows) if old_follows else None) != follows:
                continue  # the same words after another question: another answer
            conn.execute("DELETE FROM verified WHERE id = ?", (old,))
            retrieval.unindex_answer(conn, old)
        cursor = conn.execute(
            "INSERT INTO verified (identity, path, question, normalised, evidence, sql, tables, verified_at, follows) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                seen.identity,
                seen.path,
                answer.question,
                normalised,
                answer.evidence,
                answer.sql,
                json.dumps(tables_named(answer.sql, seen.tables)),
                answer.verified_at,
                answer.follows,
            ),
        )
        assert cursor.lastrowid is not None
        if follows is None:  # a follow-up's question alone is no example for another question
            retrieval.index_answer(
                conn, cursor.lastrowid, answer.question, schema, identity=seen.identity, path=seen.path
            )
        return cursor.lastrowid

    def verified(self, db: ReadOnlyDatabase) -> list[VerifiedAnswer]:
        """Every verified answer of `db`, oldest first, stale ones flagged."""
        return self._verified(Seen.of(db), "identity = ? OR path = ?", ())

    def _verified(self, seen: Seen, where: str, params: tuple[Any, ...]) -> list[VerifiedAnswer]:
        rows = self._rows(
            f"SELECT id, question, evidence, sql, verified_at, tables, follows FROM verified WHERE ({where}) ORDER BY id",
            (seen.identity, seen.path, *params),
        )
        return [VerifiedAnswer(i, q, e, s, at, seen.stale(json.loads(t)), f) for i, q, e, s, at, t, f in rows]

    def forget(self, db: ReadOnlyDatabase, answer_id: int) -> None:
        """Delete one verified answer of `db`; KnowledgeError when it has none with that id."""
        seen = Seen.of(db)
        with self.writing() as conn:
            deleted = conn.execute(
                "DELETE FROM verified WHERE id = ? AND (identity = ? OR path = ?)",
                (answer_id, seen.identity, seen.path),
            ).rowcount
            retrieval.unindex_answer(conn, answer_id)
        if not deleted:
            raise KnowledgeError(f"no verified answer {answer_id} for {Path(seen.path).name}")

    def same_question(
        self, db: ReadOnlyDatabase, question: str, *, follows: str | None = None, seen: Seen | None = None
    ) -> VerifiedAnswer | None:
        """The newest verified answer of `db` to this very question (normalised), unless stale: one
        verified on its own, or (asked as a follow-up of `follows`) one that followed that question."""
        seen = seen or Seen.of(db)
        after = normalise_question(follows) if follows else None
        found = self._verified(seen, "(identity = ? OR path = ?) AND normalised = ?", (normalise_question(question),))
        fitting = [
            a for a in found if a.stale is None and (a.follows is None or normalise_question(a.follows) == after)
        ]
        return fitting[-1] if fitting else None

    def similar(
        self, db: ReadOnlyDatabase, question: str, *, k: int = EXAMPLES_PER_QUESTION, seen: Seen | None = None
    ) -> list[VerifiedAnswer]:
        """The `k` verified answers of `db` most like `question` (BM25), closest first, none stale."""
        seen = seen or Seen.of(db)
        schema = retrieval.schema_words(db) if retrieval.MASKED_BY_DEFAULT else frozenset()
        with self._lock:
            matches = retrieval.similar(
                self._conn, question, identity=seen.identity, path=seen.path, k=k + 4, schema=schema
            )
        if not matches:
            return []
        marks = ", ".join("?" * len(matches))
        found = self._verified(seen, f"(identity = ? OR path = ?) AND id IN ({marks})", tuple(m.id for m in matches))
        by_id = {a.id: a for a in found if a.stale is None}
        return [by_id[m.id] for m in matches if m.id in by_id][:k]

    # ---- moving it between machines (transfer.py) ----------------------------------------

    def export_json(self, db: ReadOnlyDatabase) -> dict[str, Any]:
        """`db`'s notes and verified answers as one JSON-ready dict (`transfer.export_json`)."""
        from edge_sql.knowledge.transfer import export_json

        return export_json(self, db)

    def import_json(self, db: ReadOnlyDatabase, data: Any) -> tuple[int, int]:
        """Store an export's notes and answers for `db`, all or nothing (`transfer.import_json`)."""
        from edge_sql.knowledge.transfer import import_json

        return import_json(self, db, data)

    # ---- the schema's history ------------------------------------------------------------

    def schema_change(self, db: ReadOnlyDatabase, *, seen: Seen | None = None) -> str | None:
        """One line when notes or verified answers of this file were written for another schema:
        which tables were dropped and added since (None: no change)."""
        seen = seen or Seen.of(db)
        old = self._rows(
            "SELECT DISTINCT s.tables FROM schemas s WHERE s.identity != ? AND s.identity IN "
            "(SELECT identity FROM notes WHERE path = ? UNION SELECT identity FROM verified WHERE path = ?)",
            (seen.identity, seen.path, seen.path),
        )
        if not old:
            return None
        before = {t for (tables,) in old for t in json.loads(tables)}
        dropped = sorted(before - set(seen.tables))
        added = sorted(set(seen.tables) - before)
        change = "; ".join(
            part
            for part in (
                f"dropped: {', '.join(dropped)}" if dropped else "",
                f"added: {', '.join(added)}" if added else "",
            )
            if part
        )
        return (
            f"the schema of {Path(seen.path).name} changed since some of its notes were written"
            + (f" ({change})" if change else " (columns or views)")
            + "; notes that name a dropped table are flagged and no longer given"
        )


def _content_words(text: str) -> set[str]:
    """The words a tied note needs in a question: its own but the stopwords, plurals folded."""
    return {_stem(w) for w in words(text) if w not in retrieval.STOPWORDS}


def _stem(word: str) -> str:
    """`customers` -> `customer`: tied notes match a plural and its singular."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
