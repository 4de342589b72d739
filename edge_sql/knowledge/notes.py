"""The notes of the knowledge database (`NoteCalls`, part of `Knowledge`): a fact about a database
given with every question (or with the questions that have its words), added, listed, removed."""

from __future__ import annotations

import json

from edge_sql.agent.given import Note
from edge_sql.errors import KnowledgeError
from edge_sql.knowledge import changes, retrieval
from edge_sql.knowledge.changes import Surface
from edge_sql.knowledge.evidence import check_item
from edge_sql.knowledge.file import Db, KnowledgeFile
from edge_sql.knowledge.identity import tables_named, words
from edge_sql.knowledge.seen import Seen, now
from edge_sql.tools import ReadOnlyDatabase, opened

NO_NOTE = "no note {note_id} for {db} (`edge-sql notes list` shows them)"


class NoteCalls(KnowledgeFile):
    """The notes' calls; `db` is a path or an open database, as `Agent.ask` takes."""

    def add_note(self, db: Db, text: str, *, question: str | None = None, surface: Surface = "api") -> Note:
        """Store a note about `db`; with `question`, a note given only to questions with those words.
        `surface`: where it was taught, for the history (changes.py)."""
        text = (text or "").strip()
        if not text:
            raise KnowledgeError("empty note: write what the model should know, e.g. 'amounts are in cents'")
        tie = question.strip() if question and question.strip() else None
        if question is not None and tie is None:
            raise KnowledgeError("empty question for a tied note: give the words it applies to, or none")
        check_item("the note", text, self.count_tokens)
        with opened(db) as database:
            seen = Seen.of(database)
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

    def notes(self, db: Db) -> list[Note]:
        """Every note of `db` (its schema identity or its file), oldest first, stale ones flagged."""
        with opened(db) as database:
            return self._notes(Seen.of(database))

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

    def remove_note(self, db: Db, note_id: int, *, surface: Surface = "api") -> Note:
        """Delete one note of `db` (kept in the history); KnowledgeError when it has none with that id."""
        with self.removing(db, "note", note_id, NO_NOTE.format(note_id=note_id, db="{db}"), surface) as (conn, old):
            conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))
        return Note(note_id, old["text"], old["question"], old["created"])
