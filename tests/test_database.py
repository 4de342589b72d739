"""ReadOnlyDatabase on real SQLite files: opening errors, caps, time limits, hostile SQL."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from edge_sql.errors import DatabaseError
from edge_sql.tools import QueryError, ReadOnlyDatabase, Toolbox
from edge_sql.tools.database import DEFAULT_MAX_CELL_CHARS

NEVER_ENDING_CTE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"


def fingerprint(db: Path) -> tuple[str, int, list[str]]:
    """Content hash, mtime, and the files beside the database (journals would show here)."""
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    return digest, db.stat().st_mtime_ns, sorted(os.listdir(db.parent))


def make_sqlite(path: Path, *statements: str) -> Path:
    """A fresh SQLite file built by the test itself (rollback journal, closed cleanly)."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


# -- opening ------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match=r"^database file not found: .*nope\.sqlite$"):
        ReadOnlyDatabase(tmp_path / "nope.sqlite")


def test_directory(tmp_path: Path) -> None:
    """A folder is loaded as its data files (edge_sql/files); one with none is refused."""
    with pytest.raises(DatabaseError, match="is a folder with no file edge-sql can load"):
        ReadOnlyDatabase(tmp_path)


def test_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("id,name\n1,Alice\n")
    with pytest.raises(DatabaseError, match=r"is not a SQLite database .*header"):
        ReadOnlyDatabase(path)


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(DatabaseError, match="is not a SQLite database"):
        ReadOnlyDatabase(path)


def test_sqlite_header_then_garbage(tmp_path: Path) -> None:
    path = tmp_path / "fake.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000)
    with pytest.raises(DatabaseError, match=r"is not a SQLite database \(file is not a database\)"):
        ReadOnlyDatabase(path)


def test_zero_byte_file(tmp_path: Path) -> None:
    path = tmp_path / "zero.db"
    path.touch()
    with pytest.raises(DatabaseError, match=r"is an empty file \(0 bytes\)"):
        ReadOnlyDatabase(path)
    assert path.stat().st_size == 0


def test_valid_database_without_tables(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "blank.db", "PRAGMA user_version = 7", "CREATE TABLE t(x)", "DROP TABLE t")
    assert path.read_bytes().startswith(b"SQLite format 3\x00")
    with pytest.raises(DatabaseError, match=r"has no tables \(empty database\)"):
        ReadOnlyDatabase(path)


def test_path_needing_uri_quoting(tmp_path: Path, chinook_db: Path) -> None:
    folder = tmp_path / "odd dir ?#% ünï"
    folder.mkdir()
    target = folder / "my db#1?.sqlite"
    shutil.copyfile(chinook_db, target)
    with ReadOnlyDatabase(target) as db:
        assert db.execute("SELECT count(*) FROM Track", max_rows=1).rows == [(3503,)]
    assert sorted(os.listdir(folder)) == ["my db#1?.sqlite"]


def test_wal_database_leaves_no_files(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "wal.db", "PRAGMA journal_mode=WAL", "CREATE TABLE t(x)", "INSERT INTO t VALUES (42)")
    assert sorted(os.listdir(tmp_path)) == ["wal.db"]  # the writer checkpointed on close
    before = fingerprint(path)
    with ReadOnlyDatabase(path) as db:
        assert db.execute("SELECT x FROM t", max_rows=5).rows == [(42,)]
    assert fingerprint(path) == before


# -- statements ---------------------------------------------------------------------------


def test_row_cap_and_fetch_all(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db) as db:
        capped = db.execute("SELECT TrackId FROM Track ORDER BY TrackId", max_rows=100)
        assert capped.columns == ["TrackId"]
        assert capped.rows == [(i,) for i in range(1, 101)]
        assert capped.truncated is True
        everything = db.execute("SELECT TrackId FROM Track", max_rows=None)
        assert len(everything.rows) == 3503 and everything.truncated is False
        exact = db.execute("SELECT TrackId FROM Track LIMIT 7", max_rows=7)
        assert len(exact.rows) == 7 and exact.truncated is False


def test_cell_cap(northwind_db: Path) -> None:
    with ReadOnlyDatabase(northwind_db) as db:
        ((notes,),) = db.execute("SELECT Notes FROM Employees WHERE EmployeeID = 2", max_rows=1, max_cell_chars=30).rows
        full = db.execute("SELECT Notes FROM Employees WHERE EmployeeID = 2", max_rows=None)
        full_text = full.rows[0][0]
        assert len(full_text) > 300
        assert notes == f"{full_text[:30]}... [truncated, {len(full_text)} chars]"
        ((picture,),) = db.execute("SELECT Picture FROM Categories WHERE CategoryID = 1", max_rows=1).rows
        assert picture == "<blob, 10151 bytes>"
        exact = db.execute("SELECT Picture FROM Categories WHERE CategoryID = 1", max_rows=None)
        assert isinstance(exact.rows[0][0], bytes) and len(exact.rows[0][0]) == 10151
        ((long,),) = db.execute("SELECT printf('%.*c', 2000, 'x')", max_rows=1).rows
        assert long == "x" * DEFAULT_MAX_CELL_CHARS + "... [truncated, 2000 chars]"


def test_million_row_cross_join_is_capped_quickly(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db, time_limit_s=5.0) as db:
        start = time.monotonic()
        result = db.execute("SELECT * FROM Track a, Track b, Track c", max_rows=1000)
        elapsed = time.monotonic() - start
    assert len(result.rows) == 1000 and result.truncated
    assert len(result.columns) == 27
    assert elapsed < 2.0


@pytest.mark.parametrize("sql", [NEVER_ENDING_CTE, "SELECT count(*) FROM Track a, Track b, Track c"])
def test_time_limit_stops_the_statement(chinook_db: Path, sql: str) -> None:
    with ReadOnlyDatabase(chinook_db) as db:
        start = time.monotonic()
        with pytest.raises(QueryError, match=r"^query exceeded the 0\.5 s time limit$"):
            db.execute(sql, max_rows=None, time_limit_s=0.5)
        elapsed = time.monotonic() - start
        assert 0.45 < elapsed < 2.5
        # the connection is still usable afterwards, under its default limit
        assert db.execute("SELECT count(*) FROM Genre", max_rows=1).rows == [(25,)]


def test_default_time_limit_message(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db, time_limit_s=0.3) as db:
        with pytest.raises(QueryError, match=r"^query exceeded the 0\.3 s time limit$"):
            db.execute(NEVER_ENDING_CTE, max_rows=5)


def test_interrupt_from_another_thread(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db, time_limit_s=30) as db:
        timer = threading.Timer(0.3, db.interrupt)
        timer.start()
        start = time.monotonic()
        with pytest.raises(QueryError, match=r"^query was interrupted$"):
            db.execute(NEVER_ENDING_CTE, max_rows=1)
        assert time.monotonic() - start < 5


HOSTILE = {
    "DROP TABLE Track": "changing the schema is refused",
    "DELETE FROM Track": "DELETE on Track is refused",
    "UPDATE Track SET Name = 'x'": "UPDATE on Track is refused",
    "INSERT INTO Genre VALUES (99, 'x')": "INSERT on Genre is refused",
    "CREATE TABLE evil(x)": "changing the schema is refused",
    "CREATE TEMP TABLE evil(x)": "is refused",
    "CREATE INDEX i ON Track(Name)": "is refused",
    "ALTER TABLE Track ADD COLUMN x": "ALTER TABLE is refused",
    "ALTER TABLE Track RENAME TO Song": "ALTER TABLE is refused",
    "ATTACH DATABASE 'other.db' AS other": "ATTACH",
    "DETACH DATABASE main": "DETACH is refused",
    "PRAGMA writable_schema=ON": "PRAGMA writable_schema = ON is refused",
    "PRAGMA journal_mode=WAL": "PRAGMA journal_mode = WAL is refused",
    "PRAGMA user_version=5": "PRAGMA user_version = 5 is refused",
    "PRAGMA query_only=OFF": "PRAGMA query_only = OFF is refused",
    "VACUUM": "not allowed: the database is read-only",
    "VACUUM INTO 'copy.db'": "not allowed: the database is read-only",
    "SELECT load_extension('x')": "load_extension",
    "BEGIN IMMEDIATE": "a transaction is refused",
    "SAVEPOINT s": "a savepoint is refused",
    "ANALYZE": "ANALYZE is refused",
    "REINDEX": "REINDEX is refused",
    "SELECT 1; DROP TABLE Track": "only one SQL statement is allowed at a time",
    "WITH gone AS (DELETE FROM Track RETURNING *) SELECT * FROM gone": "syntax error",
}


def test_hostile_sql_is_refused_and_nothing_changes(chinook_db: Path) -> None:
    before = fingerprint(chinook_db)
    with ReadOnlyDatabase(chinook_db, time_limit_s=0.5) as db:
        for sql, expected in HOSTILE.items():
            with pytest.raises(QueryError) as caught:
                db.execute(sql, max_rows=5)
            assert expected in str(caught.value), (sql, str(caught.value))
        start = time.monotonic()
        with pytest.raises(QueryError, match="time limit"):
            db.execute(NEVER_ENDING_CTE, max_rows=5)
        assert time.monotonic() - start < 2.5
        capped = db.execute("SELECT * FROM Track a, Track b", max_rows=5)
        assert capped.truncated
        # reads still work after every refusal
        assert db.execute("SELECT count(*) FROM Track", max_rows=1).rows == [(3503,)]
    assert fingerprint(chinook_db) == before
    assert not (chinook_db.parent / "other.db").exists()
    assert not (chinook_db.parent / "copy.db").exists()


def test_hostile_sql_through_the_toolbox(northwind_db: Path) -> None:
    before = fingerprint(northwind_db)
    with ReadOnlyDatabase(northwind_db, time_limit_s=0.5) as db:
        tools = Toolbox(db)
        for sql in [*HOSTILE, NEVER_ENDING_CTE, 'DROP TABLE "Order Details"', "DELETE FROM [Order Details]"]:
            for tool in ("run_query", "submit_sql"):
                result = tools.call(tool, {"sql": sql})
                assert result.ok is False and result.output.startswith("Error: "), (sql, result)
    assert fingerprint(northwind_db) == before


def test_sql_errors_are_query_errors(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db) as db:
        with pytest.raises(QueryError, match=r"^no such table: Foo$"):
            db.execute("SELECT * FROM Foo", max_rows=5)
        with pytest.raises(QueryError, match=r"^no such column: Nope$"):
            db.execute("SELECT Nope FROM Track", max_rows=5)
        with pytest.raises(QueryError, match="syntax error"):
            db.execute("SELEC 1", max_rows=5)
        with pytest.raises(QueryError, match=r"^empty SQL statement$"):
            db.execute("   ", max_rows=5)


def test_schema_helpers(northwind_db: Path) -> None:
    with ReadOnlyDatabase(northwind_db) as db:
        assert "Order Details" in db.table_names()
        assert "sqlite_sequence" not in db.table_names()
        assert "Order Details Extended" in db.view_names()
        assert db.resolve_table("order DETAILS") == "Order Details"
        assert db.resolve_table("[Order Details]") == "Order Details"
        assert db.resolve_table('"order details"') == "Order Details"
        assert db.create_statement("Order Details").startswith("CREATE TABLE [Order Details](")
        assert db.column_names("Order Details") == ["OrderID", "ProductID", "UnitPrice", "Quantity", "Discount"]
        assert db.primary_key("Order Details") == ["OrderID", "ProductID"]
        assert db.resolve_column("order details", "unitprice") == "UnitPrice"
        with pytest.raises(QueryError, match=r"^no such table: Order Detail$"):
            db.resolve_table("Order Detail")
        details_fks = [fk for fk in db.foreign_keys() if fk.from_table == "Order Details"]
        assert [(fk.from_columns, fk.to_table, fk.to_columns) for fk in details_fks] == [
            (("OrderID",), "Orders", ("OrderID",)),
            (("ProductID",), "Products", ("ProductID",)),
        ]
