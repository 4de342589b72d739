"""Hostile input against the tool layer, as an attacker (or a confused model) would send it.

Eight families: writes, ATTACH, PRAGMA, extensions and file access, denial of service (memory
bombs included), identifiers and `limit`, argument types, and the database file itself. Every
case runs on a fresh copy of a real database and asserts: the exact error text, an answer
within 2x the time limit, the next ordinary query works, and the database's folder (names,
bytes, mtimes) is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_sql.errors import DatabaseError
from edge_sql.tools import ReadOnlyDatabase, Toolbox, format_result

LIMIT_S = 0.5
DATA = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
CHINOOK = DATA / "chinook" / "chinook.sqlite"
NORTHWIND = DATA / "northwind" / "northwind.sqlite"

REFUSED = "Error: not allowed: the database is read-only"
TIMEOUT = f"Error: query exceeded the {LIMIT_S:g} s time limit"
TOO_BIG = "Error: a value in the query grew past the 64 MB limit (string or blob too big)"
TVF_LIST = (
    "json_each, json_tree, pragma_foreign_key_list, pragma_index_info, pragma_index_list, "
    "pragma_table_info, pragma_table_xinfo"
)
TOOLS = "list_tables, describe_table, foreign_keys, join_path, sample_rows, distinct_values, run_query, submit_sql"


def refused(what: str) -> str:
    return f"{REFUSED} ({what} is refused)"


def not_a_read(keyword: str, hint: str = "") -> str:
    return (
        f"{REFUSED}, and only a single SELECT, WITH or VALUES statement can run (this one starts with {keyword}{hint})"
    )


def reading_refused(table: str) -> str:
    return f"Error: not allowed: reading {table} is refused (the table-valued functions that may be read: {TVF_LIST})"


def sqlite3_text(sql: str) -> str:
    """The rows sqlite3 reads from Chinook for `sql`, written as the tools write them."""
    conn = sqlite3.connect(f"file:{CHINOOK}?mode=ro", uri=True)
    try:
        cursor = conn.execute(sql)
        lines = [" | ".join(d[0] for d in cursor.description)]
        lines += [" | ".join(str(v) for v in row) for row in cursor]
    finally:
        conn.close()
    return "\n".join(lines)


def first_rows(table: str, n: int) -> str:
    """What sample_rows shows for `n` rows of a Chinook table."""
    return sqlite3_text(f'SELECT * FROM "{table}" LIMIT {n}')


def folder_state(*folders: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry of the folders: kind, mtime and content hash (a link: its target)."""
    state = {}
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            path = folder / name
            info = os.lstat(path)
            if path.is_symlink():
                content = os.readlink(path)
            elif path.is_file():
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                content = ""
            state[str(path)] = (info.st_mode, info.st_mtime_ns, content)
    return state


def fresh_copy(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    shutil.copyfile(source, target)
    return target


def check_call(
    db_path: Path,
    tool: object,
    args: object,
    expected: str,
    *,
    folders: tuple[Path, ...] = (),
    limit_s: float = LIMIT_S,
    **db_options: object,
) -> None:
    """One hostile call: exact text, time, the next query, and an unchanged folder."""
    watched = folders or (db_path.parent,)
    before = folder_state(*watched)
    with ReadOnlyDatabase(db_path, time_limit_s=limit_s, **db_options) as db:
        tools = Toolbox(db)
        start = time.monotonic()
        result = tools.call(tool, args)
        elapsed = time.monotonic() - start
        assert result.output == expected
        assert result.ok is not expected.startswith("Error: ")
        assert elapsed < 2 * limit_s, elapsed
        following = tools.call(
            "run_query",
            {
                "sql": "SELECT count(*) FROM Customers"
                if db_path.name == NORTHWIND.name
                else "SELECT count(*) FROM Genre"
            },
        )
        assert following.output in ("count(*)\n25", "count(*)\n93")
    assert folder_state(*watched) == before


# -- 1. writes ----------------------------------------------------------------------------------

WRITES = [
    ("DROP TABLE Track", refused("changing the schema")),
    ("DROP TABLE IF EXISTS nope", not_a_read("DROP")),
    ("DROP VIEW IF EXISTS nope", not_a_read("DROP")),
    ("DROP INDEX IF EXISTS nope", not_a_read("DROP")),
    ("DROP TRIGGER IF EXISTS nope", not_a_read("DROP")),
    ("DELETE FROM Track", refused("DELETE on Track")),
    ("DELETE FROM Track WHERE 0", refused("DELETE on Track")),
    ("UPDATE Track SET Name = 'x'", refused("UPDATE on Track")),
    ("INSERT INTO Genre VALUES (99, 'x')", refused("INSERT on Genre")),
    ("REPLACE INTO Genre VALUES (1, 'x')", refused("INSERT on Genre")),
    ("INSERT OR IGNORE INTO Genre VALUES (1, 'x')", refused("INSERT on Genre")),
    ("INSERT INTO Genre VALUES (99, 'x') RETURNING *", refused("INSERT on Genre")),
    ("CREATE TABLE evil(x)", refused("changing the schema")),
    ("CREATE TABLE IF NOT EXISTS Track(x)", refused("changing the schema")),
    ("CREATE TEMP TABLE evil(x)", refused("changing the schema")),
    ("CREATE VIEW v AS SELECT 1", refused("changing the schema")),
    ("CREATE INDEX i ON Track(Name)", refused("changing the schema")),
    ("CREATE TRIGGER t AFTER INSERT ON Genre BEGIN SELECT 1; END", refused("CREATE TRIGGER")),
    ("CREATE VIRTUAL TABLE f USING fts5(x)", refused("changing the schema")),
    ("ALTER TABLE Track RENAME TO Song", refused("ALTER TABLE")),
    ("ALTER TABLE Track ADD COLUMN x", refused("ALTER TABLE")),
    ("VACUUM", not_a_read("VACUUM")),
    ("VACUUM INTO 'copy.db'", not_a_read("VACUUM")),
    ("REINDEX", refused("REINDEX")),
    ("ANALYZE", refused("ANALYZE")),
    ("BEGIN IMMEDIATE", refused("a transaction")),
    ("BEGIN", refused("a transaction")),
    ("COMMIT", refused("a transaction")),
    ("ROLLBACK", refused("a transaction")),
    ("SAVEPOINT s", refused("a savepoint")),
    ("RELEASE s", refused("a savepoint")),
    ("WITH x AS (SELECT 1) DELETE FROM Track", refused("DELETE on Track")),
    ("WITH x AS (SELECT 1) INSERT INTO Genre SELECT 99, 'x'", refused("INSERT on Genre")),
    ("WITH x AS (SELECT 1) UPDATE sqlite_master SET sql = ''", "Error: table sqlite_master may not be modified"),
    ("DELETE FROM sqlite_master", "Error: table sqlite_master may not be modified"),
    ("SELECT 1; DROP TABLE Track", "Error: only one SQL statement is allowed at a time"),
    ("-- only a comment", "Error: the SQL is only a comment; send one SELECT statement"),
    ("/* only a comment */", "Error: the SQL is only a comment; send one SELECT statement"),
    ("\n  -- a\n/* b */  ", "Error: the SQL is only a comment; send one SELECT statement"),
    ("EXPLAIN SELECT 1", not_a_read("EXPLAIN")),
    ("EXPLAIN QUERY PLAN DELETE FROM Track", not_a_read("EXPLAIN")),
]

# -- 2. ATTACH ----------------------------------------------------------------------------------

ATTACH = [
    ("ATTACH DATABASE 'other.db' AS other", refused("ATTACH (or VACUUM)")),
    ("ATTACH ':memory:' AS m", refused("ATTACH (or VACUUM)")),
    ("ATTACH 'file:evil.db?mode=rwc' AS e", refused("ATTACH (or VACUUM)")),
    ("ATTACH DATABASE '/tmp/edge-sql-evil.db' AS e", refused("ATTACH (or VACUUM)")),
    ("DETACH DATABASE main", refused("DETACH")),
    ("SELECT * FROM other.sqlite_master", "Error: no such table: other.sqlite_master"),
    ("SELECT * FROM main.Genre WHERE GenreId = 1", "GenreId | Name\n1 | Rock"),
    ("SELECT count(*) FROM temp.sqlite_master", "count(*)\n0"),
]

# -- 3. PRAGMA ----------------------------------------------------------------------------------

PRAGMAS = [
    ("PRAGMA writable_schema=ON", refused("PRAGMA writable_schema = ON")),
    ("PRAGMA journal_mode=WAL", refused("PRAGMA journal_mode = WAL")),
    ("PRAGMA journal_mode=DELETE", refused("PRAGMA journal_mode = DELETE")),
    ("PRAGMA user_version=5", refused("PRAGMA user_version = 5")),
    ("PRAGMA query_only=OFF", refused("PRAGMA query_only = OFF")),
    ("PRAGMA query_only", refused("PRAGMA query_only")),  # a setting of the sandbox, not the file
    ("PRAGMA main.busy_timeout", refused("PRAGMA busy_timeout")),
    ("PRAGMA journal_mode", refused("PRAGMA journal_mode")),
    ("PRAGMA foreign_key_check", refused("PRAGMA foreign_key_check")),
    ("PRAGMA main.user_version = 5", refused("PRAGMA user_version = 5")),
    ("PRAGMA page_size(1024)", refused("PRAGMA page_size = 1024")),
    ("PRAGMA temp_store", refused("PRAGMA temp_store")),
    ("PRAGMA nonsense", refused("PRAGMA nonsense")),
    ("PRAGMA table_info(Track); DROP TABLE Track", "Error: only one SQL statement is allowed at a time"),
    ("EXPLAIN PRAGMA table_info(Track)", not_a_read("EXPLAIN")),
    # the pragmas that only read run as written, as in the training environment
    (
        "PRAGMA table_info(Track)",
        "cid | name | type | notnull | dflt_value | pk\n0 | TrackId | INTEGER | 1 | None | 1\n"
        "1 | Name | NVARCHAR(200) | 1 | None | 0\n2 | AlbumId | INTEGER | 0 | None | 0\n"
        "3 | MediaTypeId | INTEGER | 1 | None | 0\n4 | GenreId | INTEGER | 0 | None | 0\n"
        "... (showing first 5 rows; more rows exist)",
    ),
    (
        'pragma MAIN."table_info"([Genre]);',
        "cid | name | type | notnull | dflt_value | pk\n"
        "0 | GenreId | INTEGER | 1 | None | 1\n1 | Name | NVARCHAR(120) | 0 | None | 0",
    ),
    (
        "/* columns */ PRAGMA table_xinfo = 'MediaType'",
        "cid | name | type | notnull | dflt_value | pk | hidden\n0 | MediaTypeId | INTEGER | 1 | None | 1 | 0\n"
        "1 | Name | NVARCHAR(120) | 0 | None | 0 | 0",
    ),
    ("PRAGMA index_info(IFK_TrackAlbumId)", "seqno | cid | name\n0 | 2 | AlbumId"),
    ("PRAGMA user_version", "user_version\n0"),
    ("PRAGMA table_info(nope)", "cid | name | type | notnull | dflt_value | pk\n(no rows)"),
    ("PRAGMA database_list", refused("PRAGMA database_list")),
    ("PRAGMA wal_checkpoint(TRUNCATE)", refused("PRAGMA wal_checkpoint = TRUNCATE")),
    ("PRAGMA integrity_check", refused("PRAGMA integrity_check")),
    ("PRAGMA temp_store_directory='/tmp'", refused("PRAGMA temp_store_directory = /tmp")),
    ("PRAGMA mmap_size=1000000000", refused("PRAGMA mmap_size = 1000000000")),
    ("PRAGMA hard_heap_limit=0", refused("PRAGMA hard_heap_limit = 0")),
    ("PRAGMA busy_timeout=100000", refused("PRAGMA busy_timeout = 100000")),
    ("SELECT * FROM pragma_journal_mode", reading_refused("pragma_journal_mode")),
    ("SELECT * FROM pragma_database_list", reading_refused("pragma_database_list")),
    ("SELECT * FROM pragma_compile_options", reading_refused("pragma_compile_options")),
    # the read-only table-valued functions work
    ("SELECT name FROM pragma_table_info('Genre')", "name\nGenreId\nName"),
    ("SELECT name, hidden FROM pragma_table_xinfo('MediaType')", "name | hidden\nMediaTypeId | 0\nName | 0"),
    (
        "SELECT name FROM pragma_index_list('Track') ORDER BY name",
        "name\nIFK_TrackAlbumId\nIFK_TrackGenreId\nIFK_TrackMediaTypeId",
    ),
    ("SELECT name FROM pragma_index_info('IFK_TrackAlbumId')", "name\nAlbumId"),
    (
        'SELECT "table", "from" FROM pragma_foreign_key_list(\'Track\') ORDER BY 1',
        "table | from\nAlbum | AlbumId\nGenre | GenreId\nMediaType | MediaTypeId",
    ),
    ("SELECT key, value FROM json_each('[10, 20]')", "key | value\n0 | 10\n1 | 20"),
    ("SELECT count(*) FROM json_tree('{\"a\": [1, 2]}')", "count(*)\n4"),
]

# -- 4. extensions and file access --------------------------------------------------------------

FILES = [
    ("SELECT load_extension('x')", refused("the function load_extension()")),
    ("SELECT load_extension('/usr/lib/x.so', 'init')", refused("the function load_extension()")),
    ("SELECT readfile('/etc/passwd')", "Error: no such function: readfile"),
    ("SELECT writefile('x.txt', 'y')", "Error: no such function: writefile"),
    ("SELECT edit('x')", "Error: no such function: edit"),
    ("SELECT fts3_tokenizer('simple')", refused("the function fts3_tokenizer()")),
    ("SELECT * FROM sqlite_dbpage", "Error: no such table: sqlite_dbpage"),
    ("SELECT * FROM dbstat", reading_refused("dbstat")),
    ("SELECT * FROM fsdir('.')", "Error: no such table: fsdir"),
    ("SELECT * FROM zipfile('x.zip')", "Error: no such table: zipfile"),
    ("SELECT * FROM generate_series(1, 3)", "Error: no such table: generate_series"),
    ("VACUUM INTO '/tmp/edge-sql-evil-copy.db'", not_a_read("VACUUM")),
]

# -- 5. denial of service -----------------------------------------------------------------------

NESTED_CTE = (
    "WITH c0(x) AS (SELECT 1), "
    + ", ".join(f"c{i}(x) AS (SELECT a.x FROM c{i - 1} a, c{i - 1} b)" for i in range(1, 23))
    + " SELECT count(*) FROM c22"
)

DENIAL = [
    ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", TIMEOUT),
    ("SELECT count(*) FROM Track a, Track b, Track c", TIMEOUT),
    ("SELECT printf('%.*c', 2000000000, 'x')", TIMEOUT),  # one slow function call
    ("SELECT length(printf('%*d', 70000000, 1))", TOO_BIG),  # printf's own NULL made an error
    ("SELECT format('%0*d', 70000000, 1) IS NULL", TOO_BIG),
    ("SELECT sum(length(printf('%.*c', 60000000, Name))) FROM Track", TIMEOUT),  # a 60 MB string per row
    (
        "SELECT count(*) FROM Track a, Track b "
        "WHERE a.Name LIKE printf('%%%s%%', b.Name || printf('%.*c', 20000, '_'))",
        TIMEOUT,
    ),
    ("SELECT instr(printf('%.*c', 20000000, 'a'), printf('%.*c', 10000000, 'a') || 'b')", TIMEOUT),
    ("SELECT count(randomblob(60000000)) FROM Track", TIMEOUT),
    ("SELECT count(*) FROM Track a, Track b WHERE length(printf('%.*c', 100000, a.Name)) > 0", TIMEOUT),
    ("SELECT * FROM Track a, Track b, Track c ORDER BY random()", TIMEOUT),
    (NESTED_CTE, TIMEOUT),  # compile time doubles per level
    ("SELECT zeroblob(1000000000)", TOO_BIG),
    ("SELECT randomblob(1000000000)", TOO_BIG),
    (
        "SELECT replace(replace(replace(printf('%.*c', 1000, 'x'), 'x', printf('%.*c', 1000, 'x')),"
        " 'x', printf('%.*c', 1000, 'x')), 'x', 'yy')",
        TOO_BIG,
    ),
    ("SELECT " + "(" * 5000 + "1" + ")" * 5000, "Error: parser stack overflow"),
    ("SELECT 1" + " UNION ALL SELECT 1" * 1000, "Error: too many terms in compound SELECT"),
    (
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(s) FROM r",
        "length(s)\n1\n2\n4\n8\n16\n... (showing first 5 rows; more rows exist)",
    ),
]

READ_ONLY_PRAGMAS = {
    CHINOOK: [
        "PRAGMA table_info(Track)",
        "PRAGMA main.table_info('Track')",
        'PRAGMA "table_xinfo"("Track")',
        "PRAGMA table_info = track",
        "PRAGMA temp.table_info(Track)",
        "PRAGMA index_list([Track])",
        "PRAGMA main.index_list(PlaylistTrack)",
        "PRAGMA index_info(IFK_TrackAlbumId)",
        "PRAGMA index_xinfo(`sqlite_autoindex_PlaylistTrack_1`)",
        "PRAGMA foreign_key_list(InvoiceLine)",
        "PRAGMA table_list",
        "PRAGMA table_list(Album)",
        "PRAGMA index_list(nope)",
    ],
    NORTHWIND: [
        'PRAGMA table_info("Order Details")',
        "PRAGMA main.table_xinfo([Order Details])",
        "PRAGMA index_list('Order Details')",
        'PRAGMA index_xinfo("sqlite_autoindex_Order Details_1")',
        "PRAGMA index_info('sqlite_autoindex_Order Details_1')",
        "PRAGMA foreign_key_list(`Order Details`)",
        "PRAGMA main.table_list",
        "PRAGMA table_info(Employees)",
    ],
}
HEADER_PRAGMAS = [
    "PRAGMA user_version",
    "PRAGMA main.application_id",
    "pragma SCHEMA_VERSION;",
    "PRAGMA page_count",
    "PRAGMA page_size",
    "PRAGMA freelist_count",
    "PRAGMA encoding",
    "PRAGMA auto_vacuum",
]


@pytest.mark.parametrize("source", [CHINOOK, NORTHWIND], ids=["chinook", "northwind"])
def test_read_only_pragmas_give_what_sqlite3_gives(tmp_path: Path, source: Path) -> None:
    """Each pragma that only reads, with and without a schema prefix and quoting: the columns and
    rows of sqlite3 for the same statement, the same text through run_query (its 5-row cap
    included), and the file unchanged."""
    db = fresh_copy(source, tmp_path / "db")
    statements = READ_ONLY_PRAGMAS[source] + HEADER_PRAGMAS
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    expected = {}
    for sql in statements:
        cursor = reader.execute(sql)
        expected[sql] = ([d[0] for d in cursor.description], cursor.fetchall())
    reader.close()
    empty = [sql for sql, (_, rows) in expected.items() if not rows]
    assert empty == [s for s in statements if "temp." in s or "nope" in s]  # the rest: real rows
    before = folder_state(db.parent)
    with ReadOnlyDatabase(db, time_limit_s=LIMIT_S) as database:
        tools = Toolbox(database)
        for sql in statements:
            result = database.execute(sql, max_rows=None)
            assert (result.columns, result.rows) == expected[sql], sql
            columns, rows = expected[sql]
            text = tools.call("run_query", {"sql": sql})
            assert text.ok and text.output == format_result(columns, rows, max_rows=5), sql
    assert folder_state(db.parent) == before


STATEMENTS = [("writes", *case) for case in WRITES] + [("attach", *case) for case in ATTACH]
STATEMENTS += [("pragma", *case) for case in PRAGMAS] + [("files", *case) for case in FILES]
STATEMENTS += [("denial", *case) for case in DENIAL]


@pytest.mark.parametrize(
    ("family", "sql", "expected"), STATEMENTS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(STATEMENTS)]
)
def test_hostile_statement(tmp_path: Path, family: str, sql: str, expected: str) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "db")
    check_call(db, "run_query", {"sql": sql}, expected)


@pytest.mark.parametrize("tool", ["run_query", "submit_sql"])
def test_hostile_statement_on_northwind(tmp_path: Path, tool: str) -> None:
    db = fresh_copy(NORTHWIND, tmp_path / "db")
    check_call(db, tool, {"sql": 'DROP TABLE IF EXISTS "Order Details"'}, refused("changing the schema"))
    check_call(db, tool, {"sql": "DELETE FROM [Order Details]"}, refused("DELETE on Order Details"))


MEMORY_BOMBS = [
    "SELECT " + ", ".join(["zeroblob(60000000)"] * 8),
    "SELECT zeroblob(60000000) FROM Track",
    "SELECT a.b, b.b, c.b, d.b, e.b FROM (SELECT zeroblob(60000000) AS b) a, "
    "(SELECT zeroblob(60000000) AS b) b, (SELECT zeroblob(60000000) AS b) c, "
    "(SELECT zeroblob(60000000) AS b) d, (SELECT zeroblob(60000000) AS b) e",
]


@pytest.mark.parametrize("sql", MEMORY_BOMBS)
def test_memory_bomb(tmp_path: Path, sql: str) -> None:
    """Under a 256 MB cap, rows of large values fail cleanly (a 3 s limit: filling 60 MB
    blobs takes a while on a busy machine)."""
    db = fresh_copy(CHINOOK, tmp_path / "db")
    check_call(
        db,
        "run_query",
        {"sql": sql},
        "Error: the query ran out of memory (the limit is 256 MB)",
        limit_s=3.0,
        memory_limit_mb=256,
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT printf('%.*c', 100000000, 'x')",
        "SELECT format('%.*c', 100000000, 'x') IS NULL",
        "SELECT length(printf('%100000000c', 'x'))",
    ],
)
def test_a_printf_over_the_cap_is_an_error_not_null(tmp_path: Path, sql: str) -> None:
    """SQLite's printf() answers NULL past the length cap; here it is the cap's error (a 5 s
    limit: building 64 MB one character at a time takes about half a second)."""
    db = fresh_copy(CHINOOK, tmp_path / "db")
    check_call(db, "run_query", {"sql": sql}, TOO_BIG, limit_s=5.0)


PRINTF_AS_BUILT = [
    "SELECT printf('%s-%03d', Name, GenreId), format('%.2f', GenreId / 3.0) FROM Genre",
    "SELECT printf('') IS NULL, printf('%s', '') IS NULL, printf(NULL) IS NULL, printf() IS NULL",
    "SELECT printf(5), printf('%d%%', 7), printf(x'41'), printf('%q|%Q|%w', 'it''s', NULL, 'a\"b')",
    "SELECT length(printf('%.*c', 1000000, 'x'))",
    "SELECT label FROM GenreLabel",  # a view calling printf: trusted_schema=OFF allows only built-ins
    "SELECT printf('[%s]', label) FROM GenreLabel",
    "SELECT hex(printf('%s!', raw)), length(printf('%s', raw)) FROM RawText",  # text that is not UTF-8
]


def test_printf_answers_as_sqlite3_within_the_cap(tmp_path: Path) -> None:
    """The guarded printf gives sqlite3's rows, where a view uses it and where text is not UTF-8."""
    db = fresh_copy(CHINOOK, tmp_path / "db")
    with sqlite3.connect(db) as writer:
        writer.execute("CREATE VIEW GenreLabel AS SELECT printf('%03d %s', GenreId, Name) AS label FROM Genre")
        writer.execute("CREATE TABLE RawText(raw TEXT)")
        writer.execute("INSERT INTO RawText VALUES (CAST(x'ff41' AS TEXT))")
    writer.close()
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    expected = {sql: reader.execute(sql).fetchall() for sql in PRINTF_AS_BUILT}
    reader.close()
    before = folder_state(db.parent)
    with ReadOnlyDatabase(db, time_limit_s=5.0) as database:
        for sql in PRINTF_AS_BUILT:
            assert database.execute(sql, max_rows=None).rows == expected[sql], sql
    assert folder_state(db.parent) == before


# -- 6. identifiers and `limit` -----------------------------------------------------------------

SAMPLE_LIMIT = "Error: sample_rows: limit must be an integer from 1 to 20"
DISTINCT_LIMIT = "Error: distinct_values: limit must be an integer from 1 to 50"

IDENTIFIERS = [
    ("sample_rows", {"table_name": "Genre", "limit": "²"}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": "+-5"}, SAMPLE_LIMIT),
    # every integer out of range is clamped, however large: -5, 1000 and 10**100 alike
    ("sample_rows", {"table_name": "Genre", "limit": "9" * 5000}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": "-" + "9" * 5000}, first_rows("Genre", 1)),
    ("sample_rows", {"table_name": "Genre", "limit": 10**30}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": 10**100}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": -(10**100)}, first_rows("Genre", 1)),
    ("sample_rows", {"table_name": "Genre", "limit": 1000}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": 1e300}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": "0001000"}, first_rows("Genre", 20)),
    ("sample_rows", {"table_name": "Genre", "limit": "1e3"}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": "0x10"}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": "٣"}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": float("nan")}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": float("inf")}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": 2.5}, SAMPLE_LIMIT),
    ("sample_rows", {"table_name": "Genre", "limit": " 2 "}, "GenreId | Name\n1 | Rock\n2 | Jazz"),
    ("sample_rows", {"table_name": "Genre", "limit": -5}, "GenreId | Name\n1 | Rock"),
    ("distinct_values", {"table_name": "Genre", "column_name": "Name", "limit": "1_000"}, DISTINCT_LIMIT),
    (
        "distinct_values",
        {"table_name": "Genre", "column_name": "Name", "limit": 10**12},
        sqlite3_text("SELECT DISTINCT Name FROM Genre"),
    ),  # all 25: the limit is clamped to 50
    ("describe_table", {"table_name": '"; DROP TABLE Track; --'}, 'Error: no such table: "; DROP TABLE Track; --'),
    ("describe_table", {"table_name": "Track; DROP TABLE Track"}, "Error: no such table: Track; DROP TABLE Track"),
    ("describe_table", {"table_name": "x" * 5000}, f"Error: no such table: {'x' * 100}... (5000 characters)"),
    ("describe_table", {"table_name": "sqlite_master"}, "Error: no such table: sqlite_master"),
    (
        "sample_rows",
        {"table_name": "Genre WHERE 1=1; DROP TABLE Track --", "limit": 1},
        "Error: no such table: Genre WHERE 1=1; DROP TABLE Track --",
    ),
    (
        "distinct_values",
        {"table_name": "Genre", "column_name": "Name FROM Genre; DROP TABLE x --"},
        "Error: no such column: Name FROM Genre; DROP TABLE x -- (in table Genre)",
    ),
    (
        "distinct_values",
        {"table_name": "Genre", "column_name": "y" * 5000},
        f"Error: no such column: {'y' * 100}... (5000 characters) (in table Genre)",
    ),
    ("join_path", {"table_a": "Track", "table_b": "' OR 1=1 --"}, "Error: no such table: ' OR 1=1 --"),
    ("foreign_keys", {"table_name": 'Track"; DETACH main; --'}, 'Error: no such table: Track"; DETACH main; --'),
    (
        "sample_rows",
        {"table_name": "pragma_table_info('Track')", "limit": 1},
        "Error: no such table: pragma_table_info('Track')",
    ),
]

# -- 7. argument types --------------------------------------------------------------------------

ARGUMENTS = [
    ("run_query", {"sql": 5}, "Error: run_query: sql must be a string"),
    ("run_query", {"sql": ["SELECT 1"]}, "Error: run_query: sql must be a string"),
    ("run_query", {"sql": None}, "Error: run_query needs the argument 'sql'"),
    ("run_query", {"sql": b"SELECT 1"}, "Error: run_query: sql must be a string"),
    ("run_query", {"sql": "SELECT 1\x00; DROP TABLE Track"}, "Error: run_query: sql contains a NUL character"),
    ("run_query", {"sql": {"q": "SELECT 1"}}, "Error: run_query: sql must be a string"),
    ("run_query", "SELECT 1", "Error: run_query expects its args as a JSON object"),
    ("run_query", 42, "Error: run_query expects its args as a JSON object"),
    (
        "run_query",
        {"sql": "SELECT 1", "sql2": "DROP TABLE Track"},
        "Error: run_query got an unexpected argument 'sql2' (its arguments: sql)",
    ),
    ("run_query", {1: "SELECT 1"}, "Error: run_query got an unexpected argument 1 (its arguments: sql)"),
    ("submit_sql", {"sql": True}, "Error: submit_sql: sql must be a string"),
    ("describe_table", {"table_name": None}, "Error: describe_table needs the argument 'table_name'"),
    ("describe_table", {"table_name": {"name": "Track"}}, "Error: describe_table: table_name must be a string"),
    ("describe_table", {"table_name": "Track\x00"}, "Error: describe_table: table_name contains a NUL character"),
    ("sample_rows", {"table_name": 3.5}, "Error: sample_rows: table_name must be a string"),
    ("sample_rows", {"table_name": "Genre", "limit": [2]}, SAMPLE_LIMIT),
    (None, {}, f"Error: unknown tool None; the tools are: {TOOLS}"),
    (5, {}, f"Error: unknown tool 5; the tools are: {TOOLS}"),
    ("run_query()", {"sql": "SELECT 1"}, f"Error: unknown tool 'run_query()'; the tools are: {TOOLS}"),
    ("RUN_QUERY", {"sql": "SELECT 1"}, f"Error: unknown tool 'RUN_QUERY'; the tools are: {TOOLS}"),
    (
        "run_query",
        {"sql": "SELECT ?"},
        "Error: the SQL has a parameter placeholder (?, :name or $name) but no value is given for "
        "it; write the values into the SQL",
    ),
]

CALLS = [("identifiers", *case) for case in IDENTIFIERS] + [("arguments", *c) for c in ARGUMENTS]


@pytest.mark.parametrize(
    ("family", "tool", "args", "expected"), CALLS, ids=[f"{f}-{i}" for i, (f, _, _, _) in enumerate(CALLS)]
)
def test_hostile_call(tmp_path: Path, family: str, tool: object, args: object, expected: str) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "db")
    check_call(db, tool, args, expected)


# -- 8. the database file itself ----------------------------------------------------------------


def open_fails(path: Path, expected: str, *, folders: tuple[Path, ...], **options: object) -> None:
    """Opening `path` fails with exactly `expected`, quickly, and changes nothing."""
    before = folder_state(*folders)
    start = time.monotonic()
    with pytest.raises(DatabaseError) as caught:
        ReadOnlyDatabase(path, time_limit_s=LIMIT_S, **options)
    assert time.monotonic() - start < 2 * LIMIT_S
    assert str(caught.value) == expected
    assert folder_state(*folders) == before


def wal_database(folder: Path, *, keep_wal: bool) -> Path:
    """A WAL-mode copy of Chinook with one committed change; with `keep_wal`, that change is
    still only in its -wal (as when the writing program is open or was killed)."""
    folder.mkdir(parents=True, exist_ok=True)
    work = folder.parent / (folder.name + "-writer")
    work.mkdir()
    source = fresh_copy(CHINOOK, work)
    conn = sqlite3.connect(source)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("INSERT INTO Genre VALUES (26, 'Polka')")
    conn.commit()
    target = folder / "chinook.sqlite"
    if keep_wal:
        shutil.copyfile(source, target)
        shutil.copyfile(str(source) + "-wal", str(target) + "-wal")
    conn.close()  # checkpoints the change into the file, which stays in WAL mode
    if not keep_wal:
        shutil.copyfile(source, target)
    shutil.rmtree(work)
    return target


def wal_copies() -> set[str]:
    import tempfile

    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("edge-sql-wal-")}


def read_genres(path: Path, *, folders: tuple[Path, ...], **options: object) -> int:
    before, copies = folder_state(*folders), wal_copies()
    with ReadOnlyDatabase(path, time_limit_s=LIMIT_S, **options) as db:
        count = db.execute("SELECT count(*) FROM Genre", max_rows=1).rows[0][0]
        assert Toolbox(db).call("run_query", {"sql": "SELECT Name FROM Genre WHERE GenreId = 1"}).output == "Name\nRock"
    assert folder_state(*folders) == before
    assert wal_copies() <= copies  # the private copy is gone after close
    return count


def test_wal_database_with_log_is_read_from_a_private_copy(tmp_path: Path) -> None:
    db = wal_database(tmp_path / "db", keep_wal=True)
    assert sorted(os.listdir(db.parent)) == ["chinook.sqlite", "chinook.sqlite-wal"]
    assert read_genres(db, folders=(db.parent,)) == 26  # the change in the -wal is seen


def test_wal_database_without_log(tmp_path: Path) -> None:
    db = wal_database(tmp_path / "db", keep_wal=False)
    assert sorted(os.listdir(db.parent)) == ["chinook.sqlite"]
    assert read_genres(db, folders=(db.parent,)) == 26


def test_wal_database_with_empty_log_and_shm(tmp_path: Path) -> None:
    db = wal_database(tmp_path / "db", keep_wal=False)
    Path(str(db) + "-wal").write_bytes(b"")
    Path(str(db) + "-shm").write_bytes(b"\0" * 32768)
    assert read_genres(db, folders=(db.parent,)) == 26


def test_symlink_to_wal_database(tmp_path: Path) -> None:
    db = wal_database(tmp_path / "target", keep_wal=True)
    links = tmp_path / "links"
    links.mkdir()
    (links / "db.sqlite").symlink_to(db)
    assert read_genres(links / "db.sqlite", folders=(links, db.parent)) == 26


def test_symlink_to_database(tmp_path: Path) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "target")
    links = tmp_path / "links"
    links.mkdir()
    (links / "db.sqlite").symlink_to(db)
    check_call(
        links / "db.sqlite",
        "run_query",
        {"sql": "DROP TABLE Track"},
        refused("changing the schema"),
        folders=(links, db.parent),
    )


def test_wal_database_over_the_copy_limit(tmp_path: Path) -> None:
    db = wal_database(tmp_path / "db", keep_wal=True)
    size = (os.path.getsize(db) + os.path.getsize(str(db) + "-wal")) / 1e6
    open_fails(
        db,
        (
            f"{db} is a WAL-mode database with changes not yet written into it (chinook.sqlite-wal); "
            f"edge-sql reads such a database from a private copy, and it is {size:.0f} MB, over the "
            f'0.5 MB copy limit. Close the programs using it, or run `sqlite3 {db} "PRAGMA '
            f'wal_checkpoint(TRUNCATE)"`, then try again'
        ),
        folders=(db.parent,),
        wal_copy_limit_mb=0.5,
    )


def test_fifo_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "db.sqlite"
    os.mkfifo(fifo)
    open_fails(fifo, f"{fifo} is a named pipe (FIFO), not a SQLite database file", folders=(tmp_path,))


def test_symlink_to_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "db.sqlite").symlink_to(tmp_path / "pipe")
    open_fails(
        tmp_path / "db.sqlite",
        f"{tmp_path / 'db.sqlite'} is a named pipe (FIFO), not a SQLite database file",
        folders=(tmp_path,),
    )


def test_device() -> None:
    open_fails(Path("/dev/null"), "/dev/null is a device, not a SQLite database file", folders=())


def test_directory(tmp_path: Path) -> None:
    open_fails(
        tmp_path,
        f"{tmp_path} is a folder with no file edge-sql can load (give a SQLite database file, "
        "or a folder of .csv, .jsonl, .ndjson, .parquet, .tab, .tsv, .xlsm, .xlsx files)",
        folders=(tmp_path,),
    )


def test_broken_symlink(tmp_path: Path) -> None:
    (tmp_path / "db.sqlite").symlink_to(tmp_path / "gone.sqlite")
    open_fails(tmp_path / "db.sqlite", f"database file not found: {tmp_path / 'db.sqlite'}", folders=(tmp_path,))


def test_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    open_fails(
        tmp_path / "a",
        f"cannot read database file {tmp_path / 'a'}: Too many levels of symbolic links",
        folders=(tmp_path,),
    )


def test_path_of_5000_characters(tmp_path: Path) -> None:
    path = tmp_path / ("x" * (5000 - len(str(tmp_path)) - 1))
    assert len(str(path)) == 5000
    open_fails(
        path,
        f"the database path is too long (5000 characters; the limit is 4096): {str(path)[:60]}...",
        folders=(tmp_path,),
    )


def test_path_with_a_too_long_name(tmp_path: Path) -> None:
    path = tmp_path / ("x" * 300)
    open_fails(
        path,
        f"the database path is too long for this system (a part of it exceeds the allowed length): {str(path)[:60]}...",
        folders=(tmp_path,),
    )


def test_empty_and_text_files(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "notes.db").write_text("id,name\n1,Alice\n")
    open_fails(
        tmp_path / "empty.db",
        f"{tmp_path / 'empty.db'} is an empty file (0 bytes), not a SQLite database",
        folders=(tmp_path,),
    )
    open_fails(
        tmp_path / "notes.db",
        f"{tmp_path / 'notes.db'} is not a SQLite database (it lacks the SQLite file header)",
        folders=(tmp_path,),
    )


HOLD_LOCK = (
    "import sqlite3, sys, time\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "conn.execute('BEGIN EXCLUSIVE')\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)

LOCKED = (
    "the database is locked by another program (waited 0.5 s); try again when that program has finished writing to it"
)


def hold_lock(db: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def release(holder: subprocess.Popen) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=10)


def test_database_locked_by_another_process(tmp_path: Path) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "db")
    holder = hold_lock(db)
    try:
        open_fails(db, LOCKED, folders=(db.parent,))
    finally:
        release(holder)
    assert read_genres(db, folders=(db.parent,)) == 25


def test_database_locked_during_a_session(tmp_path: Path) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "db")
    with ReadOnlyDatabase(db, time_limit_s=LIMIT_S) as opened:
        tools = Toolbox(opened)
        holder = hold_lock(db)
        try:
            before = folder_state(db.parent)
            start = time.monotonic()
            assert tools.call("run_query", {"sql": "SELECT count(*) FROM Track"}).output == (f"Error: {LOCKED}")
            assert time.monotonic() - start < 2 * LIMIT_S
            assert folder_state(db.parent) == before
        finally:
            release(holder)
        assert tools.call("run_query", {"sql": "SELECT count(*) FROM Track"}).output == ("count(*)\n3503")


CRASH_MID_WRITE = (
    "import os, sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "conn.execute('PRAGMA cache_size=1')\n"
    "conn.execute('BEGIN')\n"
    "conn.execute(\"UPDATE Track SET Name = Name || 'x'\")\n"
    "os._exit(0)\n"
)


def test_hot_journal(tmp_path: Path) -> None:
    db = fresh_copy(CHINOOK, tmp_path / "db")
    subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(db)], check=True)
    assert sorted(os.listdir(db.parent)) == ["chinook.sqlite", "chinook.sqlite-journal"]
    open_fails(
        db,
        (
            f"the database {db} has a leftover rollback journal (chinook.sqlite-journal): a program "
            f"writing to it crashed before finishing. Open it once with a program that can write to "
            f'it (for example `sqlite3 {db} "PRAGMA integrity_check"`), which undoes the '
            f"unfinished change, then try again"
        ),
        folders=(db.parent,),
    )


def test_no_tables(tmp_path: Path) -> None:
    db = tmp_path / "empty.sqlite"
    sqlite3.connect(db).execute("PRAGMA user_version=1").connection.close()
    open_fails(db, f"{db} has no tables (empty database)", folders=(tmp_path,))


# -- eval and bench run model SQL under the same guarantees -------------------------------------


def test_eval_scores_a_hostile_prediction_as_wrong(tmp_path: Path) -> None:
    from edge_sql.evaluation.scoring import Score, score_prediction

    db = fresh_copy(CHINOOK, tmp_path / "db")
    before = folder_state(db.parent)
    gold = "SELECT count(*) FROM Genre"
    start = time.monotonic()
    assert score_prediction("SELECT printf('%.*c', 2000000000, 'x')", gold, db, timeout_s=LIMIT_S) == Score(
        False, "predicted SQL failed: query exceeded the 0.5 s time limit"
    )
    assert time.monotonic() - start < 2 * LIMIT_S + 1.0  # plus opening the database
    assert score_prediction("DROP TABLE IF EXISTS nope", gold, db, timeout_s=LIMIT_S) == Score(
        False, f"predicted SQL failed: {not_a_read('DROP').removeprefix('Error: ')}"
    )
    assert score_prediction("SELECT 25", gold, db, timeout_s=LIMIT_S) == Score(True)
    assert folder_state(db.parent) == before


def test_bench_agreement_under_hostile_sql(tmp_path: Path) -> None:
    from edge_sql.bench.agreement import NO_RESULT, ResultCache

    db = fresh_copy(CHINOOK, tmp_path / "db")
    before = folder_state(db.parent)
    cache = ResultCache(timeout_s=LIMIT_S)
    try:
        start = time.monotonic()
        assert cache.result(db, NESTED_CTE) is NO_RESULT
        assert cache.result(db, "DELETE FROM Track") is NO_RESULT
        assert time.monotonic() - start < 2 * LIMIT_S + 1.0
        assert cache.agree(db, "SELECT count(*) FROM Genre", "SELECT 25")
    finally:
        cache.close()
    assert folder_state(db.parent) == before
