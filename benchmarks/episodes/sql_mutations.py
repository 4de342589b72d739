"""The gold SQL mutated the ways small models err (benchmarks/episodes/bench_checks.py counts
which of them the answer checks flag): a literal's case, a letter dropped, two letters swapped, a
value from another column, a column swapped for a sibling of the same table. Each mutation takes
the SQL, its database and a key that picks among candidates, and returns the mutant or None
where it does not apply."""

from __future__ import annotations

import re
from collections.abc import Callable

from edge_sql.checks.checker import _lookup
from edge_sql.checks.names import read_names
from edge_sql.tools import ReadOnlyDatabase


def _string_literals(sql: str, db: ReadOnlyDatabase) -> list[tuple[str, str, str]]:
    """(literal text, table, column) of each text literal compared with a column by = or IN."""
    names = read_names(sql, _lookup(db))
    return [
        (str(c.value), c.column.table, c.column.column)
        for c in names.comparisons
        if isinstance(c.value, str) and c.op in ("=", "IN") and len(str(c.value)) >= 3
    ]


def _replace_literal(sql: str, old: str, new: str) -> str:
    quoted = "'" + old.replace("'", "''") + "'"
    return sql.replace(quoted, "'" + new.replace("'", "''") + "'", 1)


def mutate_case(sql: str, db: ReadOnlyDatabase, rng_key: int) -> str | None:
    for value, _t, _c in _string_literals(sql, db):
        changed = value.swapcase() if value.lower() == value else value.lower()
        if changed != value:
            return _replace_literal(sql, value, changed)
    return None


def mutate_drop(sql: str, db: ReadOnlyDatabase, rng_key: int) -> str | None:
    for value, _t, _c in _string_literals(sql, db):
        i = len(value) // 2
        return _replace_literal(sql, value, value[:i] + value[i + 1 :])
    return None


def mutate_swap(sql: str, db: ReadOnlyDatabase, rng_key: int) -> str | None:
    for value, _t, _c in _string_literals(sql, db):
        i = len(value) // 2 - 1
        swapped = value[:i] + value[i + 1] + value[i] + value[i + 2 :]
        if swapped != value:
            return _replace_literal(sql, value, swapped)
    return None


def mutate_other_column(sql: str, db: ReadOnlyDatabase, rng_key: int) -> str | None:
    """A text value stored in another table's column, one the compared column does not hold."""
    for value, table, column in _string_literals(sql, db):
        others = [t for t in db.table_names() if t != table]
        for offset in range(len(others)):
            other = others[(rng_key + offset) % len(others)]
            for name in db.column_names(other):
                quoted_other, quoted_name = f'"{other}"', f'"{name}"'
                rows = db.execute(
                    f"SELECT DISTINCT {quoted_name} FROM {quoted_other} WHERE typeof({quoted_name}) = "
                    f"'text' AND length({quoted_name}) BETWEEN 3 AND 40 LIMIT 5",
                    max_rows=5,
                ).rows
                for (candidate,) in rows:
                    held = db.execute(
                        f'SELECT 1 FROM "{table}" WHERE "{column}" = ? LIMIT 1', max_rows=1, params=(candidate,)
                    ).rows
                    if not held:
                        return _replace_literal(sql, value, candidate)
    return None


def mutate_sibling_column(sql: str, db: ReadOnlyDatabase, rng_key: int) -> str | None:
    """One column reference written as another column of the same table (the first whose name
    appears as a whole word, replaced at its first appearance)."""
    names = read_names(sql, _lookup(db))
    for ref in names.columns:
        siblings = [c for c in db.column_names(ref.table) if c != ref.column and not c.lower().endswith("id")]
        if not siblings:
            continue
        sibling = siblings[rng_key % len(siblings)]
        pattern = re.compile(r"(?<![\w'\"])" + re.escape(ref.column) + r"(?![\w'\"])", re.IGNORECASE)
        if pattern.search(sql):
            return pattern.sub(sibling, sql, count=1)
    return None


MUTATIONS: dict[str, Callable[[str, ReadOnlyDatabase, int], str | None]] = {
    "literal case": mutate_case,
    "letter dropped": mutate_drop,
    "letters swapped": mutate_swap,
    "value from another column": mutate_other_column,
    "column swapped for a sibling": mutate_sibling_column,
}
VALUE_KINDS = ("literal case", "letter dropped", "letters swapped", "value from another column")
