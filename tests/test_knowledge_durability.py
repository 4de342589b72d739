"""The knowledge database under real processes: killed while writing, two writing at once."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from edge_sql.knowledge import Knowledge
from edge_sql.tools import ReadOnlyDatabase

# Writes notes and verified answers until told to stop (or killed): each note's text is
# "writer W note I " + a long tail, so a half-written note would show as a wrong text.
WRITER = """
import sys
from pathlib import Path
from edge_sql.knowledge import Knowledge
from edge_sql.tools import ReadOnlyDatabase

home, db_path, writer, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
with ReadOnlyDatabase(db_path) as db, Knowledge.open(home) as kb:
    for i in range(count):
        kb.add_note(db, f"writer {writer} note {i} " + "x" * 200)
        kb.verify(db, f"writer {writer} question {i}", f"SELECT {i} AS n")
        print(i, flush=True)
"""
TAIL = "x" * 200


def _writer(home: Path, db: Path, writer: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home), str(db), writer, str(count)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: killing it takes its SQL worker too
    )


def _check_whole(home: Path) -> tuple[int, int]:
    """The file's integrity, every note whole, the full-text index in step; (notes, answers)."""
    conn = sqlite3.connect(home / "knowledge.sqlite")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        notes = conn.execute("SELECT text FROM notes").fetchall()
        assert all(text.startswith("writer ") and text.endswith(" " + TAIL) for (text,) in notes)
        answers = conn.execute("SELECT id, question FROM verified ORDER BY id").fetchall()
        indexed = conn.execute("SELECT rowid, question FROM verified_fts ORDER BY rowid").fetchall()
        assert answers == indexed
        return len(notes), len(answers)
    finally:
        conn.close()


def test_a_process_killed_while_writing_leaves_no_half_written_note(tmp_path_factory, chinook_db):
    before = hashlib.sha256(chinook_db.read_bytes()).hexdigest()
    home = tmp_path_factory.mktemp("store")
    killed_after = []
    for round_ in range(3):  # killed at a different point each time
        writer = _writer(home, chinook_db, f"k{round_}", 10_000)
        assert writer.stdout is not None
        for _ in range(5 + 7 * round_):
            writer.stdout.readline()
        time.sleep(0.013 * round_)
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
        killed_after.append(_check_whole(home))
    notes, answers = killed_after[-1]
    assert notes >= 5 + 7 + 19 and answers >= notes - 3  # each round kept what it finished
    with ReadOnlyDatabase(chinook_db) as db, Knowledge.open(home) as kb:
        kb.add_note(db, "writer after note 0 " + TAIL)  # the file is usable after the kills
        assert len(kb.notes(db)) == notes + 1
    assert hashlib.sha256(chinook_db.read_bytes()).hexdigest() == before


def test_two_processes_writing_at_once_both_keep_everything(tmp_path_factory, chinook_db):
    home = tmp_path_factory.mktemp("store")
    writers = [_writer(home, chinook_db, name, 25) for name in ("a", "b")]
    for writer in writers:
        assert writer.wait(timeout=300) == 0
    assert _check_whole(home) == (50, 50)
    with ReadOnlyDatabase(chinook_db) as db, Knowledge.open(home) as kb:
        texts = sorted(n.text for n in kb.notes(db))
    assert texts == sorted(f"writer {w} note {i} {TAIL}" for w in "ab" for i in range(25))
