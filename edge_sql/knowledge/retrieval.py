"""Finding the verified answers most like a new question: SQLite's FTS5 with BM25, no embeddings.

The index holds each verified question twice: as written, and masked (DAIL-SQL's finding: the
words that name the schema, and the values, say which database and which rows, not what kind of
question it is; masking them lets questions of the same shape match). Which of the two the agent
uses is the better one on BIRD mini-dev (benchmarks/bench_knowledge.py; `MASKED_BY_DEFAULT`).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from edge_sql.knowledge.identity import words
from edge_sql.tools import ReadOnlyDatabase

FTS_TABLE = "verified_fts"
# The few words that appear in nearly every question: matching on them only slows the search
# (BM25 would weigh them near zero anyway).
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from has have how in is it its of on or that the their "
    "there these this those to was were what when where which who whom whose why with".split()
)
MASKED_BY_DEFAULT = False  # plain BM25 measured better than masked on BIRD mini-dev (see module doc)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NUMBER = re.compile(r"^\d+(?:[.,]\d+)*$")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


@dataclass(frozen=True)
class Match:
    """One verified answer found for a question: its row id and BM25 score (lower is closer)."""

    id: int
    score: float


def schema_words(db: ReadOnlyDatabase) -> frozenset[str]:
    """The words that name `db`'s tables and columns (split at `_`, spaces and camelCase)."""
    names: list[str] = []
    for table in db.table_names() + db.view_names():
        names.append(table)
        names.extend(db.column_names(table))
    return name_words(names)


def name_words(names: list[str]) -> frozenset[str]:
    """Schema names as the words a question would use for them (`CustomerId` -> customer, id)."""
    found: set[str] = set()
    for name in names:
        found.update(words(_CAMEL.sub(" ", name).replace("_", " ")))
    return frozenset(found)


def masked_text(question: str, schema: frozenset[str]) -> str:
    """`question` without its schema words, quoted values and numbers (DAIL-SQL's masking)."""
    unquoted = _QUOTED.sub(" ", question)
    return " ".join(w for w in words(unquoted) if w not in schema and not _NUMBER.match(w))


def fts_query(text: str) -> str | None:
    """An FTS5 query matching any word of `text` but the stopwords (each quoted: no word can be
    read as FTS5 syntax); None when nothing is left to match."""
    kept = list(dict.fromkeys(w for w in words(text) if w not in STOPWORDS))
    if not kept:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in kept)


def create_index(conn: sqlite3.Connection) -> None:
    """The FTS5 table (in the caller's transaction): rowid = the verified answer's id."""
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(question, masked, tokenize='porter unicode61')"
    )


def index_answer(conn: sqlite3.Connection, answer_id: int, question: str, schema: frozenset[str]) -> None:
    """Index one verified question, plain and masked (in the caller's transaction)."""
    conn.execute(
        f"INSERT INTO {FTS_TABLE} (rowid, question, masked) VALUES (?, ?, ?)",
        (answer_id, question, masked_text(question, schema)),
    )


def unindex_answer(conn: sqlite3.Connection, answer_id: int) -> None:
    conn.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid = ?", (answer_id,))


def similar(
    conn: sqlite3.Connection,
    question: str,
    *,
    identity: str,
    path: str,
    k: int,
    masked: bool = MASKED_BY_DEFAULT,
    schema: frozenset[str] = frozenset(),
    exclude: int | None = None,
) -> list[Match]:
    """The `k` verified answers of this database (same schema identity, or same file) whose
    question is closest to `question` by BM25, closest first. `masked` matches the masked
    questions with `question` masked by `schema`; `exclude` leaves one answer out."""
    text = masked_text(question, schema) if masked else question
    query = fts_query(text)
    if query is None or k <= 0:
        return []
    column, weights = ("masked", "0.0, 1.0") if masked else ("question", "1.0, 0.0")
    rows = conn.execute(
        f"SELECT v.id, bm25({FTS_TABLE}, {weights}) AS score FROM {FTS_TABLE} JOIN verified v ON v.id = {FTS_TABLE}.rowid "
        f"WHERE {FTS_TABLE} MATCH ? AND (v.identity = ? OR v.path = ?) AND v.id IS NOT ? "
        "ORDER BY score, v.id LIMIT ?",
        (f"{column} : ({query})", identity, path, exclude, k),
    ).fetchall()
    return [Match(int(i), float(s)) for i, s in rows]
