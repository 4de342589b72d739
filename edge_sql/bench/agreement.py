"""Answer agreement: does a variant's final SQL return the same result set as BF16's?

Result sets are compared with the evaluation's own rule (`scoring.result_set`: rows as a
set of tuples). Two answers also agree when neither produced a result (no SQL, or SQL that
failed): both models failed the question in the same way.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

from edge_sql.errors import QueryError
from edge_sql.evaluation.scoring import DEFAULT_TIMEOUT_S, result_set
from edge_sql.tools.database import ReadOnlyDatabase

NO_RESULT = None


class ResultCache:
    """Runs each distinct (database, SQL) once and keeps its result set (or NO_RESULT)."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._results: dict[tuple[Path, str], frozenset[tuple[Any, ...]] | None] = {}  # Any: sqlite3
        # One open database (one SQL worker process) per file, not one per statement.
        self._dbs: dict[Path, ReadOnlyDatabase] = {}

    def close(self) -> None:
        """Stop the SQL workers (they also stop when the cache is garbage-collected)."""
        for db in self._dbs.values():
            db.close()
        self._dbs.clear()

    def _db(self, db_path: Path) -> ReadOnlyDatabase:
        if db_path not in self._dbs:
            self._dbs[db_path] = ReadOnlyDatabase(db_path, time_limit_s=self.timeout_s)
        return self._dbs[db_path]

    def result(self, db_path: Path, sql: str | None) -> Hashable:
        if sql is None or not sql.strip():
            return NO_RESULT
        key = (Path(db_path), sql)
        if key not in self._results:
            db = self._db(Path(db_path))
            try:
                rows = db.execute(sql, max_rows=None, time_limit_s=self.timeout_s).rows
                self._results[key] = frozenset(result_set(rows))
            except QueryError:
                self._results[key] = NO_RESULT
        return self._results[key]

    def agree(self, db_path: Path, reference_sql: str | None, variant_sql: str | None) -> bool:
        """Same result set, or no result from either."""
        return self.result(db_path, reference_sql) == self.result(db_path, variant_sql)
