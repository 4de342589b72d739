"""Full episodes with the trained fixture model over Chinook and Northwind.

The random fixture (test_episodes.py) proves that the grammar holds whatever the weights, but
its SQL never runs. The trained fixture (tests/fixture_training.py: the same checkpoint after a
few minutes of training on protocol episodes) copies names imperfectly, so across seeds it
writes queries that run, queries that fail and answers that break. That reaches the paths that
depend on what a query did: the failed-query limit forces the final turn, the forced message
quotes the last query that ran, and a broken or missing answer falls back to that query. The
assertions hold for whichever episodes take those paths; the counts only require that each
path is taken at least once.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from edge_sql.agent import Budget, run_episode
from edge_sql.runtime import SamplingParams, Session
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from episode_checks import (
    PROMPT,
    EpisodeRun,
    check_each_token_evaluated_once,
    check_turns_parse,
    last_good_query,
    query_calls,
    sha256,
)
from fixture_budget import TRAINED_LIMITS

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
QUESTIONS = {
    "chinook": [
        "How many rows does the Album table have?",
        "What is the largest Milliseconds in Track?",
        "Show the Name of every row of Artist.",
        "How many rows does the InvoiceLine table have?",
        "Which customer spent the most money?",
    ],
    "northwind": [
        "How many rows does the Order Details table have?",
        "What is the largest UnitPrice in Products?",
        "Show the CompanyName of every row of Shippers.",
        "How many rows does the Employees table have?",
        "How many orders were shipped to France?",
    ],
}
SETUPS = {  # name: (budget, sampling, episodes)
    "protocol": (Budget(**TRAINED_LIMITS), {}, 32),
    "hot-two-failures": (Budget(max_failed_queries=2, **TRAINED_LIMITS), dict(temperature=1.3), 32),
}
N_CTX = 4096


@pytest.fixture(scope="module")
def databases(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dbs")
    paths = {}
    for name in QUESTIONS:
        paths[name] = folder / f"{name}.sqlite"
        paths[name].write_bytes((DATA_DIR / name / f"{name}.sqlite").read_bytes())
    return paths


@pytest.fixture(scope="module")
def episodes(tiny_trained_gguf, databases) -> dict:
    before = {name: sha256(path) for name, path in databases.items()}
    runs: list[EpisodeRun] = []
    with Session(tiny_trained_gguf, n_ctx=N_CTX) as session:
        toolboxes = {name: Toolbox(ReadOnlyDatabase(path)) for name, path in databases.items()}
        for setup, (budget, sampling, count) in SETUPS.items():
            for i in range(count):
                db = ("chinook", "northwind")[i % 2]
                question = QUESTIONS[db][(i // 2) % len(QUESTIONS[db])]
                seed = 7919 * len(runs) + 1
                result = run_episode(
                    session, toolboxes[db], question, params=SamplingParams(seed=seed, **sampling), budget=budget
                )
                runs.append(
                    EpisodeRun(
                        setup,
                        db,
                        seed,
                        budget,
                        result,
                        session.n_past,
                        session.detokenize(session.tokens) == result.transcript,
                    )
                )
        for toolbox in toolboxes.values():
            toolbox.db.close()
    after = {name: sha256(path) for name, path in databases.items()}
    return {"runs": runs, "before": before, "after": after}


def rows_of(path: Path, sql: str) -> list[list]:
    """`sql`'s rows, read with plain sqlite3 (read-only), to compare with an episode's result."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return [list(row) for row in conn.execute(sql).fetchall()]


def test_the_trained_model_runs_some_queries_and_fails_others(episodes):
    runs = episodes["runs"]
    calls = [call for run in runs for call in query_calls(run.result)]
    outcomes = Counter(call.ok for call in calls)
    exits = Counter(run.result.force_reason or run.result.stop for run in runs)
    print(
        f"\n{len(runs)} episodes, exits {dict(exits)}, run_query ok {outcomes[True]} failed {outcomes[False]}, "
        f"fallbacks {sum(r.result.fallback for r in runs)}"
    )
    assert outcomes[True] > 0 and outcomes[False] > 0
    for call in calls:
        assert call.output.startswith("Error: ") != call.ok


def test_every_turn_parses_and_each_token_is_evaluated_once(episodes):
    for run in episodes["runs"]:
        check_turns_parse(run.result)
        check_each_token_evaluated_once(run.result, run.session_tokens)
        assert run.session_text_matches
        result = run.result
        assert result.stop in ("submitted", "final_answer"), result.error
        assert result.stats.to_json()["transcript_tokens"] <= N_CTX
        assert 1 <= len(result.rounds) <= run.budget.max_rounds


def test_failed_queries_force_the_final_turn(episodes):
    forced = [run for run in episodes["runs"] if run.result.force_reason == "failed_queries"]
    assert forced, "some episode should reach the limit of failed queries in a row"
    for run in forced:
        outcomes = [call.ok for call in query_calls(run.result)]
        limit = run.budget.max_failed_queries
        assert outcomes[-limit:] == [False] * limit
        # the limit was not already reached before the last round (the final turn comes at once)
        earlier = [call.ok for record in run.result.rounds[:-1] for call in record.calls if call.tool == "run_query"]
        streaks = "".join("x" if not ok else "." for ok in earlier).split(".")
        assert max(len(streak) for streak in streaks) < limit


def test_the_forced_message_quotes_the_last_query_that_ran(episodes):
    forced = [run for run in episodes["runs"] if run.result.forced]
    assert forced
    for run in forced:
        assert PROMPT.forced_text(last_good_query(run.result)) in run.result.transcript


def test_a_broken_answer_falls_back_to_the_last_query_that_ran(episodes, databases):
    fallbacks = [run for run in episodes["runs"] if run.result.fallback]
    assert fallbacks, "some episode should fall back to the last query that ran"
    for run in fallbacks:
        result = run.result
        good = last_good_query(result)
        assert good is not None and result.sql == good and result.error is None
        assert result.answer != good  # the model's own answer was missing or did not run
        if result.answer:
            with pytest.raises(sqlite3.Error):
                rows_of(databases[run.db], result.answer)
        assert result.rows == rows_of(databases[run.db], good)


def test_answers_that_ran_are_the_models_own(episodes, databases):
    answered = [run for run in episodes["runs"] if run.result.sql is not None and not run.result.fallback]
    assert answered
    for run in answered:
        assert run.result.sql == run.result.answer
        assert run.result.rows == rows_of(databases[run.db], run.result.sql)
    for run in episodes["runs"]:
        if run.result.sql is None:  # no answer and nothing to fall back to
            assert last_good_query(run.result) is None and run.result.error and not run.result.rows


def test_databases_are_byte_identical_afterwards(episodes):
    assert episodes["before"] == episodes["after"]
