"""The result text the model reads (and the CLI shows): `col_a | col_b`, then `v1 | v2` rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NO_ROWS = "(no rows)"


def format_value(value: Any) -> str:
    """One cell as text: NULL as `None`, Python's str() otherwise, newlines escaped."""
    text = str(value)
    return text.replace("\r", "\\r").replace("\n", "\\n")


def format_result(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, max_rows: int, more_rows: bool = False
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
