"""`edge-sql notes` as a user runs it: a real process, a real database, the store in a temp home."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture
def notes(home):

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-c", "from edge_sql.cli import main; main()", "notes", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "EDGE_SQL_HOME": str(home)},
            timeout=120,
        )
        assert done.returncode == code, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    return run


def test_add_verify_list_remove_export_import(notes, chinook_db, tmp_path_factory):
    before = hashlib.sha256(chinook_db.read_bytes()).hexdigest()
    db = str(chinook_db)
    assert notes("add", "--db", db, "amounts are in US dollars").stdout == "added note 1\n"
    added = notes("add", "--db", db, "--question", "revenue", "revenue means SUM(Invoice.Total)").stdout
    assert added == "added note 2 (with questions about: revenue)\n"
    assert notes("verify", "--db", db, "How many albums?", "SELECT COUNT(*) FROM Album").stdout == (
        'kept as verified (v1): "How many albums?" -> SELECT COUNT(*) FROM Album\n'
    )
    listed = notes("list", "--db", db).stdout.splitlines()
    assert listed[:2] == ["   1  amounts are in US dollars", "   2  revenue means SUM(Invoice.Total) [with: revenue]"]
    assert listed[2].startswith("  v1  How many albums? -> SELECT COUNT(*) FROM Album  (20")
    out = tmp_path_factory.mktemp("out") / "chinook-notes.json"
    assert notes("export", "--db", db, str(out)).stdout == f"exported 2 notes and 1 verified answer to {out}\n"
    assert "exists: pass --force" in notes("export", "--db", db, str(out), code=1).stderr
    assert notes("remove", "--db", db, "1").stdout == "removed note 1 (`notes undo` brings it back)\n"
    assert notes("remove", "--db", db, "v1").stdout == "removed verified answer v1 (`notes undo` brings it back)\n"
    assert notes("remove", "--db", db, "1", code=1).stderr == (
        "Error: no note 1 for chinook.sqlite (`edge-sql notes list` shows them)\n"
    )
    assert notes("import", "--db", db, str(out)).stdout == (
        f"imported from {out}: added 1 note and 1 verified answer; skipped 1 already stored\n"
    )
    data = json.loads(notes("list", "--db", db, "--json").stdout)
    assert [n["text"] for n in data["notes"]] == ["revenue means SUM(Invoice.Total)", "amounts are in US dollars"]
    assert [(a["id"], a["sql"]) for a in data["verified"]] == [(2, "SELECT COUNT(*) FROM Album")]  # ids never reused
    assert hashlib.sha256(chinook_db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in chinook_db.parent.iterdir()) == ["chinook.sqlite"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("add", "--db", "{db}", " "), "Error: empty note: write what the model should know"),
        (
            ("add", "--db", "{db}", "x" * 300),
            "Error: the note is 300 bytes (UTF-8, an upper bound on its tokens) long as a hint, over the bound of 256",
        ),
        (
            ("verify", "--db", "{db}", "wipe it", "DELETE FROM Album"),
            "Error: refused: a verified answer must be one read-only",
        ),
        (("import", "--db", "{db}", "{bad}"), "Error: knowledge file {bad} is not JSON"),
        (("import", "--db", "{db}", "{missing}"), "Error: knowledge file not found: {missing}"),
        (("list", "--db", "{missing}"), "Error: "),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(notes, chinook_db, tmp_path_factory, args, says):
    scratch = tmp_path_factory.mktemp("scratch")
    (scratch / "bad.json").write_text("{not json", encoding="utf-8")
    fill = {"db": str(chinook_db), "bad": str(scratch / "bad.json"), "missing": str(scratch / "missing.json")}
    done = notes(*(a.format(**fill) for a in args), code=1)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(says.format(**fill))
    assert json.loads(notes("list", "--db", str(chinook_db), "--json").stdout) == {"notes": [], "verified": []}


def test_verify_refuses_to_replace_unless_told_and_the_history_shows_and_undoes_it(notes, home, chinook_db):
    db = str(chinook_db)
    notes("verify", "--db", db, "How many albums are there?", "SELECT COUNT(*) FROM Album")
    store = home / "knowledge.sqlite"
    before = _dump(store)
    refused = notes("verify", "--db", db, "How many albums are there?", "SELECT COUNT(AlbumId) FROM Album", code=1)
    assert refused.stdout == "" and refused.stderr == (
        'Error: refused: "How many albums are there?" already has a verified answer (v1): SELECT COUNT(*) FROM Album; '
        "pass --replace to replace it (`notes history` keeps the old one)\n"
    )
    assert _dump(store) == before  # the whole store, byte for byte the same rows
    same = notes("verify", "--db", db, "how many albums are there", "SELECT COUNT(*) FROM Album")
    assert same.stdout == (  # the stored answer, its question as first written
        'already verified (v1), nothing changed: "How many albums are there?" -> SELECT COUNT(*) FROM Album\n'
    )
    replaced = notes(
        "verify", "--db", db, "--replace", "How many albums are there?", "SELECT COUNT(AlbumId) FROM Album"
    )
    assert replaced.stdout == (
        'replaced v1 (SELECT COUNT(*) FROM Album) by verified v2: "How many albums are there?" -> '
        "SELECT COUNT(AlbumId) FROM Album\n"
    )
    history = notes("history", "--db", db).stdout.splitlines()
    assert [line.split("  ", 3)[2:] for line in history] == [
        ["command line", 'added v1 "How many albums are there?": SELECT COUNT(*) FROM Album'],
        [
            "command line",
            'replaced v1 by v2 "How many albums are there?": SELECT COUNT(*) FROM Album -> SELECT COUNT(AlbumId) FROM Album',
        ],
    ]
    assert [line.split("  ")[0] for line in history] == ["#1", "#2"]
    assert (
        notes("undo", "--db", db, "2").stdout
        == "undid change #2 (replaced verified answer): v1 is back in place of v2\n"
    )
    listed = json.loads(notes("list", "--db", db, "--json").stdout)["verified"]
    assert [(a["id"], a["sql"]) for a in listed] == [(1, "SELECT COUNT(*) FROM Album")]
    assert "  (undone " in notes("history", "--db", db).stdout.splitlines()[1]
    before = _dump(store)
    assert notes("undo", "--db", db, "2", code=1).stderr.startswith("Error: change #2 was undone already")
    assert _dump(store) == before


def _dump(store: Path) -> list[str]:
    with sqlite3.connect(store) as conn:
        return list(conn.iterdump())


def test_run_answers_a_verified_question_without_loading_a_model(notes, home, chinook_db, tmp_path_factory):
    db = str(chinook_db)
    notes("verify", "--db", db, "How many albums?", "SELECT COUNT(*) FROM Album")
    listed = notes("list", "--db", db, "--json")  # the same store the run below uses
    assert json.loads(listed.stdout)["verified"][0]["sql"] == "SELECT COUNT(*) FROM Album"
    missing = str(tmp_path_factory.mktemp("none") / "no-model.gguf")  # loading any model would fail

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-c",
                "from edge_sql.cli import main; main()",
                "run",
                "--db",
                db,
                "--model",
                missing,
                *extra,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "EDGE_SQL_HOME": str(home)},
            timeout=120,
        )

    at_once = run("--question", "how many ALBUMS", "--json")
    assert at_once.returncode == 0, at_once.stderr
    data = json.loads(at_once.stdout)
    assert (data["stop"], data["rows"], data["given"]["verified"]["sql"]) == (
        "verified",
        [[347]],
        "SELECT COUNT(*) FROM Album",
    )
    assert "loading" not in at_once.stderr
    fresh = run("--question", "how many ALBUMS", "--fresh")
    assert fresh.returncode == 1 and f"no such model file: {missing}" in fresh.stderr
