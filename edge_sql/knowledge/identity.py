"""Who a database is (a hash of its schema) and the word-level helpers knowledge matches with.

Notes and verified answers belong to a database's identity, not to its file: a copy of the file,
or the same database at another path, has the same schema and so finds them. The path is kept
too, so that when a schema changes the notes stay with the file and the change can be said.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from edge_sql.tools import ReadOnlyDatabase

_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")


def schema_identity(db: ReadOnlyDatabase) -> str:
    """A short hash of the database's tables and views as stored (name and CREATE statement, in
    name order, whitespace runs folded): equal for copies of one schema, different once a table,
    a column or a view changes. Rows do not count: data comes and goes under the same schema."""
    digest = hashlib.sha256()
    for name in sorted(db.table_names() + db.view_names()):
        digest.update(name.encode("utf-8") + b"\x00")
        digest.update(_SPACE.sub(" ", db.create_statement(name)).strip().encode("utf-8") + b"\x00")
    return digest.hexdigest()[:32]


def database_path(db: ReadOnlyDatabase) -> str:
    """The file the database was opened from, absolute (notes stay with it across schema changes)."""
    return str(db.path.expanduser().resolve())


def normalise_question(text: str) -> str:
    """A question as compared for "the same question": case folded, punctuation dropped, spacing
    collapsed (`How many albums?` == `how many  ALBUMS`)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORD.findall(folded))


def words(text: str) -> list[str]:
    """The words of `text`, case folded (what full-text matching and tied notes compare)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def tables_named(text: str, tables: list[str]) -> list[str]:
    """The tables among `tables` that `text` names as a whole word (case-insensitive): what a note
    or an SQL query is about, so that dropping one of them flags it."""
    found = set(words(text))
    return [t for t in tables if t.casefold() in found or _quoted_in(t, text)]


def _quoted_in(table: str, text: str) -> bool:
    """A table whose name is not one word (`Order Details`) named in quotes or brackets."""
    if _WORD.fullmatch(table):
        return False
    lowered = text.casefold()
    name = table.casefold()
    return any(f"{q}{name}{e}" in lowered for q, e in (('"', '"'), ("`", "`"), ("[", "]"), ("'", "'")))
