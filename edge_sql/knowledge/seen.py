"""A database as the knowledge sees it, and the checks and stamps every write shares.

Below `store.py` and `transfer.py`, which both use them; `transfer.py` sits above `store.py` (it takes a store), and `store.py` imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from edge_sql.errors import KnowledgeError
from edge_sql.knowledge.identity import database_path, schema_identity
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.database import READ_STATEMENTS, first_keyword


def now() -> str:
    """The time a note or answer is stamped with: ISO 8601, UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Seen:
    """A database as the knowledge sees it: identity, file, tables (read once per use)."""

    identity: str
    path: str
    tables: list[str]

    @classmethod
    def of(cls, db: ReadOnlyDatabase) -> Seen:
        return cls(schema_identity(db), database_path(db), db.table_names() + db.view_names())

    def stale(self, named: list[str]) -> str | None:
        """Why something that names the tables `named` no longer fits (None: it fits)."""
        gone = [t for t in named if t not in self.tables]
        if not gone:
            return None
        return f"names {'tables' if len(gone) > 1 else 'the table'} {', '.join(gone)}, which the database no longer has"


def check_read_only(db: ReadOnlyDatabase, sql: str) -> None:
    """Refuse (KnowledgeError) SQL that is empty, that writes, or that does not run on `db`."""
    from edge_sql.errors import QueryError

    if not sql:
        raise KnowledgeError("empty SQL: a verified answer needs the query that answers it")
    keyword = first_keyword(sql)
    if keyword not in READ_STATEMENTS:
        raise KnowledgeError(
            f"refused: a verified answer must be one read-only SELECT, WITH or VALUES statement (this one starts with {keyword})"
        )
    try:
        db.execute(sql, max_rows=1)
    except QueryError as exc:
        raise KnowledgeError(f"refused: the SQL does not run on this database: {exc}") from None
