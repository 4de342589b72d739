"""The offline ranking index of one database's schema, for schemas too big to show whole.

SQLite FTS5 (BM25) over table names, column names and a few stored text values: it ships with
Python's sqlite3, ranks 5,000 tables in milliseconds, and needs no embedding model and nothing
downloaded. The index is built once per schema identity (a hash of every CREATE statement) and
kept in the model store, `$EDGE_SQL_HOME/schema-index/<hash>.sqlite`: never inside or beside
the user's file. A changed schema has another hash, so it gets a fresh index.
"""

from __future__ import annotations

import bisect
import hashlib
import os
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
from edge_sql.tools.schema_words import identifier_words, name_forms, schema_vocabulary, split_words

INDEX_VERSION = 9  # bump when what is stored changes: old files are then never read
INDEX_FOLDER = "schema-index"
VALUE_ROWS = 3  # rows read per table for its stored values ("a few")
MAX_VALUE_CHARS = 40  # longer text is prose, not a name a question would use
PROGRESS_FROM_TABLES = 500  # a build this big says what it is doing on stderr
PROGRESS_EVERY = 1000
GENERIC_KEYS = frozenset({"id", "rowid", "key", "code", "name", "uuid", "pk"})
# Last words of a column that refers to another table's key: `cust_no` -> customers(number).
KEY_WORDS = frozenset({"id", "no", "num", "nr", "number", "code", "key", "ref"})
MAX_NAMED_BY = 8  # a table named by columns of more tables than this is a common word, not a join
MIN_KEY_PREFIX = 3  # `cust` of `cust_no` names customers; `c` names nothing
COPY_DIFFERENCE = 0.2  # a copy differs from its table in at most one column or this share of them
READ_TIME_LIMIT_S = 10.0  # the schema query's limit: a schema that cannot be read in time is not ranked


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


@dataclass(frozen=True)
class IndexOptions:
    """What the index holds (the benchmark builds it without each part to show what it buys)."""

    stem: bool = True  # porter stemming ("orders" meets "order")
    split: bool = True  # glued names split against the schema's words (`workorder`: work order)
    keys: bool = True  # links by key names no foreign key declares (`cust_no` -> customers(number))
    same_shape: bool = True  # copies only of the same columns, or nearly, both ways (False: half of the copy's)
    table_columns: bool = True  # links by a column named as a table (`course_offering.semester` -> semester)
    english: bool = True  # glued names the schema's words leave whole split by English word frequency


DEFAULT_OPTIONS = IndexOptions()


def schema_key(db: ReadOnlyDatabase, options: IndexOptions = DEFAULT_OPTIONS) -> str:
    """The schema's identity: every CREATE statement (and the index layout) hashed."""
    digest = hashlib.sha256(f"edge-sql schema index v{INDEX_VERSION} {options}\n".encode())
    for kind, name, sql in db.schema_entries():
        digest.update(f"{kind}\0{name}\0{sql}\0".encode())
    digest.update(str(db.path.resolve()).encode())  # stored values differ between files of one schema
    return digest.hexdigest()[:32]


def index_path(db: ReadOnlyDatabase, options: IndexOptions = DEFAULT_OPTIONS) -> Path:
    """The index file for the schema (its key hashed again only when the file or its WAL changed:
    every question of a session asks, and 5,000 CREATE statements take milliseconds to hash)."""
    stamp = (str(db.path.resolve()), _file_stamp(db.path), _file_stamp(Path(f"{db.path}-wal")), options)
    key = _KEYS.get(stamp)
    if key is None:
        key = schema_key(db, options)
        while len(_KEYS) >= 64:
            _KEYS.pop(next(iter(_KEYS)))
        _KEYS[stamp] = key
    return store_root() / INDEX_FOLDER / f"{key}.sqlite"


_KEYS: dict[tuple, str] = {}


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def read_facts(
    db: ReadOnlyDatabase, options: IndexOptions = DEFAULT_OPTIONS, *, with_values: bool = True
) -> SchemaFacts:
    """Columns, links and a few text values of every table, read through the read-only worker.
    Raises `SchemaIndexError` when the schema cannot be read in time."""
    entries = [(kind, name) for kind, name, _ in db.schema_entries()]
    try:
        rows = db.execute(
            "SELECT m.name, p.name, p.pk, p.type FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
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
    affinities: dict[tuple[str, str], str] = {}
    for table, column, pk, declared in rows:
        columns.setdefault(table, []).append(column)
        affinities[(table, column)] = type_affinity(declared)
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
    named = _named_links(columns, keys) + (_prefixed_links(columns, keys) if options.keys else [])
    named += _table_named_links(columns, keys, affinities) if options.table_columns else []
    return SchemaFacts(tuple(tables), tuple(declared + named))


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


def _prefixed_links(columns: dict[str, list[str]], keys: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Links by a column that names a table and a key word: `orders.cust_no` -> `customers`
    (one-column key `number`), `visits.patient_id` -> `patients(id)`. The column's words before
    its last (`cust`, at least `MIN_KEY_PREFIX` letters) begin the table's name; both last words
    are key words (`KEY_WORDS`); of several such tables the shortest name wins (`customers`, not
    `customers_archive`)."""
    targets = sorted(
        (table.lower().replace("_", ""), table)
        for table, key in keys.items()
        if len(key) == 1 and (identifier_words(key[0]) or [""])[-1] in KEY_WORDS
    )
    compact = [c for c, _ in targets]
    found = []
    for table, names in columns.items():
        for name in names:
            words = identifier_words(name)
            prefix = "".join(words[:-1])
            if len(words) < 2 or words[-1] not in KEY_WORDS or len(prefix) < MIN_KEY_PREFIX or not prefix.isalpha():
                continue
            start = bisect.bisect_left(compact, prefix)
            end = bisect.bisect_left(compact, prefix + "\U0010ffff", lo=start)
            matches = [targets[i] for i in range(start, end) if targets[i][1] != table]
            if matches:
                found.append((table, min(matches, key=lambda m: (len(m[0]), m[0]))[1]))
    return found


def _table_named_links(
    columns: dict[str, list[str]], keys: dict[str, list[str]], affinities: dict[tuple[str, str], str]
) -> list[tuple[str, str]]:
    """Links by a column named as a table with a one-column key of the column's type:
    `course_offering.semester INTEGER` -> `semester(semester_id INTEGER)`, `orders.customer` ->
    `customers(id)` (the table's name, or it less a plural ending). A `status TEXT` column holds
    a status, not `status(statusId INTEGER)`'s key: no link. Generic names (`id`, `name`, `code`)
    link nothing, nor does a table so named in more than `MAX_NAMED_BY` tables (a `country`
    column in hundreds of tables is a word they share, and `country`'s neighbours would be all)."""
    targets: dict[str, str] = {}
    for table, key in sorted(keys.items(), key=lambda item: len(item[0])):
        if len(key) == 1:
            for form in name_forms(table):
                targets.setdefault(form, table)
    found: dict[str, list[str]] = {}
    for table, names in columns.items():
        for name in names:
            other = targets.get(name.lower())
            if other is None or other == table or name.lower() in GENERIC_KEYS:
                continue
            if affinities.get((table, name)) == affinities.get((other, keys[other][0])):
                found.setdefault(other, []).append(table)
    return [(table, other) for other, tables in found.items() if len(tables) <= MAX_NAMED_BY for table in tables]


def type_affinity(declared: str | None) -> str:
    """SQLite's column affinity of a declared type (its rules, in their order): what a value
    stored in the column becomes, so what it can be compared with."""
    kind = (declared or "").upper()
    if "INT" in kind:
        return "INTEGER"
    if any(word in kind for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in kind or not kind:
        return "BLOB"
    if any(word in kind for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


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


def write_index(facts: SchemaFacts, out: Path, options: IndexOptions = DEFAULT_OPTIONS) -> None:
    """Write the index to `out` atomically (a temporary file in the same folder, then renamed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=".building-", suffix=".sqlite", dir=out.parent)
    os.close(handle)
    try:
        with sqlite3.connect(temp_name) as conn:
            _fill(conn, facts, options)
        conn.close()
        os.replace(temp_name, out)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def _fill(conn: sqlite3.Connection, facts: SchemaFacts, options: IndexOptions) -> None:
    tokenizer = "porter unicode61" if options.stem else "unicode61"
    conn.executescript(
        f"""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE tables(
            id INTEGER PRIMARY KEY, name TEXT, kind TEXT, n_columns INTEGER, signature TEXT, copy_of INTEGER,
            variant_of INTEGER
        );
        CREATE TABLE links(a INTEGER, b INTEGER);
        CREATE TABLE vocabulary(word TEXT PRIMARY KEY) WITHOUT ROWID;
        CREATE VIRTUAL TABLE words USING fts5(name, columns, vals, tokenize='{tokenizer}');
        """
    )
    ids = {t.name.lower(): i for i, t in enumerate(facts.tables, start=1)}
    roots = copy_roots(facts.tables, same_shape=options.same_shape)
    variants = {i: r for i, r in copy_roots(facts.tables, same_shape=False).items() if i not in roots}
    variants = {i: roots.get(r, r) for i, r in variants.items() if not _link_shaped(facts.tables[i].columns)}
    variants = {i: r for i, r in variants.items() if r != i}  # a look-alike of a copy belongs to the copied table
    conn.executemany(
        "INSERT INTO tables VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                i + 1,
                t.name,
                t.kind,
                len(t.columns),
                _signature(t.columns),
                roots[i] + 1 if i in roots else None,
                variants[i] + 1 if i in variants else None,
            )
            for i, t in enumerate(facts.tables)
        ],
    )
    vocabulary = schema_vocabulary([t.name for t in facts.tables] + [c for t in facts.tables for c in t.columns])
    words = (lambda name: split_words(name, vocabulary, english=options.english)) if options.split else identifier_words
    conn.executemany(
        "INSERT INTO words(rowid, name, columns, vals) VALUES (?, ?, ?, ?)",
        [
            (i, " ".join(words(t.name)), " ".join(w for c in t.columns for w in words(c)), " ".join(t.values))
            for i, t in enumerate(facts.tables, start=1)
        ],
    )
    if options.split:
        conn.executemany("INSERT INTO vocabulary VALUES (?)", [(w,) for w in sorted(vocabulary)])
    pairs = {(ids[a.lower()], ids[b.lower()]) for a, b in facts.links if a.lower() in ids and b.lower() in ids}
    conn.executemany("INSERT INTO links VALUES (?, ?)", sorted(pairs))
    conn.execute("INSERT INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),))


def copy_roots(tables: tuple[TableFacts, ...], *, same_shape: bool = True) -> dict[int, int]:
    """Position of each copy -> position of the table it copies. A copy's name is the table's
    name and a suffix (`frpm_2019`, `orders_archive_3`), and its columns are the table's, or
    nearly, both ways (`same_shape`: at most one column, or a fifth of them, in one and not the
    other): archives and backups, which rank alike and crowd a list. A link table such as
    `player_in_team(team_id, player_id)` beside `player`, or a yearly table whose columns
    changed, is no copy. The shortest such name wins; a copy of a copy counts as a copy of the
    first. Without `same_shape`, the rule before it: half of the copy's columns in the table."""
    positions = {t.name.lower(): i for i, t in enumerate(tables) if t.kind == "table"}
    columns = [{c.lower() for c in t.columns} for t in tables]
    roots: dict[int, int] = {}
    for i, table in enumerate(tables):
        parts = table.name.lower().split("_")
        for k in range(1, len(parts)):
            base = positions.get("_".join(parts[:k]))
            if base is not None and base != i and columns[i] and _copy_shape(columns[i], columns[base], same_shape):
                roots[i] = base
                break
    for i, base in roots.items():  # a copy of a copy is a copy of the first table
        while base in roots:
            base = roots[base]
        roots[i] = base
    return roots


def _link_shaped(columns: tuple[str, ...]) -> bool:
    """A link table: at most three columns, two of them keys (`team_id`, `player_id`)."""
    return len(columns) <= 3 and sum((identifier_words(c) or [""])[-1] in KEY_WORDS for c in columns) >= 2


def _copy_shape(copy: set[str], table: set[str], same_shape: bool) -> bool:
    if not same_shape:
        return len(copy & table) >= 0.5 * len(copy)
    return len(copy ^ table) <= max(1.0, COPY_DIFFERENCE * len(copy | table)) and len(copy & table) >= 2


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


def index_for(
    db: ReadOnlyDatabase, options: IndexOptions = DEFAULT_OPTIONS, *, with_values: bool = True
) -> sqlite3.Connection:
    """The schema's index, built first if this schema has none yet. Raises `SchemaIndexError`."""
    path = index_path(db, options)
    if not path.exists():
        try:
            write_index(read_facts(db, options, with_values=with_values), path, options)
        except (OSError, sqlite3.Error) as exc:
            raise SchemaIndexError(f"the schema index {path} could not be written ({exc})") from None
    return open_index(path)
