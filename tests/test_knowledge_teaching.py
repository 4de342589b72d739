"""Teaching you can trust (issue 61), in the knowledge store on real SQLite files: a verified
answer is replaced only when asked, every change is in the history and one can be undone, a
verified answer that no longer holds is not served, imports are idempotent, an older store
opens, and every refusal leaves the whole store as it was."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from edge_sql.errors import KnowledgeError, VerifiedExists
from edge_sql.knowledge import Knowledge
from edge_sql.knowledge.answers import Stale, at_once, brief
from edge_sql.knowledge.transfer import export_json, import_json
from edge_sql.tools import ReadOnlyDatabase


@pytest.fixture
def kb(tmp_path: Path):
    with Knowledge.open(tmp_path / "home") as knowledge:
        yield knowledge


def dump(kb: Knowledge) -> list[str]:
    """The whole knowledge database as SQL text (every table, every row)."""
    with sqlite3.connect(kb.path) as conn:
        return list(conn.iterdump())


def test_replacing_is_refused_unless_asked_and_the_history_keeps_and_undoes_it(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        first = kb.keep(db, "How many albums are there?", "SELECT COUNT(*) FROM Album", surface="prompt")
        assert (first.action, first.answer.id) == ("added", 1)
        assert first.said() == 'kept as verified (v1): "How many albums are there?" -> SELECT COUNT(*) FROM Album'
        same = kb.keep(db, "how many albums are there", "SELECT  COUNT(*)\nFROM Album")
        assert (same.action, same.answer) == ("unchanged", first.answer)  # nothing stored, the id kept
        before = dump(kb)
        with pytest.raises(VerifiedExists) as refused:
            kb.keep(db, "How many albums are there?", "SELECT COUNT(AlbumId) FROM Album", surface="command line")
        assert str(refused.value) == (
            'refused: "How many albums are there?" already has a verified answer (v1): SELECT COUNT(*) FROM Album; '
            "say so to replace it"
        )
        assert dump(kb) == before  # the refusal stored nothing
        replaced = kb.keep(db, "How many albums are there?", "SELECT COUNT(AlbumId) FROM Album", replace=True)
        assert replaced.action == "replaced" and replaced.replaced == first.answer
        assert replaced.said() == (
            'replaced v1 (SELECT COUNT(*) FROM Album) by verified v2: "How many albums are there?" -> '
            "SELECT COUNT(AlbumId) FROM Album"
        )
        history = kb.history(db)
        assert [(c.id, c.surface, c.action, c.old_id, c.old_text, c.new_id, c.new_text) for c in history] == [
            (1, "prompt", "added", None, None, 1, "SELECT COUNT(*) FROM Album"),
            (2, "api", "replaced", 1, "SELECT COUNT(*) FROM Album", 2, "SELECT COUNT(AlbumId) FROM Album"),
        ]
        assert (
            history[1]
            .line()
            .endswith(
                '  api  replaced v1 by v2 "How many albums are there?": SELECT COUNT(*) FROM Album -> '
                "SELECT COUNT(AlbumId) FROM Album"
            )
        )
        undone = kb.undo(db, 2, surface="command line")
        assert undone.undone_line() == "undid change #2 (replaced verified answer): v1 is back in place of v2"
        assert kb.verified(db) == [first.answer]  # the old answer, under its old id
        assert at_once(kb, db, "How many albums are there?").sql == "SELECT COUNT(*) FROM Album"  # type: ignore[union-attr]
        assert [a.id for a in kb.similar(db, "How many albums?")] == [1]
        assert kb.history(db)[1].undone is not None and kb.history(db)[1].undone_from == "command line"
        before = dump(kb)
        with pytest.raises(KnowledgeError, match=r"change #2 was undone already"):
            kb.undo(db, 2)
        with pytest.raises(KnowledgeError, match=r"no change #9 for this database"):
            kb.undo(db, 9)
        assert dump(kb) == before


def test_removals_are_kept_and_undone_and_an_undo_that_later_changes_built_on_is_refused(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        note = kb.add_note(db, "amounts are in US dollars", surface="page")
        answer = kb.verify(db, "How many tracks?", "SELECT COUNT(*) FROM Track")
        assert kb.forget(db, answer.id, surface="HTTP") == answer
        assert kb.remove_note(db, note.id, surface="MCP") == note
        assert kb.notes(db) == [] and kb.verified(db) == []
        history = kb.history(db)
        assert [(c.surface, c.action, c.kind) for c in history] == [
            ("page", "added", "note"),
            ("api", "added", "verified"),
            ("HTTP", "removed", "verified"),
            ("MCP", "removed", "note"),
        ]
        kb.undo(db, history[3].id)
        kb.undo(db, history[2].id)
        assert kb.notes(db) == [note] and kb.verified(db) == [answer]  # back, ids kept
        kb.verify(db, "How many tracks?", "SELECT COUNT(TrackId) FROM Track", replace=True)
        before = dump(kb)
        with pytest.raises(KnowledgeError, match=r"cannot undo change #2: v1 was changed or removed since"):
            kb.undo(db, 2)  # the answer it added was replaced since: undo the replacement first
        assert dump(kb) == before


def test_a_verified_answer_that_no_longer_holds_is_not_served_and_is_marked_stale(kb, chinook_db):
    question = "How many customers live in Brazil?"
    with ReadOnlyDatabase(chinook_db) as db:
        kb.verify(db, question, "SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'")
        kb.verify(db, "How many customers live in Narnia?", "SELECT COUNT(*) FROM Customer WHERE Country = 'Narnia'")
        assert at_once(kb, db, question).rows == [[5]]  # type: ignore[union-attr]
        narnia = at_once(kb, db, "How many customers live in Narnia?")  # never there: that is what it answers
        assert narnia is not None and not isinstance(narnia, Stale) and narnia.rows == [[0]]
    with sqlite3.connect(chinook_db) as conn:  # the data moves on: nobody is in 'Brazil' any more
        conn.execute("UPDATE Customer SET Country = 'Brasil' WHERE Country = 'Brazil'")
    with ReadOnlyDatabase(chinook_db) as db:
        found = at_once(kb, db, question)
        assert isinstance(found, Stale)
        assert found.line() == (
            "the verified answer v1 was not used: the database no longer holds Customer.Country = 'Brazil'; "
            "it is marked stale and the model is asked"
        )
        listed = kb.verified(db)
        assert listed[0].stale == "no longer holds: the database no longer holds Customer.Country = 'Brazil'"
        composed = brief(kb, db, "How many customers live in Brazil or Narnia?")
        assert [e.id for e in composed.given.examples] == [2]  # a stale answer is no example
    with sqlite3.connect(chinook_db) as conn:
        conn.execute("UPDATE Customer SET Country = 'Brazil' WHERE Country = 'Brasil'")
    with ReadOnlyDatabase(chinook_db) as db:
        assert at_once(kb, db, question).rows == [[5]]  # type: ignore[union-attr]
        assert kb.verified(db)[0].stale is None  # it holds again: the mark is cleared
    with sqlite3.connect(chinook_db) as conn:
        conn.execute("ALTER TABLE Customer RENAME COLUMN Country TO Nation")
    with ReadOnlyDatabase(chinook_db) as db:
        found = at_once(kb, db, question)
        assert isinstance(found, Stale) and found.why.startswith("its SQL fails now (")
        assert "no such column: Country" in found.why


def test_importing_twice_adds_nothing_and_a_conflict_is_refused_whole_or_replaced_when_asked(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        kb.add_note(db, "amounts are in US dollars")
        kb.verify(db, "How many albums?", "SELECT COUNT(*) FROM Album")
        exported = json.loads(json.dumps(export_json(kb, db)))
        before = dump(kb)
        again = import_json(kb, db, exported)
        assert (
            again.line("f.json")
            == "imported from f.json: added 0 notes and 0 verified answers; skipped 2 already stored"
        )
        assert dump(kb) == before
        other = dict(
            exported,
            notes=[*exported["notes"], {"text": "a new note"}],
            verified=[
                {"question": "How many albums?", "sql": "SELECT COUNT(AlbumId) FROM Album"},
                {"question": "How many artists?", "sql": "SELECT COUNT(*) FROM Artist"},
            ],
        )
        with pytest.raises(KnowledgeError) as refused:
            import_json(kb, db, other)
        assert str(refused.value) == (
            'refused: the file would replace 1 verified answer stored with other SQL (v1 "How many albums?": '
            "SELECT COUNT(*) FROM Album); nothing was imported: pass --replace to replace them"
        )
        assert dump(kb) == before  # not even the new note or the new answer
        done = import_json(kb, db, other, replace=True)
        assert done.line("f.json") == (
            "imported from f.json: added 1 note and 1 verified answer; skipped 1 already stored; replaced v1 by v2"
        )
        assert [(c.surface, c.action) for c in kb.history(db)[-3:]] == [
            ("import", "added"),
            ("import", "replaced"),
            ("import", "added"),
        ]


def test_a_store_written_before_the_history_opens_and_gains_it(tmp_path, chinook_db):
    home = tmp_path / "old"
    home.mkdir()
    with sqlite3.connect(home / "knowledge.sqlite") as conn:  # the format of edge-sql before issue 61
        conn.executescript(
            "CREATE TABLE schemas (identity TEXT PRIMARY KEY, tables TEXT NOT NULL);"
            "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
            "text TEXT NOT NULL, question TEXT, tables TEXT NOT NULL, created TEXT NOT NULL);"
            "CREATE TABLE verified (id INTEGER PRIMARY KEY AUTOINCREMENT, identity TEXT NOT NULL, path TEXT NOT NULL, "
            "question TEXT NOT NULL, normalised TEXT NOT NULL, evidence TEXT, sql TEXT NOT NULL, tables TEXT NOT NULL, "
            "verified_at TEXT NOT NULL, follows TEXT);"
            "PRAGMA user_version = 1;"
        )
        conn.execute(
            "INSERT INTO verified (identity, path, question, normalised, sql, tables, verified_at) "
            "VALUES ('x', ?, 'How many albums?', 'how many albums', 'SELECT COUNT(*) FROM Album', '[]', '2026-01-01')",
            (str(chinook_db.resolve()),),
        )
    with Knowledge.open(home) as kb, ReadOnlyDatabase(chinook_db) as db:
        assert [(a.id, a.sql, a.stale) for a in kb.verified(db)] == [(1, "SELECT COUNT(*) FROM Album", None)]
        assert at_once(kb, db, "How many albums?").rows == [[347]]  # type: ignore[union-attr]
        with pytest.raises(VerifiedExists):
            kb.verify(db, "How many albums?", "SELECT 347")
        assert kb.history(db) == []
    with sqlite3.connect(home / "knowledge.sqlite") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)  # an older edge-sql still reads it
