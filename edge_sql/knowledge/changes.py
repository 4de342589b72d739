"""The history of what teaching changed, so that nothing verified is replaced or removed unseen.

Every verified answer added, replaced or removed and every note added or removed is one row of
`changes` in the same transaction as the change itself: when, from which surface (the command
line, the prompt, the page, HTTP, MCP, an import), the old and the new SQL or text, and the old
row whole, so that one change can be undone (`edge-sql notes history`, `notes undo`). Undoing
restores the old row under its old id and marks the change undone; a change that later ones have
built on (the answer it stored was replaced or removed since) is refused, one line saying why.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from edge_sql.agent.given import VerifiedAnswer
from edge_sql.errors import KnowledgeError
from edge_sql.knowledge import retrieval
from edge_sql.knowledge.evidence import one_line
from edge_sql.knowledge.identity import normalise_question
from edge_sql.knowledge.seen import Seen, now
from edge_sql.tools import ReadOnlyDatabase


class Ledger(Protocol):
    """What history and undo need of the store (`Knowledge` is one): a read, a write transaction.
    A protocol, so that store.py imports this module and not the reverse."""

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]: ...  # Any: sqlite3

    def writing(self) -> AbstractContextManager[sqlite3.Connection]: ...


Surface = Literal["command line", "prompt", "page", "HTTP", "MCP", "import", "api"]
Action = Literal["added", "replaced", "removed"]
Kind = Literal["verified", "note"]

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS changes (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, "
    "path TEXT NOT NULL, at TEXT NOT NULL, surface TEXT NOT NULL, action TEXT NOT NULL, kind TEXT NOT NULL, "
    "question TEXT, old_id INTEGER, old_text TEXT, old_row TEXT, new_id INTEGER, new_text TEXT, "
    "undone TEXT, undone_from TEXT)",
    "CREATE INDEX IF NOT EXISTS changes_by_database ON changes (identity, path)",
)
VERIFIED_COLUMNS = (
    "id",
    "identity",
    "path",
    "question",
    "normalised",
    "evidence",
    "sql",
    "tables",
    "verified_at",
    "follows",
)
NOTE_COLUMNS = ("id", "identity", "path", "text", "question", "tables", "created")


@dataclass(frozen=True)
class Change:
    """One change teaching made: `old_*` what was there before (None for an addition), `new_*`
    what it stored (None for a removal); `old_text`/`new_text` are SQL for a verified answer and
    the text for a note. `undone`: when it was undone (None: it holds)."""

    id: int
    at: str
    surface: str
    action: Action
    kind: Kind
    question: str | None
    old_id: int | None
    old_text: str | None
    new_id: int | None
    new_text: str | None
    undone: str | None = None
    undone_from: str | None = None

    def label(self, answer_id: int | None) -> str:
        return f"v{answer_id}" if self.kind == "verified" else f"note {answer_id}"

    def line(self) -> str:
        """One line: `#3  2026-12-07 12:01  prompt  replaced v7 -> v8 "Q": SELECT a -> SELECT b`."""
        when = self.at[:16].replace("T", " ")
        if self.action == "replaced":
            what = f'replaced {self.label(self.old_id)} by {self.label(self.new_id)} "{self.question}": '
            what += f"{one_line(self.old_text or '')} -> {one_line(self.new_text or '')}"
        else:
            ident = self.new_id if self.action == "added" else self.old_id
            text = self.new_text if self.action == "added" else self.old_text
            about = f' "{self.question}"' if self.kind == "verified" else ""
            what = f"{self.action} {self.label(ident)}{about}: {one_line(text or '')}"
        undone = f"  (undone {self.undone[:16].replace('T', ' ')} from {self.undone_from})" if self.undone else ""
        return f"#{self.id}  {when}  {self.surface}  {what}{undone}"

    def undone_line(self) -> str:
        """What undoing this change did, in one line: `undid #3: v7 is back in place of v8`."""
        if self.action == "added":
            did = f"{self.label(self.new_id)} removed"
        elif self.action == "replaced":
            did = f"{self.label(self.old_id)} is back in place of {self.label(self.new_id)}"
        else:
            did = f"{self.label(self.old_id)} is back"
        return f"undid change #{self.id} ({self.action} {self.kind.replace('verified', 'verified answer')}): {did}"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "at": self.at,
            "surface": self.surface,
            "action": self.action,
            "kind": self.kind,
            "question": self.question,
            "old_id": self.old_id,
            "old": self.old_text,
            "new_id": self.new_id,
            "new": self.new_text,
            "undone": self.undone,
            "undone_from": self.undone_from,
        }


@dataclass(frozen=True)
class Stored:
    """What `Knowledge.keep` did with a verified answer: `action` "added", "replaced" (`replaced`
    the answer it replaced) or "unchanged" (the same SQL was verified already: `answer` is that
    one, its id kept), so that every surface says what it stored."""

    answer: VerifiedAnswer
    action: Literal["added", "replaced", "unchanged"] = "added"
    replaced: VerifiedAnswer | None = None

    def said(self) -> str:
        """What a surface replies: `kept as verified (v8): "Q" -> SQL`, `already verified (v7) ...`,
        or `replaced v7 (SELECT ...) by verified v8: "Q" -> SQL`."""
        answer = self.answer
        pair = f'"{answer.question}" -> {one_line(answer.sql)}'
        if self.action == "unchanged":
            return f"already verified (v{answer.id}), nothing changed: {pair}"
        if self.replaced is not None:
            return f"replaced v{self.replaced.id} ({one_line(self.replaced.sql)}) by verified v{answer.id}: {pair}"
        return f"kept as verified (v{answer.id}): {pair}"

    def reply_json(self) -> dict[str, object]:
        """The answer stored, what happened, what it replaced and the line: HTTP's and MCP's reply."""
        return {
            "verified": self.answer.to_json(),
            "action": self.action,
            "replaced": self.replaced.to_json() if self.replaced is not None else None,
            "message": self.said(),
        }


def answer_of(row: dict[str, Any]) -> VerifiedAnswer:  # Any: sqlite3
    """A verified answer from its whole row (`old_row`)."""
    return VerifiedAnswer(
        row["id"], row["question"], row["evidence"], row["sql"], row["verified_at"], follows=row["follows"]
    )


def old_row(conn: sqlite3.Connection, kind: Kind, row_id: int) -> dict[str, Any] | None:  # Any: sqlite3
    """A verified answer's or note's whole row, to keep beside its change (None: no such row)."""
    table, columns = ("verified", VERIFIED_COLUMNS) if kind == "verified" else ("notes", NOTE_COLUMNS)
    row = conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE id = ?", (row_id,)).fetchone()
    return dict(zip(columns, row, strict=True)) if row is not None else None


def record(
    conn: sqlite3.Connection,
    seen: Seen,
    surface: str,
    action: Action,
    kind: Kind,
    *,
    question: str | None,
    old: dict[str, Any] | None = None,  # Any: sqlite3
    new_id: int | None = None,
    new_text: str | None = None,
) -> None:
    """Write one change in the caller's transaction (the change and its record land together)."""
    old_text = None if old is None else old["sql" if kind == "verified" else "text"]
    conn.execute(
        "INSERT INTO changes (identity, path, at, surface, action, kind, question, old_id, old_text, old_row, "
        "new_id, new_text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            seen.identity,
            seen.path,
            now(),
            surface,
            action,
            kind,
            question,
            None if old is None else old["id"],
            old_text,
            None if old is None else json.dumps(old),
            new_id,
            new_text,
        ),
    )


_SELECT = (
    "SELECT id, at, surface, action, kind, question, old_id, old_text, new_id, new_text, undone, undone_from "
    "FROM changes"
)


def history(kb: Ledger, seen: Seen) -> list[Change]:
    """The changes to `seen`'s notes and verified answers (its schema or its file), oldest first."""
    rows = kb.rows(f"{_SELECT} WHERE identity = ? OR path = ? ORDER BY id", (seen.identity, seen.path))
    return [Change(*row) for row in rows]


def undo(kb: Ledger, db: ReadOnlyDatabase, change_id: int, surface: str) -> Change:
    """Undo one change of `db`'s: an addition is removed, a replacement or removal restores the old
    row under its old id. KnowledgeError (nothing changed) when there is no such change, it was
    undone already, or what it stored has changed since. Returns the change as it was."""
    seen = Seen.of(db)
    schema = retrieval.schema_words(db)
    with kb.writing() as conn:
        row = conn.execute(
            f"{_SELECT} WHERE id = ? AND (identity = ? OR path = ?)", (change_id, seen.identity, seen.path)
        ).fetchone()
        if row is None:
            raise KnowledgeError(f"no change #{change_id} for this database (`edge-sql notes history` lists them)")
        change = Change(*row)
        if change.undone:
            raise KnowledgeError(f"change #{change_id} was undone already ({change.undone[:16].replace('T', ' ')})")
        if change.new_id is not None:
            _take_back(conn, change)
        if change.old_id is not None:
            _restore(conn, change_id, change, seen, schema)
        conn.execute("UPDATE changes SET undone = ?, undone_from = ? WHERE id = ?", (now(), surface, change_id))
    return change


def _take_back(conn: sqlite3.Connection, change: Change) -> None:
    """Remove what the change stored, if it is still what it stored."""
    table, column = ("verified", "sql") if change.kind == "verified" else ("notes", "text")
    held = conn.execute(f"SELECT {column} FROM {table} WHERE id = ?", (change.new_id,)).fetchone()
    if held is None or held[0] != change.new_text:
        raise KnowledgeError(
            f"cannot undo change #{change.id}: {change.label(change.new_id)} was changed or removed since "
            "(undo the later change first; `edge-sql notes history` lists them)"
        )
    conn.execute(f"DELETE FROM {table} WHERE id = ?", (change.new_id,))
    if change.kind == "verified" and change.new_id is not None:
        retrieval.unindex_answer(conn, change.new_id)


def _restore(conn: sqlite3.Connection, change_id: int, change: Change, seen: Seen, schema: frozenset[str]) -> None:
    """Put the old row back under its old id (and, for an answer, into the similarity index)."""
    (kept,) = conn.execute("SELECT old_row FROM changes WHERE id = ?", (change_id,)).fetchone()
    old = json.loads(kept)
    if change.kind == "note":
        conn.execute(
            f"INSERT INTO notes ({', '.join(NOTE_COLUMNS)}) VALUES ({', '.join('?' * len(NOTE_COLUMNS))})",
            tuple(old[c] for c in NOTE_COLUMNS),
        )
        return
    after = normalise_question(old["follows"]) if old["follows"] else None
    taken = [
        answer_id
        for answer_id, follows in conn.execute(
            "SELECT id, follows FROM verified WHERE normalised = ? AND (identity = ? OR path = ?)",
            (old["normalised"], seen.identity, seen.path),
        ).fetchall()
        if (normalise_question(follows) if follows else None) == after
    ]
    if taken:
        raise KnowledgeError(
            f'cannot undo change #{change.id}: "{change.question}" has another verified answer now (v{taken[0]}); '
            "remove it first"
        )
    conn.execute(
        f"INSERT INTO verified ({', '.join(VERIFIED_COLUMNS)}) VALUES ({', '.join('?' * len(VERIFIED_COLUMNS))})",
        tuple(old[c] for c in VERIFIED_COLUMNS),
    )
    if not old["follows"]:
        retrieval.index_answer(conn, old["id"], old["question"], schema, identity=old["identity"], path=old["path"])
