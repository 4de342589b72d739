"""The verified answers of the knowledge database (`VerifiedCalls`, part of `Knowledge`): SQL a
person confirmed for a question, stored (or refused), listed, forgotten, marked stale, and found
again for the same question or a similar one."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from edge_sql.agent.given import VerifiedAnswer
from edge_sql.errors import KnowledgeError, VerifiedExists
from edge_sql.knowledge import changes, retrieval
from edge_sql.knowledge.changes import Action, Stored, Surface
from edge_sql.knowledge.evidence import EXAMPLES_PER_QUESTION, check_item, example_hint
from edge_sql.knowledge.file import Db, KnowledgeFile
from edge_sql.knowledge.holds import absent_values
from edge_sql.knowledge.identity import normalise_question, tables_named
from edge_sql.knowledge.seen import Seen, check_read_only, now
from edge_sql.tools import ReadOnlyDatabase, opened


class VerifiedCalls(KnowledgeFile):
    """The verified answers' calls; the public ones take a path or an open database for `db`, as
    `Agent.ask` does."""

    def verify(
        self,
        db: Db,
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
        db: Db,
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
        with opened(db) as database:
            check_read_only(database, sql)
            seen = Seen.of(database)
            stamp = now()
            answer = VerifiedAnswer(
                0, question.strip(), evidence.strip() if evidence else None, sql, stamp, follows=follows
            )
            check_item("the verified answer", example_hint(answer), self.count_tokens)
            schema = retrieval.schema_words(database)
            absent = absent_values(database, sql)
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

    def verified(self, db: Db) -> list[VerifiedAnswer]:
        """Every verified answer of `db`, oldest first, stale ones flagged."""
        with opened(db) as database:
            return self._verified(Seen.of(database), "identity = ? OR path = ?", ())

    def _verified(
        self,
        seen: Seen,
        where: str,
        params: tuple[Any, ...],  # Any: sqlite3
        *,
        marks: bool = True,
    ) -> list[VerifiedAnswer]:
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

    def forget(self, db: Db, answer_id: int, *, surface: Surface = "api") -> VerifiedAnswer:
        """Delete one verified answer of `db` (kept in the history); KnowledgeError when it has none."""
        with self.removing(db, "verified", answer_id, f"no verified answer {answer_id} for {{db}}", surface) as (
            conn,
            old,
        ):
            conn.execute("DELETE FROM verified WHERE id = ?", (answer_id,))
            retrieval.unindex_answer(conn, answer_id)
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
                self.connection(), question, identity=seen.identity, path=seen.path, k=k + 4, schema=schema
            )
        if not matches:
            return []
        marks = ", ".join("?" * len(matches))
        found = self._verified(seen, f"(identity = ? OR path = ?) AND id IN ({marks})", tuple(m.id for m in matches))
        by_id = {a.id: a for a in found if a.stale is None}
        return [by_id[m.id] for m in matches if m.id in by_id][:k]
