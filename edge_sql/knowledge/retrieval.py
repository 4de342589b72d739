"""Finding the verified answers most like a new question: SQLite's FTS5 with BM25, no embeddings.

The index holds each verified question twice: as written, and masked (DAIL-SQL's finding: the
words that name the schema, and the values, say which database and which rows, not what kind of
question it is; masking them lets questions of the same shape match). Which of the two the agent
uses is the better one on BIRD mini-dev (benchmarks/retrieval/bench_knowledge.py; `MASKED_BY_DEFAULT`).
"""

from __future__ import annotations

import hashlib
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
# A word in more than this share of the stored questions says little (BM25 weighs it near zero) but
# costs the most: every question holding it must be scored. Such words are left out of the query,
# keeping at least MIN_TERMS of the rarest (benchmarks/retrieval/bench_knowledge.py: same precision, the
# time per retrieval with 10,000 answers more than halved).
COMMON_SHARE = 0.1
MIN_TERMS = 3
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
    return _any_of(list(dict.fromkeys(w for w in words(text) if w not in STOPWORDS)))


def _any_of(terms: list[str]) -> str | None:
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in terms) if terms else None


def informative_query(conn: sqlite3.Connection, text: str, column: str) -> str | None:
    """`fts_query(text)` without the words held by more than COMMON_SHARE of the stored questions
    (at least the MIN_TERMS rarest words stay)."""
    terms = list(dict.fromkeys(w for w in words(text) if w not in STOPWORDS))
    if len(terms) <= MIN_TERMS:
        return _any_of(terms)
    total = conn.execute(f"SELECT count(*) FROM {FTS_TABLE}_docsize").fetchone()[0]
    counts = {
        t: conn.execute(
            f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?", (f"{column} : {_any_of([t])}",)
        ).fetchone()[0]
        for t in terms
    }
    rarest = sorted(terms, key=lambda t: counts[t])
    kept = [t for t in rarest if counts[t] <= COMMON_SHARE * total]
    return _any_of(kept if len(kept) >= MIN_TERMS else rarest[:MIN_TERMS])


def create_index(conn: sqlite3.Connection) -> None:
    """The FTS5 table (in the caller's transaction): rowid = the verified answer's id."""
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(question, masked, owner, "
        "tokenize='porter unicode61')"
    )


def owner_tokens(identity: str, path: str) -> str:
    """The `owner` column: the schema identity and a token for the file, so that the search keeps
    to one database inside the index (a join to filter afterwards costs more than the search)."""
    return f"i{identity} p{hashlib.sha256(path.encode('utf-8')).hexdigest()[:24]}"


def index_answer(
    conn: sqlite3.Connection, answer_id: int, question: str, schema: frozenset[str], *, identity: str, path: str
) -> None:
    """Index one verified question, plain and masked, under its database (in the caller's transaction)."""
    conn.execute(
        f"INSERT INTO {FTS_TABLE} (rowid, question, masked, owner) VALUES (?, ?, ?, ?)",
        (answer_id, question, masked_text(question, schema), owner_tokens(identity, path)),
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
    column, weights = ("masked", "0.0, 1.0, 0.0") if masked else ("question", "1.0, 0.0, 0.0")
    query = informative_query(conn, text, column)
    if query is None or k <= 0:
        return []
    owner = " OR ".join(owner_tokens(identity, path).split())
    rows = conn.execute(
        f"SELECT rowid, bm25({FTS_TABLE}, {weights}) AS score FROM {FTS_TABLE} "
        f"WHERE {FTS_TABLE} MATCH ? AND rowid IS NOT ? ORDER BY score, rowid LIMIT ?",
        (f"owner : ({owner}) AND {column} : ({query})", exclude, k),
    ).fetchall()
    return [Match(int(i), float(s)) for i, s in rows]


def content_words(text: str) -> set[str]:
    """The words a tied note needs in a question: its own but the stopwords, plurals folded."""
    return {stem(w) for w in words(text) if w not in STOPWORDS}


def stem(word: str) -> str:
    """`customers` -> `customer`: tied notes match a plural and its singular."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
