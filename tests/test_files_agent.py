"""One agent episode on a loaded CSV with the fixture model: the agent explores the table the
CSV became exactly as it explores a database, and the CSV is byte-identical afterwards."""

from __future__ import annotations

import csv
import hashlib
import sqlite3
from pathlib import Path

import edge_sql
from edge_sql.agent import Budget
from edge_sql.files import database_file, entries
from edge_sql.tools import ReadOnlyDatabase, Toolbox

CHINOOK = Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
SMALL = Budget(
    max_tokens=2048,
    max_rounds=3,
    max_think_tokens=8,
    max_final_think_tokens=8,
    max_sql_chars=24,
    max_name_chars=16,
    min_string_chars=8,
    min_think_tokens=4,
    max_final_sql_tokens=24,
    max_calls_per_turn=2,
)


def test_an_episode_on_a_csv(tiny_gguf_fast: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    path = tmp_path / "albums.csv"
    with sqlite3.connect(CHINOOK) as source, open(path, "w", newline="", encoding="utf-8") as out:
        cursor = source.execute("SELECT AlbumId, Title, ArtistId FROM Album ORDER BY AlbumId")
        writer = csv.writer(out)
        writer.writerow([c[0] for c in cursor.description])
        writer.writerows(cursor)
        expected = source.execute("SELECT AlbumId, Title, ArtistId FROM Album ORDER BY AlbumId").fetchall()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with edge_sql.Agent(
        tiny_gguf_fast, n_ctx=2048, n_threads=1, budget=SMALL, pull_if_missing=False, tune=False, prefix_cache=False
    ) as agent:
        result = agent.ask("How many albums are there?", path, seed=1)
        again = agent.ask("How many albums are there?", str(path), seed=1)
    assert result.rounds and all(call.tool for r in result.rounds for call in r.calls)
    assert result.stop != "error"  # the episode ran (a random model's SQL may still fail)
    assert again.transcript == result.transcript  # the second ask opened the same loaded database
    assert len(entries()) == 1 and entries()[0].rows == len(expected) == 347
    with sqlite3.connect(database_file(path)) as loaded:
        assert loaded.execute("SELECT * FROM albums ORDER BY AlbumId").fetchall() == expected
    with ReadOnlyDatabase(path) as db:  # what the episode's tools saw: the CSV as a table
        tools = Toolbox(db)
        assert tools.call("list_tables", {}).output == "albums"
        assert "Title" in tools.call("describe_table", {"table_name": "albums"}).output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
