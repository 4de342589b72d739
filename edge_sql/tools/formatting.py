"""The result text the model reads (and the CLI shows), as the published SQaLe episodes show it.

`col_a | col_b`, then `v1 | v2` rows; NULL as `None`; floats as Python prints them
(`12.037037037037036`); a newline inside a cell as one space (a `run_query` on sqlite_master
shows `CREATE TABLE systemlogs (     id ...`). `describe_table` returns the DDL on one line:
single spaces, no space after `(` or before `)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NO_ROWS = "(no rows)"


_LINE_BREAKS = str.maketrans({"\n": " ", "\r": " "})


def format_value(value: Any) -> str:  # Any: sqlite3 (a cell as its column holds it)
    """One cell as text: NULL as `None`, Python's str() otherwise, each line break one space."""
    return str(value).replace("\r\n", "\n").translate(_LINE_BREAKS)


def one_line_ddl(sql: str) -> str:
    """A CREATE statement on one line, as the published `describe_table` outputs show it.

    Runs of whitespace become one space and there is no space after `(` or before `)`, outside
    quoted strings and identifiers (whose text stays as written).
    """
    out: list[str] = []
    quote: str | None = None
    pending_space = False
    for char in sql.strip():
        if quote is not None:
            out.append(char)
            if char == quote:
                quote = None
            continue
        if char.isspace():
            pending_space = True
            continue
        if pending_space and char != ")" and out and out[-1] != "(":
            out.append(" ")
        pending_space = False
        out.append(char)
        if char in "'\"`[":
            quote = "]" if char == "[" else char
    return "".join(out)


def format_result(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],  # Any: sqlite3
    *,
    max_rows: int,
    more_rows: bool = False,
) -> str:
    """A header line, at most `max_rows` rows, and a note when more rows exist.

    `more_rows` says the caller already knows there are rows beyond `rows` (a capped fetch).
    """
    lines = [" | ".join(columns)] if columns else []
    shown = rows[:max_rows]
    lines += [" | ".join(format_value(v) for v in row) for row in shown]
    if not rows:
        lines.append(NO_ROWS)
    elif more_rows or len(rows) > max_rows:
        lines.append(f"... (showing first {len(shown)} rows; more rows exist)")
    return "\n".join(lines)
