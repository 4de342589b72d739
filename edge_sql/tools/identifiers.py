"""Quoting SQLite identifiers, and matching names the way SQLite does (ASCII case-insensitive)."""

from __future__ import annotations

import re

_SIMPLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# SQLite's keywords (https://sqlite.org/lang_keywords.html): a bare identifier must not be one.
SQLITE_KEYWORDS = frozenset(
    """ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE
    BEGIN BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE
    CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE
    DEFERRED DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE
    EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS
    HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS
    ISNULL JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL
    NULLS OF OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY
    RAISE RANGE RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING
    RIGHT ROLLBACK ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION
    TRIGGER UNBOUNDED UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW
    WITH WITHOUT""".split()
)

_QUOTE_PAIRS = (('"', '"'), ("[", "]"), ("`", "`"), ("'", "'"))


def quote_identifier(name: str) -> str:
    """Always-safe quoting: `"name"` with inner double quotes doubled."""
    if "\x00" in name:
        raise ValueError("an SQL identifier cannot contain a NUL character")
    return '"' + name.replace('"', '""') + '"'


def display_identifier(name: str) -> str:
    """The identifier as a person would write it: bare when that is valid, else quoted."""
    if _SIMPLE.match(name) and name.upper() not in SQLITE_KEYWORDS:
        return name
    return quote_identifier(name)


def unquote_identifier(text: str) -> str:
    """Strip one layer of SQL quoting a model may add: `"x"`, `[x]`, `` `x` ``, `'x'`."""
    text = text.strip()
    for opening, closing in _QUOTE_PAIRS:
        if len(text) >= 2 and text[0] == opening and text[-1] == closing:
            inner = text[1:-1]
            return inner.replace(closing * 2, closing) if opening == closing else inner
    return text


def fold_identifier(name: str) -> str:
    """The key SQLite matches identifiers on (ASCII letters lower-cased, nothing else)."""
    return name.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
