"""Table and column names a model can write: the source's own names, fixed only where SQLite or
the agent could not use them (empty, duplicated, control characters, SQLite's reserved prefix).

Spaces and punctuation are kept (the tools quote every name), so a question that says "Unit
Price" finds a column called "Unit Price". Every name that had to change is reported, once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
MAX_NAME_CHARS = 128


@dataclass(frozen=True)
class Rename:
    """One name that changed: `original` as the source wrote it, `name` as the table has it."""

    original: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.original!r} -> {self.name!r} ({self.why})"


def clean(value: object) -> str:
    """A header cell as text: control characters (newlines in a quoted header) become one
    space, surrounding spaces go, and an over-long name is cut."""
    text = value if isinstance(value, str) else _cell_text(value)
    return _CONTROL.sub(" ", text).strip()[:MAX_NAME_CHARS]


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a spreadsheet header of 2024 arrives as 2024.0
    return str(value)


def table_name(raw: str) -> str:
    """A table's name from a file name or sheet name; SQLite keeps `sqlite_*` for itself."""
    name = clean(raw) or "data"
    return "t_" + name if name.lower().startswith("sqlite_") else name


def column_names(raw: Sequence[object]) -> tuple[list[str], list[Rename]]:
    """Unique column names for a header row (compared as SQLite does, ignoring case), and the
    renames: an empty name becomes `column_N` (its position from 1), a repeat gets `_2`, `_3`."""
    names: list[str] = []
    renames: list[Rename] = []
    taken = {clean(value).casefold() for value in raw}
    seen: set[str] = set()
    for position, value in enumerate(raw, start=1):
        original = value if isinstance(value, str) else _cell_text(value)
        name = clean(value)
        why = "control characters or spaces at the ends" if name != original else ""
        if not name:
            name, why = f"column_{position}", "empty name"
        if name.casefold() in seen:
            base, suffix = name, 2
            while f"{base}_{suffix}".casefold() in seen or f"{base}_{suffix}".casefold() in taken:
                suffix += 1
            name, why = f"{base}_{suffix}", "repeated name"
        seen.add(name.casefold())
        names.append(name)
        if why:
            renames.append(Rename(original, name, why))
    return names, renames
