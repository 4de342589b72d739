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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edge_sql.agent.given import Note, VerifiedAnswer
from edge_sql.errors import KnowledgeError, VerifiedExists
from edge_sql.knowledge import changes, retrieval
from edge_sql.knowledge.changes import Action, Change, Stored, Surface
from edge_sql.knowledge.evidence import (
    EXAMPLES_PER_QUESTION,
    TokenCounter,
    check_item,
    example_hint,
    utf8_bytes,
)
from edge_sql.knowledge.holds import absent_values
from edge_sql.knowledge.identity import normalise_question, tables_named, words
from edge_sql.knowledge.seen import Seen, check_read_only, now
from edge_sql.tools import ReadOnlyDatabase

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
            for table, column, kind in _ADDED_COLUMNS:  # a file written before them gets them, empty
                if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
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

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one read (for the store's own modules: changes.py, transfer.py)."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _remember(self, conn: sqlite3.Connection, seen: Seen) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO schemas (identity, tables) VALUES (?, ?)", (seen.identity, json.dumps(seen.tables))
        )

    # ---- notes -------------------------------------------------------------------------

    def add_note(
        self, db: ReadOnlyDatabase, text: str, *, question: str | None = None, surface: Surface = "api"
    ) -> Note:
        """Store a note about `db`; with `question`, a note given only to questions with those words.
        `surface`: where it was taught, for the history (changes.py)."""
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
            changes.record(conn, seen, surface, "added", "note", question=tie, new_id=cursor.lastrowid, new_text=text)
        return Note(cursor.lastrowid, text, tie, created)

    def notes(self, db: ReadOnlyDatabase) -> list[Note]:
        """Every note of `db` (its schema identity or its file), oldest first, stale ones flagged."""
        return self._notes(Seen.of(db))

    def _notes(self, seen: Seen) -> list[Note]:
        rows = self.rows(
            "SELECT id, text, question, created, tables FROM notes WHERE identity = ? OR path = ? ORDER BY id",
            (seen.identity, seen.path),
        )
        return [Note(i, text, tie, created, seen.stale(json.loads(named))) for i, text, tie, created, named in rows]

    def applicable_notes(self, db: ReadOnlyDatabase, question: str, *, seen: Seen | None = None) -> list[Note]:
        """The notes to give with `question`: those that always apply and those tied to words the
        question has (each tied word but the stopwords, a trailing plural `s` aside), none stale."""
        have = {retrieval.stem(w) for w in words(question)}
        return [
            n
            for n in self._notes(seen or Seen.of(db))
            if n.stale is None and (n.question is None or retrieval.content_words(n.question) <= have)
        ]

    def remove_note(self, db: ReadOnlyDatabase, note_id: int, *, surface: Surface = "api") -> Note:
        """Delete one note of `db` (kept in the history); KnowledgeError when it has none with that id."""
        seen = Seen.of(db)
        with self.writing() as conn:
            old = changes.old_row(conn, "note", note_id)
            if old is None or (seen.path != old["path"] and seen.identity != old["identity"]):
                raise KnowledgeError(f"no note {note_id} for {Path(seen.path).name} (`edge-sql notes list` shows them)")
            conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            changes.record(conn, seen, surface, "removed", "note", question=old["question"], old=old)
        return Note(note_id, old["text"], old["question"], old["created"])

    # ---- verified answers ---------------------------------------------------------------

    def verify(
        self,
        db: ReadOnlyDatabase,
        question: str,
        sql: str,
        *,
        evidence: str | None = None,
        follows: str | None = None,
        replace: bool = False,
        surface: Surface = "api",
    ) -> VerifiedAnswer:
        """`keep`'s answer: the one stored, or the same one already there."""
        return self.keep(db, question, sql, evidence=evidence, follows=follows, replace=replace, surface=surface).answer

    def keep(
        self,
        db: ReadOnlyDatabase,
        question: str,
        sql: str,
        *,
        evidence: str | None = None,
        follows: str | None = None,
        replace: bool = False,
        surface: Surface = "api",
    ) -> Stored:
        """Store `sql` as the confirmed answer to `question` on `db`. `follows`: the question it
        followed, for a follow-up's answer (reused at once only after that question again, and
        never an example: alone its words mislead). The same SQL again changes nothing (`action`
        "unchanged"); other SQL for a question that has a verified answer is refused
        (VerifiedExists) unless `replace`, and the replaced one is kept in the history with
        `surface`. Refused: an empty question, SQL that writes or does not run, a hint over the bound."""
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
        absent = absent_values(db, sql)
        with self.writing() as conn:
            self._remember(conn, seen)
            return self.store_answer(conn, seen, answer, schema, replace=replace, surface=surface, absent=absent)

    def store_answer(
        self,
        conn: sqlite3.Connection,
        seen: Seen,
        answer: VerifiedAnswer,
        schema: frozenset[str],
        *,
        replace: bool = False,
        surface: Surface = "api",
        absent: Sequence[str] = (),
    ) -> Stored:
        """Insert and index one verified answer (in the caller's transaction) and record it in the
        history; an earlier answer of this database to the same question with other SQL is
        replaced only with `replace` (else VerifiedExists), one with the same SQL is kept."""
        normalised = normalise_question(answer.question)
        follows = normalise_question(answer.follows) if answer.follows else None
        earlier = None
        for old_id, old_follows in conn.execute(
            "SELECT id, follows FROM verified WHERE normalised = ? AND (identity = ? OR path = ?)",
            (normalised, seen.identity, seen.path),
        ).fetchall():
            if (normalise_question(old_follows) if old_follows else None) == follows:
                earlier = changes.old_row(conn, "verified", old_id)  # else the same words after another question
        if earlier is not None:
            kept = changes.answer_of(earlier)
            if " ".join(earlier["sql"].split()) == " ".join(answer.sql.split()):
                return Stored(kept, "unchanged")
            if not replace:
                raise VerifiedExists(kept.id, kept.question, kept.sql, "say so to replace it")
            conn.execute("DELETE FROM verified WHERE id = ?", (kept.id,))
            retrieval.unindex_answer(conn, kept.id)
        cursor = conn.execute(
            "INSERT INTO verified (identity, path, question, normalised, evidence, sql, tables, verified_at, follows, "
            "absent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                json.dumps(list(absent)),
            ),
        )
        new_id = cursor.lastrowid
        assert new_id is not None
        if follows is None:  # a follow-up's question alone is no example for another question
            retrieval.index_answer(conn, new_id, answer.question, schema, identity=seen.identity, path=seen.path)
        action: Action = "added" if earlier is None else "replaced"
        changes.record(
            conn,
            seen,
            surface,
            action,
            "verified",
            question=answer.question,
            old=earlier,
            new_id=new_id,
            new_text=answer.sql,
        )
        stored = VerifiedAnswer(
            new_id, answer.question, answer.evidence, answer.sql, answer.verified_at, follows=answer.follows
        )
        if earlier is None:
            return Stored(stored, "added")
        return Stored(stored, "replaced", changes.answer_of(earlier))

    def verified(self, db: ReadOnlyDatabase) -> list[VerifiedAnswer]:
        """Every verified answer of `db`, oldest first, stale ones flagged."""
        return self._verified(Seen.of(db), "identity = ? OR path = ?", ())

    def _verified(self, seen: Seen, where: str, params: tuple[Any, ...], *, marks: bool = True) -> list[VerifiedAnswer]:
        """The answers that match; `stale` says why one no longer fits: a table it names is gone,
        or (with `marks`) its SQL was last found not to hold (`mark_stale`)."""
        rows = self.rows(
            "SELECT id, question, evidence, sql, verified_at, tables, follows, broken FROM verified "
            f"WHERE ({where}) ORDER BY id",
            (seen.identity, seen.path, *params),
        )
        return [
            VerifiedAnswer(i, q, e, s, at, seen.stale(json.loads(t)) or (b if marks else None), f)
            for i, q, e, s, at, t, f, b in rows
        ]

    def forget(self, db: ReadOnlyDatabase, answer_id: int, *, surface: Surface = "api") -> VerifiedAnswer:
        """Delete one verified answer of `db` (kept in the history); KnowledgeError when it has none."""
        seen = Seen.of(db)
        with self.writing() as conn:
            old = changes.old_row(conn, "verified", answer_id)
            if old is None or (seen.path != old["path"] and seen.identity != old["identity"]):
                raise KnowledgeError(f"no verified answer {answer_id} for {Path(seen.path).name}")
            conn.execute("DELETE FROM verified WHERE id = ?", (answer_id,))
            retrieval.unindex_answer(conn, answer_id)
            changes.record(conn, seen, surface, "removed", "verified", question=old["question"], old=old)
        return changes.answer_of(old)

    def mark_stale(self, db: ReadOnlyDatabase, answer_id: int, why: str | None) -> None:
        """Mark a verified answer as no longer holding (`why`), or as holding again (None)."""
        with self.writing() as conn:
            conn.execute("UPDATE verified SET broken = ? WHERE id = ?", (why, answer_id))

    def marks(self, answer_id: int) -> tuple[str | None, frozenset[str]]:
        """A verified answer's stale mark (None: none) and the values its checks did not find when
        it was verified (holds.py)."""
        rows = self.rows("SELECT broken, absent FROM verified WHERE id = ?", (answer_id,))
        if not rows:
            return None, frozenset()
        return rows[0][0], frozenset(json.loads(rows[0][1])) if rows[0][1] else frozenset()

    def history(self, db: ReadOnlyDatabase) -> list[Change]:
        """What teaching changed in `db`'s notes and verified answers, oldest first (changes.py)."""
        return changes.history(self, Seen.of(db))

    def undo(self, db: ReadOnlyDatabase, change_id: int, *, surface: Surface = "api") -> Change:
        """Undo one change of `db`'s (`changes.undo`); KnowledgeError, nothing changed, when it cannot."""
        return changes.undo(self, db, change_id, surface)

    def same_question(
        self, db: ReadOnlyDatabase, question: str, *, follows: str | None = None, seen: Seen | None = None
    ) -> VerifiedAnswer | None:
        """The newest verified answer of `db` to this very question (normalised), unless a table it
        names is gone: one verified on its own, or (asked as a follow-up of `follows`) one that
        followed that question. One marked stale is returned: whether it holds is checked on use."""
        seen = seen or Seen.of(db)
        after = normalise_question(follows) if follows else None
        found = self._verified(
            seen, "(identity = ? OR path = ?) AND normalised = ?", (normalise_question(question),), marks=False
        )
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

    # ---- the schema's history ------------------------------------------------------------

    def schema_change(self, db: ReadOnlyDatabase, *, seen: Seen | None = None) -> str | None:
        """One line when notes or verified answers of this file were written for another schema:
        which tables were dropped and added since (None: no change)."""
        seen = seen or Seen.of(db)
        old = self.rows(
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
