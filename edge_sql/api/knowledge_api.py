"""`agent.knowledge`: the knowledge store as an app calls it, taking what `ask` takes (a path or
an open database) and raising ClosedError once the Agent is closed, for every call, the store's
reads and writes included (`_rows`, `writing`: each of them goes through one of the two)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edge_sql.agent.given import Note, VerifiedAnswer
from edge_sql.errors import ClosedError
from edge_sql.knowledge import Knowledge, transfer
from edge_sql.knowledge.changes import Change, Stored, Surface
from edge_sql.knowledge.evidence import TokenCounter
from edge_sql.tools import ReadOnlyDatabase, opened

Db = str | Path | ReadOnlyDatabase


class AgentKnowledge(Knowledge):
    """`Knowledge` whose calls take a database path too (opened read-only for the call)."""

    _closed = False

    @classmethod
    def open(cls, home: Path | None = None, *, count_tokens: TokenCounter | None = None) -> AgentKnowledge:
        knowledge = super().open(home, count_tokens=count_tokens)
        assert isinstance(knowledge, AgentKnowledge)  # Knowledge.open makes a `cls`
        return knowledge

    def close(self) -> None:
        self._closed = True
        super().close()

    def _open(self) -> None:
        if self._closed:
            raise ClosedError("this Agent is closed (its knowledge database with it)")

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._open()
        return super().rows(sql, params)

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        self._open()
        with super().writing() as conn:
            yield conn

    def add_note(self, db: Db, text: str, *, question: str | None = None, surface: Surface = "api") -> Note:
        with opened(db) as database:
            return super().add_note(database, text, question=question, surface=surface)

    def notes(self, db: Db) -> list[Note]:
        with opened(db) as database:
            return super().notes(database)

    def remove_note(self, db: Db, note_id: int, *, surface: Surface = "api") -> Note:
        with opened(db) as database:
            return super().remove_note(database, note_id, surface=surface)

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
        with opened(db) as database:
            return super().verify(
                database, question, sql, evidence=evidence, follows=follows, replace=replace, surface=surface
            )

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
        with opened(db) as database:
            return super().keep(
                database, question, sql, evidence=evidence, follows=follows, replace=replace, surface=surface
            )

    def verified(self, db: Db) -> list[VerifiedAnswer]:
        with opened(db) as database:
            return super().verified(database)

    def forget(self, db: Db, answer_id: int, *, surface: Surface = "api") -> VerifiedAnswer:
        with opened(db) as database:
            return super().forget(database, answer_id, surface=surface)

    def history(self, db: Db) -> list[Change]:
        with opened(db) as database:
            return super().history(database)

    def undo(self, db: Db, change_id: int, *, surface: Surface = "api") -> Change:
        with opened(db) as database:
            return super().undo(database, change_id, surface=surface)

    def export_json(self, db: Db) -> dict[str, Any]:
        """`db`'s notes and verified answers as one JSON-ready dict (`transfer.export_json`)."""
        with opened(db) as database:
            return transfer.export_json(self, database)

    def import_json(self, db: Db, data: Any, *, replace: bool = False) -> transfer.Imported:
        """Store an export's notes and answers for `db`, all or nothing (`transfer.import_json`)."""
        with opened(db) as database:
            return transfer.import_json(self, database, data, replace=replace)
