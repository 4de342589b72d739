"""Issue 62's sixth pass: a wide table that declares no key still shows its key first. Warehouse
schemas (BigQuery, Snowflake exports) declare none; `describe_table` showed a declared key first,
so a wide table's `Id` was ranked among thousands of unmatched columns and cut."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edge_sql.tools import ReadOnlyDatabase, Toolbox
from edge_sql.tools.schema_view import named_key


def _wide(path: Path, table: str, key: str, *, declared: str = "") -> Path:
    """`table` of 1,500 filler columns, `status`, and `key` last; `declared` a primary key column first."""
    filler = ", ".join(f"reading_{i} REAL" for i in range(1500))
    first = f"{declared} INTEGER PRIMARY KEY, " if declared else ""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"CREATE TABLE {table} ({first}{filler}, status TEXT, {key} INTEGER)")
    conn.close()
    return path


@pytest.mark.parametrize(("table", "key"), [("users", "Id"), ("deathrecords", "id"), ("users", "user_id")])
def test_an_undeclared_key_named_for_the_table_is_shown_first(tmp_path: Path, table: str, key: str) -> None:
    with ReadOnlyDatabase(_wide(tmp_path / "wide.db", table, key)) as db:
        text = Toolbox(db, question="Which ones are active?").call("describe_table", {"table_name": table}).output
    assert text.startswith(f"CREATE TABLE {table} ({key} INTEGER, ")
    assert "-- 1,502 of 1,502" not in text and "of 1,502 columns not shown (shown: the key," in text


def test_a_declared_key_wins_and_other_ids_are_not_keys(tmp_path: Path) -> None:
    with ReadOnlyDatabase(_wide(tmp_path / "wide.db", "users", "Id", declared="account_no")) as db:
        text = Toolbox(db, question="Which ones are active?").call("describe_table", {"table_name": "users"}).output
    assert text.startswith("CREATE TABLE users (account_no INTEGER PRIMARY KEY, ")
    assert not text.startswith("CREATE TABLE users (account_no INTEGER PRIMARY KEY, Id ")
    names = ["orders_id", "ID", "userid", "user_idx", "users_id"]
    assert [names[i] for i in named_key("Users", names)] == ["ID", "userid", "users_id"]
