"""`edge-sql notes` as a user runs it: a real process, a real database, the store in a temp home."""

from __future__ import annotations

import hashlib
import json
import os
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
        "verified answer v1: How many albums?\n"
    )
    listed = notes("list", "--db", db).stdout.splitlines()
    assert listed[:2] == ["   1  amounts are in US dollars", "   2  revenue means SUM(Invoice.Total) [with: revenue]"]
    assert listed[2].startswith("  v1  How many albums? -> SELECT COUNT(*) FROM Album  (20")
    out = tmp_path_factory.mktemp("out") / "chinook-notes.json"
    assert notes("export", "--db", db, str(out)).stdout == f"exported 2 notes and 1 verified answers to {out}\n"
    assert "exists: pass --force" in notes("export", "--db", db, str(out), code=1).stderr
    assert notes("remove", "--db", db, "1").stdout == "removed note 1\n"
    assert notes("remove", "--db", db, "v1").stdout == "removed verified answer v1\n"
    assert notes("remove", "--db", db, "1", code=1).stderr == (
        "Error: no note 1 for chinook.sqlite (`edge-sql notes list` shows them)\n"
    )
    assert notes("import", "--db", db, str(out)).stdout == f"imported 1 notes and 1 verified answers from {out}\n"
    data = json.loads(notes("list", "--db", db, "--json").stdout)
    assert [n["text"] for n in data["notes"]] == ["revenue means SUM(Invoice.Total)", "amounts are in US dollars"]
    assert [(a["id"], a["sql"]) for a in data["verified"]] == [(2, "SELECT COUNT(*) FROM Album")]  # ids never reused
    assert hashlib.sha256(chinook_db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in chinook_db.parent.iterdir()) == ["chinook.sqlite"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("add", "--db", "{db}", " "), "Error: empty note: write what the model should know"),
        (("add", "--db", "{db}", "x" * 300), "Error: the note is 300 tokens long as a hint, over the bound of 256"),
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
