"""`check_sql`: every check that needs no episode, on any SQL, against a read-only database.

Names are resolved (checks/names.py), each compared literal is looked up in its column
(checks/values.py), and the result is read for the answers that usually mean a wrong query: no
rows, one row of NULLs (an aggregate over nothing), rows cut at the cap, an answer the episode was
forced to give or fell back to. Nothing here writes to the database or runs a model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from edge_sql.checks.findings import FORCE_REASONS, Checks, NameUse
from edge_sql.checks.names import NOT_SQL, Comparison, SchemaLookup, read_names
from edge_sql.checks.values import ValueChecker
from edge_sql.errors import QueryError
from edge_sql.tools import QueryResult, ReadOnlyDatabase

DEFAULT_MAX_ROWS = 1000
MAX_COMPARISONS = 32  # value checks per statement: each is one bounded query


def check_sql(
    db: ReadOnlyDatabase | str | Path,
    sql: str,
    *,
    result: QueryResult | None = None,
    forced: bool = False,
    force_reason: str | None = None,
    fallback: bool = False,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Checks:
    """Check `sql` against `db` (an open ReadOnlyDatabase, or a path opened read-only for the
    call): names, compared values, and its result (`result` when the caller already ran it, else
    it runs here, read-only, with at most `max_rows` rows). `forced` (and why: `force_reason`, an
    `EpisodeResult.force_reason`) and `fallback` say how an episode came to the answer. Returns `Checks`; a query that fails is a finding, not an error
    (a database that cannot be opened raises DatabaseError).

        >>> check_sql("chinook.sqlite", "SELECT * FROM Genre WHERE Name = 'rock'").summary()
        "checks: doubtful (1 table, 2 columns, 0/1 value found); Genre.Name = 'rock' matches no row; ..."
    """
    if not isinstance(db, ReadOnlyDatabase):
        with ReadOnlyDatabase(db) as opened:
            return check_sql(
                opened,
                sql,
                result=result,
                forced=forced,
                force_reason=force_reason,
                fallback=fallback,
                max_rows=max_rows,
            )
    started = time.perf_counter()
    checks = Checks(sql=sql, names=[], values=[], findings=[])
    if forced:
        why = FORCE_REASONS.get(force_reason or "max_rounds", force_reason)
        checks.add("doubtful", "forced", f"the answer was forced ({why})")
    if fallback:
        checks.add("doubtful", "fallback", "the model's answer failed; this is the last query that ran")
    failure = None
    if result is None:
        try:
            result = db.execute(sql, max_rows=max_rows)
        except QueryError as exc:
            failure = str(exc)
    names = read_names(sql, _lookup(db))
    if names.unparsed is not None:  # one finding: SQLite's failure is the same fact, in its words
        detail = f" ({failure})" if failure is not None and names.unparsed == NOT_SQL else ""
        checks.add("doubtful" if failure else "unchecked", "unparsed", names.unparsed + detail)
    elif failure is not None and not (names.unknown and failure.startswith("no such ")):
        checks.add("doubtful", "failed", f"the SQL failed to run: {failure}")  # an unknown name says it once
    if names.error:
        checks.add("unchecked", "unresolved", names.error)
    if names.unparsed is None and names.error is None and not names.tables and not names.unknown:
        checks.add("doubtful", "no_table", "the query reads no table")
    for unknown in names.unknown:
        checks.add("doubtful", "unknown_name", f"no such {unknown}")
    checks.names = [NameUse("table", t) for t in names.tables]
    checks.names += [NameUse("column", c.table, c.column) for c in names.columns]
    checker = ValueChecker(db)
    for comparison in _distinct(names.comparisons)[:MAX_COMPARISONS]:
        value = checker.check(comparison)
        checks.values.append(value)
        if value.found is False:
            checks.add(
                "doubtful", "value_not_found", _not_found(value.target, comparison, value.closest, value.closest_how)
            )
        elif value.found is None:
            checks.add(
                "unchecked", "value_unchecked", f"{value.target} {comparison.op} {comparison.literal}: {value.note}"
            )
    if len(names.comparisons) > MAX_COMPARISONS:
        checks.add("unchecked", "too_many_values", f"only the first {MAX_COMPARISONS} compared values were checked")
    if result is not None:
        _result_findings(checks, result.columns, result.rows, result.truncated)
    checks.wall_s = time.perf_counter() - started
    return checks


def _result_findings(checks: Checks, columns: Sequence[str], rows: Sequence[Sequence[object]], truncated: bool) -> None:
    if not rows:
        checks.add("doubtful", "no_rows", "the query returned no rows")
    elif len(rows) == 1 and rows[0] and all(v is None for v in rows[0]):
        checks.add("doubtful", "null_row", "the query returned one row of NULLs (an aggregate over no rows)")
    if truncated:
        checks.add("note", "truncated", f"the result was cut at {len(rows)} rows")


def _not_found(target: str, comparison: Comparison, closest: list[object], how: str | None) -> str:
    message = f"{target} {comparison.op} {comparison.literal} matches no row"
    if closest:
        shown = ", ".join(repr(v) for v in closest)
        label = {"case": "in another case", "prefix": "by prefix", "nearest": "nearest"}.get(how or "", "")
        message += f"; closest: {shown}" + (f" ({label})" if label else "")
    return message


def _distinct(comparisons: list[Comparison]) -> list[Comparison]:
    seen: dict[tuple[str, str], Comparison] = {}
    for c in comparisons:
        seen.setdefault((c.column.table, c.condition), c)
    return list(seen.values())


def _lookup(db: ReadOnlyDatabase) -> SchemaLookup:
    """The schema lookup names.read_names asks: a table's stored name and columns, or None."""

    def lookup(name: str) -> tuple[str, list[str]] | None:
        try:
            table = db.resolve_table(name)
            return table, db.column_names(table)
        except QueryError:
            return None

    return lookup
