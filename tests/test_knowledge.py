"""The knowledge database: notes and verified answers on real SQLite files, no model.

Bounds here are counted in UTF-8 bytes (the store's own counter when no model is at hand);
tests/test_knowledge_agent.py measures them with the real tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from edge_sql.agent.result import EpisodeResult
from edge_sql.errors import KnowledgeError, VerifiedExists
from edge_sql.knowledge import FollowUp, Knowledge, schema_identity
from edge_sql.knowledge.answers import at_once, brief
from edge_sql.knowledge.evidence import ITEM_TOKEN_BOUND
from edge_sql.knowledge.identity import normalise_question
from edge_sql.knowledge.transfer import export_json, import_json
from edge_sql.tools import ReadOnlyDatabase


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def kb(tmp_path: Path):
    with Knowledge.open(tmp_path / "home") as kb:
        yield kb


def test_notes_survive_a_restart_and_the_users_file_stays_byte_identical(tmp_path_factory, chinook_db):
    before = _digest(chinook_db)
    listing = sorted(p.name for p in chinook_db.parent.iterdir())
    home = tmp_path_factory.mktemp("store") / "home"
    with ReadOnlyDatabase(chinook_db) as db:
        with Knowledge.open(home) as kb:
            always = kb.add_note(db, "  amounts are in US dollars ")
            tied = kb.add_note(db, "revenue means SUM(Invoice.Total)", question="revenue")
            kb.verify(db, "How many albums are there?", "SELECT COUNT(*) FROM Album")
        with Knowledge.open(home) as kb:  # a new process would see the same file
            notes = kb.notes(db)
            answers = kb.verified(db)
    assert [(n.id, n.text, n.question, n.stale) for n in notes] == [
        (always.id, "amounts are in US dollars", None, None),
        (tied.id, "revenue means SUM(Invoice.Total)", "revenue", None),
    ]
    assert [(a.question, a.sql) for a in answers] == [("How many albums are there?", "SELECT COUNT(*) FROM Album")]
    assert _digest(chinook_db) == before
    assert sorted(p.name for p in chinook_db.parent.iterdir()) == listing  # nothing beside the file
    assert {p.name for p in home.iterdir()} <= {"knowledge.sqlite", "knowledge.sqlite-wal", "knowledge.sqlite-shm"}


def test_a_copy_of_the_file_finds_the_notes_another_database_does_not(tmp_path, kb, chinook_db, northwind_db):
    copy = tmp_path / "elsewhere" / "copy.sqlite"
    copy.parent.mkdir()
    shutil.copy(chinook_db, copy)
    with ReadOnlyDatabase(chinook_db) as db, ReadOnlyDatabase(copy) as same, ReadOnlyDatabase(northwind_db) as other:
        kb.add_note(db, "a track's length is in milliseconds")
        assert schema_identity(db) == schema_identity(same) != schema_identity(other)
        assert [n.text for n in kb.notes(same)] == ["a track's length is in milliseconds"]
        assert kb.notes(other) == []


def test_tied_notes_are_given_only_to_questions_with_their_words(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        kb.add_note(db, "amounts are in US dollars")
        kb.add_note(db, "revenue means SUM(Invoice.Total)", question="the revenue of customers")
        with_words = kb.applicable_notes(db, "What is the revenue of each Customer?")
        without = kb.applicable_notes(db, "How many albums are there?")
    assert [n.text for n in with_words] == ["amounts are in US dollars", "revenue means SUM(Invoice.Total)"]
    assert [n.text for n in without] == ["amounts are in US dollars"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty note"),
        ("   \n ", "empty note"),
        ("x" * (ITEM_TOKEN_BOUND + 1), f"over the bound of {ITEM_TOKEN_BOUND}"),
    ],
)
def test_empty_and_oversized_notes_are_refused_with_one_line(kb, chinook_db, text, message):
    with ReadOnlyDatabase(chinook_db) as db:
        with pytest.raises(KnowledgeError, match=message) as refused:
            kb.add_note(db, text)
        assert kb.notes(db) == []
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE Album SET Title = 'x'", "read-only SELECT.*starts with UPDATE"),
        ("DELETE FROM Album", "starts with DELETE"),
        ("DROP TABLE Album", "starts with DROP"),
        ("SELECT nope FROM Album", "does not run on this database.*no such column"),
        ("", "empty SQL"),
    ],
)
def test_sql_fixes_that_write_or_fail_are_refused(kb, chinook_db, sql, message):
    before = _digest(chinook_db)
    with ReadOnlyDatabase(chinook_db) as db:
        with pytest.raises(KnowledgeError, match=message):
            kb.verify(db, "How many albums?", sql)
        assert kb.verified(db) == []
    assert _digest(chinook_db) == before


def test_a_repeated_question_is_answered_at_once_from_its_verified_sql(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        stored = kb.verify(db, "How many albums are there?", "SELECT COUNT(*) FROM Album")
        result = at_once(kb, db, "  how many ALBUMS are there ")
        assert at_once(kb, db, "How many artists are there?") is None
    assert normalise_question("How many albums are there?") == "how many albums are there"
    assert isinstance(result, EpisodeResult)
    assert (result.stop, result.sql, result.rows, result.columns) == (
        "verified",
        "SELECT COUNT(*) FROM Album",
        [[347]],
        ["COUNT(*)"],
    )
    assert result.given is not None and result.given.verified == stored
    assert result.checks is not None
    assert result.to_json()["given"]["verified"] == {
        "id": stored.id,
        "question": "How many albums are there?",
        "sql": "SELECT COUNT(*) FROM Album",
        "verified_at": stored.verified_at,
    }


def test_verifying_the_same_question_again_replaces_the_answer_only_when_asked(kb, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        first = kb.verify(db, "How many albums?", "SELECT 1")
        with pytest.raises(VerifiedExists, match=r'"How many albums\?" already has a verified answer \(v1\): SELECT 1'):
            kb.verify(db, "how many albums", "SELECT COUNT(*) FROM Album")
        assert kb.verified(db) == [first]
        kb.verify(db, "how many albums", "SELECT COUNT(*) FROM Album", replace=True)
        assert [(a.question, a.sql) for a in kb.verified(db)] == [("how many albums", "SELECT COUNT(*) FROM Album")]
        assert [a.sql for a in kb.similar(db, "How many albums are there?")] == ["SELECT COUNT(*) FROM Album"]


def test_retrieval_finds_the_most_similar_questions_of_this_database(kb, chinook_db, northwind_db):
    chinook = [
        ("How many albums does each artist have?", "SELECT ArtistId, COUNT(*) FROM Album GROUP BY ArtistId"),
        ("Which customers live in Brazil?", "SELECT FirstName FROM Customer WHERE Country = 'Brazil'"),
        ("What is the total of all invoices?", "SELECT SUM(Total) FROM Invoice"),
        ("List the tracks of the genre Rock", "SELECT t.Name FROM Track t JOIN Genre g USING (GenreId)"),
    ]
    with ReadOnlyDatabase(chinook_db) as db, ReadOnlyDatabase(northwind_db) as other:
        for question, sql in chinook:
            kb.verify(db, question, sql)
        kb.verify(other, "Which customers live in Germany?", "SELECT CompanyName FROM Customers")
        found = kb.similar(db, "Which customers live in France?", k=2)
        invoices = kb.similar(db, "total of the invoices per year", k=1)
        nothing = kb.similar(db, "the and of", k=3)
    assert found[0].question == "Which customers live in Brazil?"
    assert all(a.question != "Which customers live in Germany?" for a in found)  # another database's
    assert [a.question for a in invoices] == ["What is the total of all invoices?"]
    assert nothing == []


def test_a_changed_schema_is_said_and_notes_of_a_dropped_table_are_flagged(tmp_path, kb):
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE orders (id INTEGER, cents INTEGER); CREATE TABLE coupons (code TEXT);"
            "INSERT INTO orders VALUES (1, 250);"
        )
    with ReadOnlyDatabase(path) as db:
        kb.add_note(db, "orders.cents is the amount in cents")
        kb.add_note(db, "a coupons row is a code that was sent, not used")
        kb.verify(db, "How many coupons?", "SELECT COUNT(*) FROM coupons")
        assert kb.schema_change(db) is None
    with sqlite3.connect(path) as conn:
        conn.executescript("DROP TABLE coupons; CREATE TABLE refunds (id INTEGER);")
    with ReadOnlyDatabase(path) as db:
        change = kb.schema_change(db)
        notes = kb.notes(db)
        composed = brief(kb, db, "How many coupons were refunded?")
        answers = kb.verified(db)
        assert at_once(kb, db, "How many coupons?") is None  # a stale answer is not reused
    assert change == (
        "the schema of shop.sqlite changed since some of its notes were written (dropped: coupons; added: "
        "refunds); notes that name a dropped table are flagged and no longer given"
    )
    assert [(n.text, n.stale) for n in notes] == [
        ("orders.cents is the amount in cents", None),
        (
            "a coupons row is a code that was sent, not used",
            "names the table coupons, which the database no longer has",
        ),
    ]
    assert answers[0].stale == "names the table coupons, which the database no longer has"
    assert [n.text for n in composed.given.notes] == ["orders.cents is the amount in cents"]
    assert composed.given.examples == [] and composed.given.schema_change == change


def test_removing_a_note(kb, chinook_db, northwind_db):
    with ReadOnlyDatabase(chinook_db) as db, ReadOnlyDatabase(northwind_db) as other:
        note = kb.add_note(db, "one")
        with pytest.raises(KnowledgeError, match=f"no note {note.id} for"):
            kb.remove_note(other, note.id)  # another database's note is not this one's to remove
        kb.remove_note(db, note.id)
        assert kb.notes(db) == []
        with pytest.raises(KnowledgeError, match=f"no note {note.id} for chinook.sqlite"):
            kb.remove_note(db, note.id)


def test_export_and_import_move_notes_and_answers_and_a_bad_file_changes_nothing(tmp_path, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        with Knowledge.open(tmp_path / "a") as kb:
            kb.add_note(db, "amounts are in US dollars")
            kb.add_note(db, "revenue means SUM(Invoice.Total)", question="revenue")
            kb.verify(db, "How many albums?", "SELECT COUNT(*) FROM Album", evidence="an album is a row of Album")
            exported = json.loads(json.dumps(export_json(kb, db)))
        with Knowledge.open(tmp_path / "b") as kb:
            bad = dict(exported, verified=[{"question": "wipe", "sql": "DELETE FROM Album"}, *exported["verified"]])
            with pytest.raises(KnowledgeError, match="verified answer 1: refused: a verified answer must be one"):
                import_json(kb, db, bad)
            with pytest.raises(KnowledgeError, match="not an edge-sql knowledge file"):
                import_json(kb, db, {"notes": []})
            with pytest.raises(KnowledgeError, match="note 1 is empty"):
                import_json(kb, db, dict(exported, notes=[{"text": " "}]))
            assert kb.notes(db) == [] and kb.verified(db) == []
            first = import_json(kb, db, exported)
            assert (first.notes_added, len(first.added), first.notes_skipped, first.skipped) == (2, 1, 0, [])
            ids = ([n.id for n in kb.notes(db)], [a.id for a in kb.verified(db)])
            second = import_json(kb, db, exported)  # nothing doubled, nothing replaced: every id kept
            assert (second.notes_added, second.added, second.notes_skipped, len(second.skipped)) == (0, [], 2, 1)
            assert ([n.id for n in kb.notes(db)], [a.id for a in kb.verified(db)]) == ids
            again = export_json(kb, db)
    assert again["notes"] == exported["notes"] and again["verified"] == exported["verified"]
    assert exported["verified"] == [
        {
            "question": "How many albums?",
            "evidence": "an album is a row of Album",
            "sql": "SELECT COUNT(*) FROM Album",
            "verified_at": exported["verified"][0]["verified_at"],
        }
    ]


def test_a_follow_ups_verified_answer_is_reused_only_after_the_same_question(kb, chinook_db):
    before = FollowUp("What is the revenue per customer?", "SELECT CustomerId, SUM(Total) FROM Invoice GROUP BY 1")
    other = FollowUp("How many tracks per genre?", "SELECT GenreId, COUNT(*) FROM Track GROUP BY 1")
    by_year = "SELECT CustomerId, strftime('%Y', InvoiceDate), SUM(Total) FROM Invoice GROUP BY 1, 2"
    with ReadOnlyDatabase(chinook_db) as db:
        stored = kb.verify(db, "And by year?", by_year, follows=before.question)
        after_it = at_once(kb, db, "and by year", follow_up=FollowUp("what is the REVENUE per customer", "x"))
        alone = at_once(kb, db, "and by year")
        after_other = at_once(kb, db, "and by year", follow_up=other)
        examples = kb.similar(db, "revenue by year")
    assert isinstance(after_it, EpisodeResult) and after_it.given is not None and after_it.given.verified == stored
    assert stored.follows == before.question
    assert alone is None and after_other is None and examples == []


def test_a_knowledge_file_that_is_not_one_is_one_clear_line(tmp_path):
    (tmp_path / "knowledge.sqlite").write_bytes(b"not a database at all, " * 100)
    with pytest.raises(
        KnowledgeError, match=r"cannot open the knowledge database .*knowledge.sqlite: file is not a database"
    ):
        Knowledge.open(tmp_path)


def test_knowledge_takes_a_path_or_an_open_database_and_refuses_after_close(tmp_path, chinook_db):
    """Issue 64: the store's calls take what `Agent.ask` takes, and every call after close is a
    ClosedError (not sqlite3's ProgrammingError)."""
    from edge_sql.errors import ClosedError

    kb = Knowledge.open(tmp_path / "home")
    note = kb.add_note(chinook_db, "Prices are in US dollars.")
    kept = kb.verify(str(chinook_db), "How many albums?", "SELECT COUNT(*) FROM Album")
    with ReadOnlyDatabase(chinook_db) as db:
        assert [n.text for n in kb.notes(db)] == [note.text] == [n.text for n in kb.notes(chinook_db)]
        assert [a.sql for a in kb.verified(chinook_db)] == [kept.sql] == [a.sql for a in kb.verified(db)]
    assert [c.action for c in kb.history(chinook_db)] == ["added", "added"]
    assert kb.remove_note(chinook_db, note.id).id == note.id and kb.forget(chinook_db, kept.id).id == kept.id
    assert kb.undo(chinook_db, kb.history(chinook_db)[-1].id).action == "removed"
    assert [a.sql for a in kb.verified(chinook_db)] == [kept.sql]  # the undone forget brought it back
    kb.close()
    for call in (lambda: kb.notes(chinook_db), lambda: kb.add_note(chinook_db, "x"), lambda: kb.verified(chinook_db)):
        with pytest.raises(ClosedError, match="this knowledge database is closed"):
            call()
    kb.close()  # idempotent
