"""The knowledge through `Agent.ask` on the fixture model: the exact text the model sees, the
repeated question answered at once, and bounds measured with the real Qwen3.5 tokenizer."""

from __future__ import annotations

import pytest

import edge_sql
from edge_sql.agent import Budget
from edge_sql.errors import KnowledgeError
from edge_sql.knowledge import FollowUp
from edge_sql.knowledge.evidence import ITEM_TOKEN_BOUND
from edge_sql.tools import ReadOnlyDatabase

SMALL = Budget(
    max_tokens=2048,
    max_rounds=1,
    max_think_tokens=4,
    max_final_think_tokens=4,
    max_sql_chars=24,
    max_name_chars=16,
    min_string_chars=8,
    min_think_tokens=2,
    max_final_sql_tokens=16,
    max_calls_per_turn=1,
)


@pytest.fixture(scope="module")
def agent(tiny_gguf_fast, tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGE_SQL_HOME", str(home))
        with edge_sql.Agent(
            tiny_gguf_fast, n_ctx=2048, n_threads=1, budget=SMALL, pull_if_missing=False, tune=False, prefix_cache=False
        ) as agent:
            assert agent.knowledge.path == home / "knowledge.sqlite"
            yield agent


# The user turn, byte for byte: the question, then BIRD's inline evidence (", evidence: ",
# the published form) holding the user's evidence, the follow-up pair, the notes that apply and
# the similar verified answers, joined with "; " (ours: see docs/knowledge.md).
PINNED = (
    "<|im_start|>user\n"
    "What is the revenue of each customer by year?, evidence: year refers to strftime('%Y', InvoiceDate); "
    "this question follows the question 'What is the revenue of each customer?', answered by: "
    "SELECT CustomerId, SUM(Total) FROM Invoice GROUP BY CustomerId; "
    "amounts are in US dollars; "
    "revenue means SUM(Invoice.Total); "
    "a similar question 'What is the total revenue per year?' was answered by: SELECT strftime('%Y', InvoiceDate), SUM(Total) FROM Invoice GROUP BY 1"
    "<|im_end|>\n<|im_start|>assistant\n<think>\n"
)


def _user_turn(transcript: str) -> str:
    """The transcript's user turn, up to the assistant's opening."""
    start = transcript.index("<|im_start|>user\n")
    end = transcript.index("<think>\n", start) + len("<think>\n")
    return transcript[start:end]


def test_the_model_sees_notes_examples_and_the_follow_up_in_the_trained_evidence_form(agent, chinook_db):
    with ReadOnlyDatabase(chinook_db) as db:
        kb = agent.knowledge
        notes = [
            kb.add_note(db, "amounts are in US dollars"),
            kb.add_note(db, "revenue means SUM(Invoice.Total)", question="revenue"),
        ]
        kb.add_note(db, "a track's length is in milliseconds", question="track length")  # not this question's
        example = kb.verify(
            db,
            "What is the total revenue per year?",
            "SELECT strftime('%Y', InvoiceDate), SUM(Total)\n  FROM Invoice GROUP BY 1",
        )
        follow_up = FollowUp(
            "What is the revenue of each customer?", "SELECT CustomerId, SUM(Total) FROM Invoice GROUP BY CustomerId"
        )
        result = agent.ask(
            "What is the revenue of each customer by year?",
            db,
            evidence="year refers to strftime('%Y', InvoiceDate)",
            follow_up=follow_up,
            greedy=True,
        )
        plain = agent.ask("What is the revenue of each customer by year?", db, knowledge=False, greedy=True)
    assert _user_turn(result.transcript) == PINNED
    assert result.evidence == "year refers to strftime('%Y', InvoiceDate)"  # the caller's, as given
    assert result.given is not None
    assert (result.given.notes, result.given.examples, result.given.follow_up) == (notes, [example], follow_up)
    assert result.to_json()["given"] == {
        "notes": [
            {"id": notes[0].id, "text": "amounts are in US dollars"},
            {"id": notes[1].id, "text": "revenue means SUM(Invoice.Total)"},
        ],
        "examples": [
            {
                "id": example.id,
                "question": "What is the total revenue per year?",
                "sql": "SELECT strftime('%Y', InvoiceDate), SUM(Total)\n  FROM Invoice GROUP BY 1",
            }
        ],
        "follow_up": {"question": follow_up.question, "sql": follow_up.sql},
        "verified": None,
        "schema_change": None,
        "stale_verified": None,
    }
    assert "<|im_start|>user\nWhat is the revenue of each customer by year?<|im_end|>" in plain.transcript
    assert plain.given is not None and plain.given.notes == []


def test_a_verified_question_is_answered_at_once_and_fresh_asks_the_model(agent, northwind_db):
    with ReadOnlyDatabase(northwind_db) as db:
        stored = agent.knowledge.verify(db, "How many orders are there?", "SELECT COUNT(*) FROM Orders")
        again = agent.ask("how many Orders are there", db)
        fresh = agent.ask("How many orders are there?", db, fresh=True, greedy=True)
    assert (again.stop, again.sql, again.rows, again.transcript) == ("verified", stored.sql, [[830]], "")
    assert again.stats.to_json() == {} and again.rounds == []  # no episode ran
    assert again.given is not None and again.given.verified == stored
    assert fresh.stop != "verified" and fresh.transcript
    assert fresh.given is not None and fresh.given.verified is None
    # the verified answer is still a similar example for the fresh episode
    assert fresh.given.examples == [stored]


def test_bounds_are_measured_with_the_models_tokenizer(agent, chinook_db):
    fits = "the sales " * 100  # 1000 bytes, but far fewer tokens than the bound
    over = " ".join(f"w{i}q" for i in range(ITEM_TOKEN_BOUND))  # more than one token each
    assert agent.count_tokens(fits.strip()) <= ITEM_TOKEN_BOUND < len(fits.encode())
    with ReadOnlyDatabase(chinook_db) as db:
        agent.knowledge.add_note(db, fits, question="sales")
        with pytest.raises(KnowledgeError, match=r"the note is \d+ tokens long as a hint, over the bound of 256"):
            agent.knowledge.add_note(db, over)
        with pytest.raises(KnowledgeError, match="too long to follow"):
            agent.ask("and by year?", db, follow_up=FollowUp("q", "SELECT " + over))


def test_a_verified_answer_that_no_longer_holds_falls_back_to_the_model(agent, chinook_db):
    """Issue 61: the data moved on (nobody lives in 'Brazil' any more): the verified answer is
    not served, the result says why in one line, and the model answers instead."""
    import sqlite3

    from edge_sql.knowledge.answers import given_lines

    question = "How many customers live in Brazil?"
    with ReadOnlyDatabase(chinook_db) as db:
        kept = agent.knowledge.verify(db, question, "SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'")
        assert agent.ask(question, db).stop == "verified"
    with sqlite3.connect(chinook_db) as conn:
        conn.execute("UPDATE Customer SET Country = 'Brasil' WHERE Country = 'Brazil'")
    conn.close()
    with ReadOnlyDatabase(chinook_db) as db:
        result = agent.ask(question, db, seed=1)
        listed = [a for a in agent.knowledge.verified(db) if a.id == kept.id]
    assert result.stop != "verified" and result.rounds  # the model was asked
    said = (
        f"the verified answer v{kept.id} was not used: the database no longer holds Customer.Country = 'Brazil'; "
        "it is marked stale and the model is asked"
    )
    assert result.given is not None and result.given.stale_verified == said
    assert result.to_json()["given"]["stale_verified"] == said
    assert f"note: {said}" in given_lines(result)
    assert listed[0].stale == "no longer holds: the database no longer holds Customer.Country = 'Brazil'"


def test_ask_many_and_each_consult_the_knowledge_as_ask_does(agent, northwind_db):
    """Issue 63: one place consults the knowledge, for `ask`, `each` and `ask_many` alike."""
    from edge_sql.api import Ask

    verified, other = "How many employees are there?", "How many employees live in London?"
    with ReadOnlyDatabase(northwind_db) as db:
        stored = agent.knowledge.verify(db, verified, "SELECT COUNT(*) FROM Employees")
        many = agent.ask_many(["how many EMPLOYEES are there", other], db, greedy=True)
        [(_, each)] = list(agent.each([Ask(verified, db)]))
        alone = agent.ask(other, db, greedy=True)
        plain = agent.ask_many([verified], db, greedy=True, knowledge=False)
    assert (many[0].stop, many[0].sql, many[0].rows, many[0].transcript) == ("verified", stored.sql, [[9]], "")
    assert isinstance(each, edge_sql.EpisodeResult) and (each.stop, each.rows) == ("verified", [[9]])
    assert many[1].given is not None and many[1].given.examples == [stored]  # a similar verified answer
    assert many[1].evidence is None and many[1].transcript == alone.transcript  # what `ask` gives the model
    assert plain[0].stop != "verified" and plain[0].given is None and plain[0].transcript
