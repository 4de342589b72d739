"""The store's copy of loaded files: a hit on the second use, a reload after a change, the hash
when only the time changed, nothing half-built after Ctrl-C or a failure, and the `files`
commands that load, list and prune."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.errors import FileLoadError
from edge_sql.evaluation.datasets import check_databases, load_dataset
from edge_sql.evaluation.scoring import score_prediction
from edge_sql.files import entries, files_root, load, loader, prune


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def store_files() -> set[str]:
    root = files_root()
    return {p.name for p in root.iterdir() if p.name not in ("index.json", ".lock")} if root.is_dir() else set()


@pytest.fixture(autouse=True)
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))


def test_second_use_is_a_hit_and_a_change_reloads(tmp_path: Path) -> None:
    path = write(tmp_path / "sales.csv", "region,amount\nNorth,10\nSouth,20\n")
    first = load(path)
    assert first.fresh and first.path.is_file()
    built = first.path.stat().st_mtime_ns
    second = load(path)
    assert not second.fresh and second.path == first.path and first.path.stat().st_mtime_ns == built
    write(path, "region,amount\nNorth,10\nSouth,20\nEast,5\n")
    third = load(path)
    assert third.fresh and third.path != first.path
    assert not first.path.exists()  # the changed file's old database is gone
    assert third.summary.rows == 3
    assert store_files() == {third.path.name}


def test_same_content_with_a_new_time_is_found_by_its_hash(tmp_path: Path) -> None:
    path = write(tmp_path / "sales.csv", "a\n1\n")
    first = load(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    again = load(path)
    assert not again.fresh and again.path == first.path
    assert entries()[0].state == "current"  # the new time is recorded: the next use takes the fast path


def test_ctrl_c_leaves_nothing_half_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "big.csv", "n\n" + "".join(f"{i}\n" for i in range(50_000)))
    original = loader.Sink.insert
    calls = []

    def interrupted(self, table, rows, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, table, rows, **kwargs)

    monkeypatch.setattr(loader.Sink, "insert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load(path)
    assert store_files() == set() and entries() == []
    monkeypatch.setattr(loader.Sink, "insert", original)
    assert load(path).summary.rows == 50_000


def test_a_failure_in_the_second_file_leaves_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    write(folder / "a.csv", "x\n1\n")
    write(folder / "b.csv", 'x,y\n1,"never closed\n')
    with pytest.raises(FileLoadError, match=r"b\.csv line 2: a quoted field is never closed"):
        load(folder)
    assert store_files() == set()


def test_a_killed_load_is_cleaned_up(tmp_path: Path) -> None:
    root = files_root()
    root.mkdir(parents=True)
    stale = root / f"{loader.TEMP_PREFIX}999999999-abc.sqlite"  # no such process
    stale.write_bytes(b"half")
    load(write(tmp_path / "a.csv", "x\n1\n"))
    assert not stale.exists()


def test_files_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    path = write(tmp_path / "sales.csv", "region,amount\nNorth,10\n")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    loaded = runner.invoke(main, ["files", "load", str(path)])
    assert loaded.exit_code == 0, loaded.output
    db = Path(loaded.stdout.strip().splitlines()[-1])
    assert db.is_file() and db.parent == files_root()
    assert "loaded sales (1 rows, 2 columns)" in loaded.stderr
    again = runner.invoke(main, ["files", "load", str(path)])
    assert again.stdout.strip() == str(db) and "loaded already" in again.stderr
    listed = runner.invoke(main, ["files", "list"])
    assert str(path) in listed.output and "current; sales; 1 rows" in listed.output and str(db) in listed.output
    path.unlink()
    assert "missing" in runner.invoke(main, ["files", "list"]).output
    pruned = runner.invoke(main, ["files", "prune"])
    assert pruned.exit_code == 0 and f"removed {db}" in pruned.output and not db.exists()
    assert json.loads((files_root() / "index.json").read_text())["entries"] == {}
    write(path, "region,amount\nNorth,10\n")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_prune_all(tmp_path: Path) -> None:
    db = load(write(tmp_path / "a.csv", "x\n1\n")).path
    assert prune() == [] and db.exists()  # current: kept
    assert prune(everything=True) == [db] and not db.exists()


def test_a_dataset_can_name_data_files(tmp_path: Path) -> None:
    """bench and eval datasets: <db_root>/<db_id>/<db_id>.csv (or a folder of files) stands in for
    <db_id>.sqlite, and the gold SQL runs on the loaded tables."""
    root = tmp_path / "dbs"
    (root / "shop").mkdir(parents=True)
    write(root / "shop" / "shop.csv", "item,price\npen,2\nbook,10\n")
    (root / "zoo").mkdir()
    write(root / "zoo" / "animals.jsonl", '{"name": "ant"}\n{"name": "bee"}\n')
    questions = tmp_path / "questions.json"
    questions.write_text(
        json.dumps(
            [
                {
                    "question_id": 1,
                    "db_id": "shop",
                    "question": "Dearest item?",
                    "SQL": "SELECT item FROM shop ORDER BY price DESC LIMIT 1",
                },
                {
                    "question_id": 2,
                    "db_id": "zoo",
                    "question": "How many animals?",
                    "SQL": "SELECT COUNT(*) FROM animals",
                },
            ]
        )
    )
    dataset = load_dataset(questions, db_root=root)
    assert [q.db_path for q in dataset] == [root / "shop" / "shop.csv", root / "zoo"]
    assert check_databases(dataset) == {}
    assert score_prediction("SELECT 'book'", dataset[0].gold_sql, dataset[0].db_path).correct
    assert score_prediction("SELECT 2", dataset[1].gold_sql, dataset[1].db_path).correct
