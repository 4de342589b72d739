"""`agent.knowledge`: the knowledge store as an app calls it. `Knowledge` itself takes what `ask`
takes (a path or an open database) and raises ClosedError once closed; this adds the export and
import that `transfer.py` holds (a path too) and says the Agent was closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_sql.knowledge import Knowledge, transfer
from edge_sql.knowledge.evidence import TokenCounter
from edge_sql.knowledge.file import Db
from edge_sql.tools import opened


class AgentKnowledge(Knowledge):
    """`Knowledge` with its export and import as calls, closed with its Agent."""

    closed_message = "this Agent is closed (its knowledge database with it)"

    @classmethod
    def open(cls, home: Path | None = None, *, count_tokens: TokenCounter | None = None) -> AgentKnowledge:
        knowledge = super().open(home, count_tokens=count_tokens)
        assert isinstance(knowledge, AgentKnowledge)  # Knowledge.open makes a `cls`
        return knowledge

    def export_json(self, db: Db) -> dict[str, Any]:  # Any: records
        """`db`'s notes and verified answers as one JSON-ready dict (`transfer.export_json`)."""
        with opened(db) as database:
            return transfer.export_json(self, database)

    def import_json(self, db: Db, data: Any, *, replace: bool = False) -> transfer.Imported:  # Any: json.loads
        """Store an export's notes and answers for `db`, all or nothing (`transfer.import_json`)."""
        with opened(db) as database:
            return transfer.import_json(self, database, data, replace=replace)
