"""`Knowledge`: the knowledge database, notes and verified answers per database, in edge-sql's own
SQLite file (`file.py`), with the notes' calls (`notes.py`), the verified answers' (`verified.py`),
the history (`changes.py`) and the schema's changes here.

It lives in the model store (`$EDGE_SQL_HOME/knowledge.sqlite`), never in or beside the user's
database. WAL journal, synchronous writes, and one transaction per change: a process killed while
writing leaves the change whole or absent, and several processes (a REPL and a server) may write at
once (each waits its turn, `BUSY_TIMEOUT_S`). Every call takes what `Agent.ask` takes for the
database (a path or an open database) and raises ClosedError once closed.
"""

from __future__ import annotations

import json
from pathlib import Path

from edge_sql.knowledge import changes
from edge_sql.knowledge.changes import Change, Surface
from edge_sql.knowledge.evidence import TokenCounter
from edge_sql.knowledge.file import BUSY_TIMEOUT_S, FILE_NAME, SCHEMA_VERSION, Db
from edge_sql.knowledge.notes import NoteCalls
from edge_sql.knowledge.seen import Seen
from edge_sql.knowledge.verified import VerifiedCalls
from edge_sql.tools import ReadOnlyDatabase, opened

__all__ = ["BUSY_TIMEOUT_S", "FILE_NAME", "SCHEMA_VERSION", "Db", "Knowledge", "Seen"]


class Knowledge(NoteCalls, VerifiedCalls):
    """Notes and verified answers for any number of databases, in one SQLite file (see
    `KnowledgeFile`: `count_tokens`, threads, ClosedError)."""

    @classmethod
    def open(cls, home: Path | None = None, *, count_tokens: TokenCounter | None = None) -> Knowledge:
        """The knowledge database in `home` (default: the model store, `$EDGE_SQL_HOME`)."""
        if home is None:
            from edge_sql.store.home import store_root

            home = store_root()
        return cls(Path(home) / FILE_NAME, count_tokens=count_tokens)

    # ---- the history ------------------------------------------------------------------

    def history(self, db: Db) -> list[Change]:
        """What teaching changed in `db`'s notes and verified answers, oldest first (changes.py)."""
        with opened(db) as database:
            return changes.history(self, Seen.of(database))

    def undo(self, db: Db, change_id: int, *, surface: Surface = "api") -> Change:
        """Undo one change of `db`'s (`changes.undo`); KnowledgeError, nothing changed, when it cannot."""
        with opened(db) as database:
            return changes.undo(self, database, change_id, surface)

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
