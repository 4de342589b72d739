"""Issue 61's sequence in a real pseudo-terminal (benchmarks/transcripts/terminal.py): a verified question,
another question interrupted with Ctrl-C, then `:fix`. The fix belongs to the interrupted
question and the reply names it and its SQL; the first verified answer stays unchanged;
replacing a verified answer asks first, and "no" stores nothing; a stray Enter quits nothing."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from benchmarks.transcripts.terminal import Terminal
from edge_sql.knowledge import Knowledge
from edge_sql.tools import ReadOnlyDatabase
from repl_bounds import PROMPT

SLOW = ["--no-tune", "--threads", "1", "--ctx", "4096", "--think-tokens", "2000", "--budget", "max_tokens=4096"]
GENRE = "Which genre has the most tracks?"
GENRE_SQL = "SELECT GenreId FROM Track GROUP BY GenreId ORDER BY COUNT(*) DESC LIMIT 1"


def _dump(store: Path) -> list[str]:
    with sqlite3.connect(store) as conn:
        return list(conn.iterdump())


def _after(lines: list[str], line: str) -> list[str]:
    """The screen's lines after the last one equal to `line`, up to the next prompt."""
    index = len(lines) - 1 - lines[::-1].index(line)
    shown = lines[index + 1 :]
    return shown[: shown.index(PROMPT)] if PROMPT in shown else shown


@pytest.fixture
def session(tiny_gguf_fast: Path, chinook_db: Path, tmp_path: Path):
    home = tmp_path / "home"
    with Knowledge.open(home) as kb, ReadOnlyDatabase(chinook_db) as db:  # v1, verified before the session
        kb.verify(db, "How many albums are there?", "SELECT COUNT(*) FROM Album")
    env = {**os.environ, "EDGE_SQL_HOME": str(home), "TERM": "xterm", "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-c", "from edge_sql.cli import main; main()", "run", "--db", str(chinook_db)]
    terminal = Terminal([*args, "--model", str(tiny_gguf_fast), *SLOW, "--seed", "2"], env)
    terminal.wait_for(PROMPT)
    yield terminal, home / "knowledge.sqlite"
    terminal.kill()


def test_fix_after_ctrl_c_belongs_to_the_interrupted_question_and_replacing_asks_first(session):
    terminal, store = session
    terminal.send("How many albums are there?\r")  # at once, from v1
    shown = _after(terminal.wait_for(PROMPT, count=2), PROMPT + "How many albums are there?")
    assert shown[0] == "SQL: SELECT COUNT(*) FROM Album"
    terminal.send("\r")  # a stray Enter: the session goes on (its prompt line shows as "edge-sql>")
    terminal.wait_for(PROMPT, count=3)
    terminal.send(GENRE + "\r")
    terminal.wait_for("round 1")
    time.sleep(1.0)  # inside a 2000-token think block
    terminal.send("\x03")
    stopped = _after(terminal.wait_for(PROMPT, count=4), PROMPT + GENRE)
    assert stopped[-1] == "stopped; ask another question", stopped
    terminal.send(":right\r")
    assert _after(terminal.wait_for(PROMPT, count=5), PROMPT + ":right") == [
        f'Error: the last question ("{GENRE}") was stopped before its answer: nothing to keep '
        "(give its SQL with :fix SQL)"
    ]
    terminal.send(f":fix {GENRE_SQL}\r")
    fixed = _after(terminal.wait_for(PROMPT, count=6), PROMPT + f":fix {GENRE_SQL}")
    assert fixed[0] == (
        f'kept as verified (v2): "{GENRE}" -> {GENRE_SQL}; the same question is answered at once from now on'
    )
    assert fixed[1] == f"SQL: {GENRE_SQL}"  # answered at once, from the fix
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT id, question, sql FROM verified ORDER BY id").fetchall() == [
            (1, "How many albums are there?", "SELECT COUNT(*) FROM Album"),  # the first answer, unchanged
            (2, GENRE, GENRE_SQL),
        ]
    terminal.send("How many albums are there?\r")
    terminal.wait_for(PROMPT, count=7)
    before = _dump(store)
    terminal.send(":fix SELECT COUNT(AlbumId) FROM Album\r")
    asked = terminal.wait_for("replace it? [y/N] ")
    assert '"How many albums are there?" already has a verified answer (v1): SELECT COUNT(*) FROM Album' in asked
    terminal.send("n\r")
    refused = _after(terminal.wait_for(PROMPT, count=8), "replace it? [y/N] n")
    assert refused == ['Error: not replaced: v1 stays the verified answer to "How many albums are there?"']
    assert _dump(store) == before  # "no" stored nothing
    terminal.send(":fix SELECT COUNT(AlbumId) FROM Album\r")
    terminal.wait_for("replace it? [y/N] ", count=2)
    terminal.send("y\r")
    replaced = _after(terminal.wait_for(PROMPT, count=9), "replace it? [y/N] y")
    assert replaced[0] == (
        'replaced v1 (SELECT COUNT(*) FROM Album) by verified v3: "How many albums are there?" -> '
        "SELECT COUNT(AlbumId) FROM Album; the same question is answered at once from now on"
    )
    terminal.send(":quit\r")
    assert terminal.wait_exit() == 0
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT surface, action, old_id, new_id FROM changes ORDER BY id").fetchall() == [
            ("api", "added", None, 1),
            ("prompt", "added", None, 2),
            ("prompt", "replaced", 1, 3),
        ]
