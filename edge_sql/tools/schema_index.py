"""The offline ranking index of one database's schema, for schemas too big to show whole.

SQLite FTS5 (BM25) over table names, column names and a few stored text values: it ships with
Python's sqlite3, ranks 5,000 tables in milliseconds, and needs no embedding model and nothing
downloaded. The index is built once per schema identity (a hash of every CREATE statement) and
kept in the model store, `$EDGE_SQL_HOME/schema-index/<hash>.sqlite`: never inside or beside
the user's file. A changed schema has another hash, so it gets a fresh index.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import EdgeSqlError
from edge_sql.store.home import store_root
from edge_sql.tools.database import ReadOnlyDatabase
from edge_sql.tools.identifiers import quote_identifier

INDEX_VERSION = 3  # bump when what is stored changes: old files are then never read
INDEX_FOLDER = "schema-index"
VALUE_ROWS = 3  # rows read per table for its stored values ("a few")
MAX_VALUE_CHARS = 40  # longer text is prose, not a name a question would use
PROGRESS_FROM_TABLES = 500  # a build this big says what it is doing on stderr
PROGRESS_EVERY = 1000
GENERIC_KEYS = frozenset({"id", "rowid", "key", "code", "name", "uuid", "pk"})
COPY_SHARE = 0.5  # `orders_2019` is a copy of `orders` when this share of its columns are in `orders`
READ_TIME_LIMIT_S = 10.0  # the schema query's limit: a schema that cannot be read in time is not ranked
_MIXED = re.compile(r"[A-Za-z0-9]+")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")


class SchemaIndexError(Exception):
    """The index cannot be built or read: the caller lists tables in schema order instead.
    Internal (always caught by schema_view and turned into the plain list), so not an
    EdgeSqlError: no user ever sees it as one."""


@dataclass(frozen=True)
class TableFacts:
    """What the index knows of one table or view."""

    name: str
    kind: str  # "table" or "view"
    columns: tuple[str, ...]
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchemaFacts:
    """Every table and view in creation order, and the foreign-key links between tables."""

    tables: tuple[TableFacts, ...]
    links: tuple[tuple[str, str], ...]


def identifier_words(name: str) -> list[str]:
    """`SalesOrderID_2` -> ["sales", "order", "id", "2"]: names split the way people write words,
    so a question's "sales order" meets `SalesOrders` and `sales_orders`; a token that mixes
    letters and digits is kept whole too (`A3`, `1k`: evidence names such columns)."""
    words = [w.lower() for w in _WORD.findall(name)]
    mixed = [t.lower() for t in _MIXED.findall(name) if not t.isdigit() and not t.isalpha()]
    return words + [t for t in mixed if t not in words]


def schema_key(db: ReadOnlyDatabase, *, stem: bool = True) -> str:
    """The schema's identity: every CREATE statement (and the index layout) hashed."""
    digest = hashlib.sha256(f"edge-sql schema index v{INDEX_VERSION} stem={stem}\n".encode())
    for kind, name, sql in db.schema_entries():
        digest.update(f"{kind}\0{name}\0{sql}\0".encode())
    digest.update(str(db.path.resolve()).encode())  # stored values differ between files of one schema
    return digest.hexdigest()[:32]


def index_path(db: ReadOnlyDatabase, *, stem: bool = True) -> Path:
    return store_root() / INDEX_FOLDER / f"{schema_key(db, stem=stem)}.sqlite"


def read_facts(db: ReadOnlyDatabase, *, with_values: bool = True) -> SchemaFacts:
    """Columns, links and a few text values of every table, read through the read-only worker.
    Raises `SchemaIndexError` when the schema cannot be read in time."""
    entries = [(kind, name) for kind, name, _ in db.schema_entries()]
    try:
        rows = db.execute(
            "SELECT m.name, p.name, p.pk FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type IN ('table', 'view') ORDER BY m.rowid, p.cid",
            max_rows=None,
            time_limit_s=READ_TIME_LIMIT_S,
        ).rows
        link_rows = db.execute(
            'SELECT DISTINCT m.name, f."table" FROM sqlite_master AS m '
            "JOIN pragma_foreign_key_list(m.name) AS f WHERE m.type = 'table'",
            max_rows=None,
            time_limit_s=READ_TIME_LIMIT_S,
        ).rows
    except EdgeSqlError as exc:
        raise SchemaIndexError(f"the schema could not be read for ranking ({exc})") from None
    columns: dict[str, list[str]] = {}
    keys: dict[str, list[str]] = {}
    for table, column, pk in rows:
        columns.setdefault(table, []).append(column)
        if pk:
            keys.setdefault(table, []).append(column)
    progress = _Progress(db, len(entries)) if with_values and len(entries) >= PROGRESS_FROM_TABLES else None
    tables = []
    for i, (kind, name) in enumerate(entries):
        values = _stored_values(db, name) if with_values and kind == "table" else ()
        tables.append(TableFacts(name, kind, tuple(columns.get(name, ())), values))
        if progress is not None:
            progress.step(i + 1)
    known = {n.lower() for _, n in entries}
    declared = [(a, b) for a, b in link_rows if a != b and str(b).lower() in known]
    return SchemaFacts(tuple(tables), tuple(declared + _named_links(columns, keys)))


def _named_links(columns: dict[str, list[str]], keys: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Links no foreign key declares: a column named as another table's one-column primary key
    (`transactions.GasStationID` -> `gasstations(GasStationID)`), the usual naming where
    foreign keys were never declared. Generic key names (`id`, `code`) link nothing."""
    by_key: dict[str, list[str]] = {}
    for table, key in keys.items():
        if len(key) == 1 and key[0].lower() not in GENERIC_KEYS:
            by_key.setdefault(key[0].lower(), []).append(table)
    found = []
    for table, names in columns.items():
        for name in names:
            found += [(table, other) for other in by_key.get(name.lower(), []) if other != table]
    return found


def _stored_values(db: ReadOnlyDatabase, table: str) -> tuple[str, ...]:
    """Short text values of the table's first rows (a table it cannot read gives none)."""
    try:
        rows = db.execute(f"SELECT * FROM {quote_identifier(table)} LIMIT {VALUE_ROWS}", max_rows=VALUE_ROWS).rows
    except EdgeSqlError:
        return ()
    found: list[str] = []
    for row in rows:
        for value in row:
            short_text = isinstance(value, str) and 0 < len(value) <= MAX_VALUE_CHARS and not _is_number(value)
            if short_text and value not in found:
                found.append(value)
    return tuple(found)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Progress:
    """`indexing N tables of DB for ranking: i/N` on stderr, now and then, for a big build."""

    def __init__(self, db: ReadOnlyDatabase, total: int) -> None:
        self.total, self.started = total, time.perf_counter()
        print(
            f"edge-sql: indexing the {total:,} tables of {db.path.name} for ranking (once per schema)", file=sys.stderr
        )

    def step(self, done: int) -> None:
        if done % PROGRESS_EVERY == 0 or done == self.total:
            elapsed = time.perf_counter() - self.started
            print(f"edge-sql: indexed {done:,}/{self.total:,} tables ({elapsed:.1f} s)", file=sys.stderr)


def write_index(facts: SchemaFacts, out: Path, *, stem: bool = True) -> None:
    """Write the index to `out` atomically (a temporary file in the same folder, then renamed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=".building-", suffix=".sqlite", dir=out.parent)
    os.close(handle)
    try:
        with sqlite3.connect(temp_name) as conn:
            _fill(conn, facts, stem=stem)
        conn.close()
        os.replace(temp_name, out)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def _fill(conn: sqlite3.Connection, facts: SchemaFacts, *, stem: bool) -> None:
    tokenizer = "porter unicode61" if stem else "unicode61"
    conn.executescript(
        f"""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE tables(
            id INTEGER PRIMARY KEY, name TEXT, kind TEXT, n_columns INTEGER, signature TEXT, copy_of INTEGER
        );
        CREATE TABLE links(a INTEGER, b INTEGER);
        CREATE VIRTUAL TABLE words USING fts5(name, columns, vals, tokenize='{tokenizer}');
        """
    )
    ids = {t.name.lower(): i for i, t in enumerate(facts.tables, start=1)}
    roots = copy_roots(facts.tables)
    conn.executemany(
        "INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i + 1, t.name, t.kind, len(t.columns), _signature(t.columns), roots[i] + 1 if i in roots else None)
            for i, t in enumerate(facts.tables)
        ],
    )
    conn.executemany(
        "INSERT INTO words(rowid, name, columns, vals) VALUES (?, ?, ?, ?)",
        [
            (
                i,
                " ".join(identifier_words(t.name)),
                " ".join(w for c in t.columns for w in identifier_words(c)),
                " ".join(t.values),
            )
            for i, t in enumerate(facts.tables, start=1)
        ],
    )
    pairs = {(ids[a.lower()], ids[b.lower()]) for a, b in facts.links if a.lower() in ids and b.lower() in ids}
    conn.executemany("INSERT INTO links VALUES (?, ?)", sorted(pairs))
    conn.execute("INSERT INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),))


def copy_roots(tables: tuple[TableFacts, ...]) -> dict[int, int]:
    """Position of each copy -> position of the table it copies. A copy's name is the table's
    name and a suffix (`frpm_2019`, `orders_archive_3`), and most of its columns are the table's:
    archives, backups and yearly copies, which rank alike and crowd a list (a join table such as
    `orders_items` shares few columns with `orders` and is no copy). The shortest such name wins; a copy of a copy
    counts as a copy of the first."""
    positions = {t.name.lower(): i for i, t in enumerate(tables) if t.kind == "table"}
    columns = [{c.lower() for c in t.columns} for t in tables]
    roots: dict[int, int] = {}
    for i, table in enumerate(tables):
        parts = table.name.lower().split("_")
        for k in range(1, len(parts)):
            base = positions.get("_".join(parts[:k]))
            shared = len(columns[i] & columns[base]) if base is not None and base != i else 0
            if base is not None and columns[i] and shared >= COPY_SHARE * len(columns[i]):
                roots[i] = base
                break
    for i, base in roots.items():  # a copy of a copy is a copy of the first table
        while base in roots:
            base = roots[base]
        roots[i] = base
    return roots


def _signature(columns: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join(c.lower() for c in columns).encode()).hexdigest()[:16]


def open_index(path: Path) -> sqlite3.Connection:
    """The index, read-only; raises `SchemaIndexError` (one line) if it is corrupt or locked."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.5, check_same_thread=False)
        try:
            version = conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            conn.execute("SELECT count(*) FROM words WHERE words MATCH 'x'").fetchone()
        except BaseException:
            conn.close()
            raise
    except sqlite3.Error as exc:
        raise SchemaIndexError(f"the schema index {path} cannot be read ({exc})") from None
    if version is None or version[0] != str(INDEX_VERSION):
        conn.close()
        raise SchemaIndexError(f"the schema index {path} is from another version")
    return conn


def index_for(db: ReadOnlyDatabase, *, stem: bool = True, with_values: bool = True) -> sqlite3.Connection:
    """The schema's index, built first if this schema has none yet. Raises `SchemaIndexError`."""
    path = index_path(db, stem=stem)
    if not path.exists():
        try:
            write_index(read_facts(db, with_values=with_values), path, stem=stem)
        except (OSError, sqlite3.Error) as exc:
            raise SchemaIndexError(f"the schema index {path} could not be written ({exc})") from None
    return open_index(path)
