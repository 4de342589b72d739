"""What `describe_table` shows the model for one table and question, with each column's score:
`edge-sql tables --table` (the tool itself runs, so its errors and its trained form are the model's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sql.tools.database import ReadOnlyDatabase, opened
from edge_sql.tools.schema_ranking import column_scores
from edge_sql.tools.schema_view import TokenCounter
from edge_sql.tools.toolbox import Toolbox


@dataclass
class ColumnListing:
    """What `describe_table` shows for one table and question, and each column's score."""

    text: str
    table: str
    columns: list[dict[str, Any]]  # Any: JSON; name, score (0: unrelated), shown

    def to_json(self) -> dict[str, Any]:  # Any: JSON
        return {"text": self.text, "table": self.table, "columns": self.columns}


def describe_table_for(
    db: str | Path | ReadOnlyDatabase, question: str, table: str, *, count_tokens: TokenCounter | None = None
) -> ColumnListing:
    """Exactly what `describe_table` shows the model for `table` (`.text`: the trained one-line
    CREATE, or a too-wide table's key and most related columns and the note; an unknown name's
    error), with every column's score and whether it was shown."""
    with opened(db) as database:
        toolbox = Toolbox(database, question=question, count_tokens=count_tokens)
        try:
            text = toolbox.call("describe_table", {"table_name": table}).output
            if text.startswith("Error: "):
                return ColumnListing(text, table, [])
            stored = database.resolve_table(table)
            names = [row[1] for row in database.table_info(stored)]
            shown = set(toolbox.schema.described.get(table, names))
        finally:
            toolbox.schema.close()
    scores = column_scores(names, question)
    columns = [{"name": n, "score": round(scores.get(i, 0.0), 4), "shown": n in shown} for i, n in enumerate(names)]
    return ColumnListing(text, stored, columns)
