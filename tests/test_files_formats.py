"""Each data format on real files the tests write with the real libraries (csv, json, xlsxwriter,
pyarrow): the loaded tables hold the source's values with the detected types, and the source
files are byte-identical afterwards."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from edge_sql.files import database_file, load
from edge_sql.tools import ReadOnlyDatabase

PEOPLE = [  # id, name, score, joined
    (1, "Ann", 1.5, "2024-01-02"),
    (2, "Bøb, Jr.", None, "2024-02-03"),
    (3, 'Say "hi"\nthere', -2.25, "2024-03-04"),
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(db: Path, table: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()


def types(db: Path, table: str) -> dict[str, str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {name: kind for _, name, kind, *_ in conn.execute(f'PRAGMA table_info("{table}")')}


def tables(db: Path) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def write_csv(
    path: Path, header: list[str], data: list[tuple], *, encoding: str = "utf-8", delimiter: str = ","
) -> Path:
    with open(path, "w", newline="", encoding=encoding) as out:
        writer = csv.writer(out, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(["" if v is None else v for v in row] for row in data)
    return path


def test_csv_values_and_types(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "people.csv", ["id", "name", "score", "joined"], PEOPLE)
    before = digest(path)
    db = database_file(path)
    assert tables(db) == ["people"]
    assert types(db, "people") == {"id": "INTEGER", "name": "TEXT", "score": "REAL", "joined": "TEXT"}
    assert rows(db, "people") == PEOPLE  # an empty field is NULL; dates stay ISO-8601 text
    with sqlite3.connect(db) as conn:  # and SQLite's date functions read them
        assert conn.execute("SELECT strftime('%m', joined) FROM people WHERE id = 2").fetchone() == ("02",)
    assert digest(path) == before


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "latin-1"])
def test_encodings(tmp_path: Path, encoding: str) -> None:
    data = [(1, "Zoë"), (2, "Ångström"), (3, "plain")]
    path = write_csv(tmp_path / "names.csv", ["id", "näme"], data, encoding=encoding)
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert rows(db, "names") == data
    assert list(types(db, "names")) == ["id", "näme"]  # the byte-order mark is not part of the name
    assert any("Latin-1" in n for n in notes) == (encoding == "latin-1")


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_delimiter_is_sniffed(tmp_path: Path, delimiter: str) -> None:
    data = [(1, "a,b", 2.5), (2, "c", 3.0)]
    path = write_csv(tmp_path / "d.csv", ["id", "text", "value"], data, delimiter=delimiter)
    assert rows(database_file(path), "d") == data


def test_tsv(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.tsv", ["a", "b"], [(1, "x y"), (2, "z")], delimiter="\t")
    assert rows(database_file(path), "t") == [(1, "x y"), (2, "z")]


def test_types_over_the_whole_file(tmp_path: Path) -> None:
    """The type is decided by every row, not the first batch: a text value far down makes the
    column text, and the earlier numbers keep their text."""
    data = [(i, str(i), i * 0.5) for i in range(45_000)]
    data[44_000] = (44_000, "n/a", 1)
    path = write_csv(tmp_path / "big.csv", ["id", "code", "half"], data)
    db = database_file(path)
    assert types(db, "big") == {"id": "INTEGER", "code": "TEXT", "half": "REAL"}
    loaded = rows(db, "big")
    assert len(loaded) == 45_000 and loaded[7] == (7, "7", 3.5) and loaded[44_000] == (44_000, "n/a", 1.0)


def test_a_long_row_far_down(tmp_path: Path) -> None:
    """A row wider than all before it, after the first batch: the extra column holds its value and
    NULL everywhere else (the file is read again with its whole shape)."""
    path = tmp_path / "late.csv"
    path.write_text("a,b\n" + "".join(f"{i},x\n" for i in range(30_000)) + "7,y,extra\n", encoding="utf-8")
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    loaded = rows(db, "late")
    assert len(loaded) == 30_001 and loaded[0] == (0, "x", None) and loaded[-1] == (7, "y", "extra")
    assert any("1 row has more (the extra fields are in column_3)" in n for n in notes)


def test_names_fixed_and_reported_once(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "sqlite_stats.csv", ["Unit Price", "", "id", "ID", " x "], [(1, 2, 3, 4, 5)])
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert tables(db) == ["t_sqlite_stats"]  # SQLite keeps sqlite_* for itself
    assert list(types(db, "t_sqlite_stats")) == ["Unit Price", "column_2", "id", "ID_2", "x"]
    renames = [n for n in notes if "renames columns" in n]
    assert len(renames) == 1 and "'' -> 'column_2'" in renames[0] and "'ID' -> 'ID_2'" in renames[0]
    again: list[str] = []
    database_file(path, log=again.append)
    assert again == []  # shown once: the second use finds the loaded database


def test_ragged_rows_are_kept_and_said(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text("a,b,c\n1,2,3\n4,5\n6,7,8,9,10\n", encoding="utf-8")
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert list(types(db, "ragged")) == ["a", "b", "c", "column_4", "column_5"]
    assert rows(db, "ragged") == [(1, 2, 3, None, None), (4, 5, None, None, None), (6, 7, 8, 9, 10)]
    assert any("1 row has fewer fields" in n and "1 row has more" in n for n in notes)


def test_json_lines(tmp_path: Path) -> None:
    records = [
        {"id": 1, "name": "Ann", "tags": ["a", "b"], "ok": True, "score": 1},
        {"id": 2, "name": "Bob", "meta": {"k": 1}, "ok": False, "score": 2.5},
        {"id": 3, "name": None},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    before = digest(path)
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert types(db, "events") == {
        "id": "INTEGER",
        "name": "TEXT",
        "tags": "TEXT",
        "ok": "INTEGER",
        "score": "REAL",
        "meta": "TEXT",
    }
    loaded = rows(db, "events")
    assert loaded[0] == (1, "Ann", '["a", "b"]', 1, 1.0, None)
    assert loaded[1] == (2, "Bob", None, 0, 2.5, '{"k": 1}')
    assert loaded[2] == (3, None, None, None, None, None)
    assert any("nested" in n and "tags" in n for n in notes)
    assert digest(path) == before


def test_excel_workbook_each_sheet_a_table(tmp_path: Path) -> None:
    import xlsxwriter

    path = tmp_path / "book.xlsx"
    workbook = xlsxwriter.Workbook(str(path))
    dates = workbook.add_format({"num_format": "yyyy-mm-dd"})
    sales = workbook.add_worksheet("Sales 2024")
    sales.write_row(0, 0, ["id", "region", "amount", "day"])
    for r, (i, region, amount, day) in enumerate(
        [(1, "North", 10.5, dt.date(2024, 3, 1)), (2, "South", 7, dt.date(2024, 3, 2))], start=1
    ):
        sales.write_row(r, 0, [i, region, amount])
        sales.write_datetime(r, 3, dt.datetime.combine(day, dt.time()), dates)
    staff = workbook.add_worksheet("staff")
    staff.write_row(0, 0, ["name", "age"])
    staff.write_row(1, 0, ["Ann", 41])
    staff.write_row(2, 0, ["Bob"])
    workbook.add_worksheet("empty")
    workbook.close()
    before = digest(path)
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert tables(db) == ["Sales 2024", "staff"]
    assert types(db, "Sales 2024") == {"id": "INTEGER", "region": "TEXT", "amount": "REAL", "day": "TEXT"}
    assert rows(db, "Sales 2024") == [(1, "North", 10.5, "2024-03-01"), (2, "South", 7.0, "2024-03-02")]
    assert rows(db, "staff") == [("Ann", 41), ("Bob", None)]
    assert any("'empty'" in n for n in notes)
    assert digest(path) == before


def test_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "price": pa.array([1.25, None, 3.5]),
            "name": pa.array(["a", "b", None]),
            "ok": pa.array([True, False, True]),
            "day": pa.array([dt.date(2024, 1, 2), dt.date(2024, 1, 3), None]),
            "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)] * 3, pa.timestamp("s")),
            "amount": pa.array([decimal.Decimal("1.10"), decimal.Decimal("2.00"), None], pa.decimal128(6, 2)),
            "kind": pa.array(["x", "y", "x"]).dictionary_encode(),
            "tags": pa.array([[1, 2], [], None], pa.list_(pa.int64())),
        }
    )
    path = tmp_path / "orders.parquet"
    pq.write_table(table, path, row_group_size=2)
    before = digest(path)
    notes: list[str] = []
    db = database_file(path, log=notes.append)
    assert types(db, "orders") == {
        "id": "INTEGER",
        "price": "REAL",
        "name": "TEXT",
        "ok": "INTEGER",
        "day": "TEXT",
        "at": "TEXT",
        "amount": "REAL",
        "kind": "TEXT",
        "tags": "TEXT",
    }
    loaded = rows(db, "orders")
    assert [row[:5] + row[6:] for row in loaded] == [
        (1, 1.25, "a", 1, "2024-01-02", 1.1, "x", "[1, 2]"),
        (2, None, "b", 0, "2024-01-03", 2.0, "y", "[]"),
        (3, 3.5, None, 1, None, None, "x", None),
    ]
    with sqlite3.connect(db) as conn:  # timestamps as ISO-8601 text (Parquet keeps seconds as ms: ".000")
        assert conn.execute("SELECT DISTINCT datetime(at) FROM orders").fetchall() == [("2024-01-02 03:04:05",)]
    assert any("nested columns kept as JSON text: tags" in n for n in notes)
    assert digest(path) == before


def test_folder_each_file_a_table(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "export"
    folder.mkdir()
    write_csv(folder / "customers.csv", ["id", "name"], [(1, "Ann"), (2, "Bob")])
    pq.write_table(pa.table({"customer": [1, 1, 2], "total": [9.5, 1.0, 3.0]}), folder / "orders.parquet")
    (folder / "notes.txt").write_text("not data")
    (folder / ".hidden.csv").write_text("a\n1\n")
    before = {p.name: digest(p) for p in folder.iterdir()}
    db = database_file(folder)
    assert tables(db) == ["customers", "orders"]
    with ReadOnlyDatabase(folder) as opened:  # the agent's view: the folder opens like a database
        result = opened.execute(
            "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer = c.id "
            "GROUP BY c.name ORDER BY c.name",
            max_rows=10,
        )
        assert result.rows == [("Ann", 10.5), ("Bob", 3.0)]
    assert {p.name: digest(p) for p in folder.iterdir()} == before


def test_several_files_one_database(tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", ["x"], [(1,)])
    b = tmp_path / "b.jsonl"
    b.write_text('{"y": "z"}\n')
    loaded = load([a, b])
    assert loaded.fresh and tables(loaded.path) == ["a", "b"]
    assert [t.rows for t in loaded.summary.tables] == [1, 1]
