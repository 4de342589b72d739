"""Whether a verified answer still holds on the database as it is now.

A verified answer is served at once, marked checked, and given to the model as an example: one
that no longer holds is worse than none. It no longer holds when its stored SQL fails now, or
when its checks find a name or a value the database no longer has. Values the checks did not
find when the answer was verified (a question about "Narnia" answered 0 on purpose) are kept
with it (`absent`) and do not count.
"""

from __future__ import annotations

from edge_sql.checks.findings import Checks, ValueCheck
from edge_sql.tools import ReadOnlyDatabase


def value_key(value: ValueCheck) -> str:
    """A compared value as the checks name it: `Customer.Country = 'Narnia'`."""
    return f"{value.target} {value.op} {value.literal}"


def absent_values(db: ReadOnlyDatabase, sql: str) -> list[str]:
    """The values `sql` compares that `db` does not hold now (stored with a verified answer)."""
    from edge_sql.checks import check_sql  # here: sqlglot loads with the first check

    return sorted({value_key(v) for v in check_sql(db, sql).values if v.found is False})


def why_stale(checks: Checks, absent: frozenset[str]) -> str | None:
    """Why the checks of a verified answer's SQL, run now, say it no longer holds (None: it holds):
    a name the database no longer has, or a value it held when the answer was verified."""
    unknown = [f.message for f in checks.findings if f.code == "unknown_name"]
    if unknown:
        return f"the database no longer has what its SQL names ({'; '.join(unknown)})"
    gone = [value_key(v) for v in checks.values if v.found is False and value_key(v) not in absent]
    if gone:
        return f"the database no longer holds {', '.join(gone)}"
    return None
