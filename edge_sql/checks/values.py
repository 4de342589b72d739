"""Whether a column holds the literal it is compared with, asked of the read-only SQL worker.

Each check is one bounded statement under a short time limit: `SELECT 1 FROM <table> WHERE
<the comparison over the bare column> LIMIT 1`. A small table is read whole; a large one (more
than `LARGE_TABLE_ROWS`, estimated from its largest rowid) whole only where an index answers the
comparison (`=` or `IN` on an indexed column: SQLite picks the index itself), otherwise through
its first `SCAN_ROWS` rows, and the check says so. When nothing matches, the closest stored
values are looked up the same bounded way: the value in another case, a `LIKE` prefix match, then
the nearest by edit distance among a bounded sample of distinct values.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_sql.checks.findings import ValueCheck
from edge_sql.checks.names import Comparison
from edge_sql.errors import QueryError
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.identifiers import fold_identifier, quote_identifier

LARGE_TABLE_ROWS = 200_000  # more rows than this: scan only `SCAN_ROWS` unless an index answers
SCAN_ROWS = 200_000
SAMPLE_DISTINCT = 2_000  # distinct values compared by edit distance
CLOSEST = 3
CHECK_TIME_S = 2.0  # per statement, at most the database's own limit


@dataclass(frozen=True)
class TableFacts:
    """What bounds a check on one table: its estimated rows and its indexed leading columns."""

    rows: int | None
    indexed: frozenset[str]

    @property
    def large(self) -> bool:
        return self.rows is None or self.rows > LARGE_TABLE_ROWS


class ValueChecker:
    """Runs the value checks of one SQL statement on one database (facts cached per table)."""

    def __init__(self, db: ReadOnlyDatabase) -> None:
        self.db = db
        self.time_limit_s = min(CHECK_TIME_S, db.time_limit_s)
        self._facts: dict[str, TableFacts] = {}

    def check(self, comparison: Comparison) -> ValueCheck:
        table, column = comparison.column.table, comparison.column.column
        facts = self.facts(table)
        indexed = comparison.bare and comparison.op in ("=", "IN") and fold_identifier(column) in facts.indexed
        bounded = facts.large and not indexed
        source = self._source(table, bounded)
        scope = "index" if indexed and facts.large else f"first {SCAN_ROWS:,} rows" if bounded else "table"
        check = ValueCheck(
            table=table,
            column=column,
            op=comparison.op,
            value=comparison.value,
            literal=comparison.literal,
            found=None,
            scope=scope,
        )
        try:
            rows = self._rows(f"SELECT 1 FROM {source} WHERE {comparison.condition} LIMIT 1", 1)
        except QueryError as exc:
            check.note = f"could not check: {exc}"
            return check
        check.found = bool(rows)
        if check.found:
            return check
        if bounded:
            check.found = None
            estimate = f"about {facts.rows:,}" if facts.rows is not None else "an unknown number of"
            check.note = f"no match in the first {SCAN_ROWS:,} of {estimate} rows (bounded scan, no index)"
        if isinstance(comparison.value, str) and comparison.op != "BETWEEN":
            check.closest, check.closest_how = self.closest(comparison, self._source(table, facts.large))
        return check

    def facts(self, table: str) -> TableFacts:
        if table not in self._facts:
            self._facts[table] = TableFacts(self._estimate_rows(table), self._indexed(table))
        return self._facts[table]

    # -- closest values ---------------------------------------------------------------------

    def closest(self, comparison: Comparison, source: str) -> tuple[list[object], str | None]:
        """Stored values near the literal: another case, a prefix match, the nearest spellings."""
        expr, value = comparison.column_expr, str(comparison.value)
        try:
            if comparison.pattern:
                core = (
                    value.replace("%", " ").replace("_", " ")
                    if comparison.op == "LIKE"
                    else "".join(" " if c in "*?[]" else c for c in value)
                )
                if comparison.op == "GLOB":
                    rows = self._rows(
                        f"SELECT DISTINCT {expr} FROM {source} WHERE lower({expr}) GLOB lower(?) LIMIT {CLOSEST}",
                        CLOSEST,
                        (value,),
                    )
                    if rows:
                        return [r[0] for r in rows], "case"
                return self._nearest(expr, source, " ".join(core.split())), "nearest"
            rows = self._rows(
                f"SELECT DISTINCT {expr} FROM {source} WHERE {expr} = ? COLLATE NOCASE LIMIT {CLOSEST}",
                CLOSEST,
                (value,),
            )
            if rows:
                return [r[0] for r in rows], "case"
            for prefix in dict.fromkeys((value, value[: max(3, len(value) // 2)])):
                if len(prefix) < 3:
                    continue
                rows = self._rows(
                    f"SELECT DISTINCT {expr} FROM {source} WHERE {expr} LIKE ? ESCAPE '\\' LIMIT {CLOSEST}",
                    CLOSEST,
                    (_like_escape(prefix) + "%",),
                )
                if rows:
                    return [r[0] for r in rows], "prefix"
            nearest = self._nearest(expr, source, value)
            return nearest, "nearest" if nearest else None
        except QueryError:
            return [], None

    def _nearest(self, expr: str, source: str, value: str) -> list[object]:
        rows = self._rows(
            f"SELECT DISTINCT {expr} FROM {source} WHERE {expr} IS NOT NULL LIMIT {SAMPLE_DISTINCT}", SAMPLE_DISTINCT
        )
        wanted = value.casefold()
        scored = sorted((edit_distance(wanted, str(r[0]).casefold()), i, r[0]) for i, r in enumerate(rows))
        return [v for _, _, v in scored[:CLOSEST]]

    # -- helpers ----------------------------------------------------------------------------

    def _source(self, table: str, bounded: bool) -> str:
        quoted = quote_identifier(table)
        return f"(SELECT * FROM {quoted} LIMIT {SCAN_ROWS}) AS {quoted}" if bounded else quoted

    def _rows(self, sql: str, max_rows: int, params: tuple = ()) -> list[tuple]:
        return self.db.execute(
            sql, max_rows=max_rows, time_limit_s=self.time_limit_s, params=params, max_cell_chars=200
        ).rows

    def _estimate_rows(self, table: str) -> int | None:
        """The largest rowid (a B-tree's last key, read in O(log n)); None for views and tables
        without a rowid, which count as large."""
        try:
            rows = self._rows(f"SELECT max(rowid) FROM {quote_identifier(table)}", 1)
        except QueryError:
            return None
        return int(rows[0][0] or 0) if rows and isinstance(rows[0][0], (int, type(None))) else None

    def _indexed(self, table: str) -> frozenset[str]:
        """Folded names of the columns an index starts with (an INTEGER PRIMARY KEY is the rowid)."""
        quoted = "'" + table.replace("'", "''") + "'"
        names: set[str] = set()
        try:
            info = self._rows(f"PRAGMA table_info({quoted})", 10_000)
            keys = [row for row in info if row[5]]
            if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER":
                names.add(fold_identifier(keys[0][1]))
            for index in self._rows(f"PRAGMA index_list({quoted})", 10_000):
                first = self._rows(f"PRAGMA index_info('{str(index[1]).replace(chr(39), chr(39) * 2)}')", 10_000)
                lead = [row for row in first if row[0] == 0 and row[2] is not None]
                names.update(fold_identifier(row[2]) for row in lead)
        except QueryError:
            pass
        return frozenset(names)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def edit_distance(a: str, b: str, cap: int = 64) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each), texts cut to `cap` characters."""
    a, b = a[:cap], b[:cap]
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
