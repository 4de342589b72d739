"""Full agent episodes with the random-weight Qwen3.5 fixture model over Chinook and Northwind.

Random weights write nonsense, which is the point: whatever the model samples, every
assistant turn must parse, every episode must end within its budget, each token must be
evaluated once, and the databases must stay byte-identical. Three sampling set-ups spread
the episodes over the loop's exits: the protocol's sampling (the random model mostly submits
at once), hot sampling in a small token budget (the final turn is forced when the context
runs short) and hot sampling with two tool rounds and one allowed failed query. Random SQL
never runs, so the paths that depend on a query running (the fallback to the last good
query, the failed-query limit) are exercised by the trained fixture in
test_episodes_trained.py.
"""

from __future__ import annotations

import re
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
    sha256,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
PRISTINE = sorted(DATA_DIR.glob("*/*.sqlite"))
QUESTIONS = [
    "How many albums are there?",
    "Which customer spent the most money?",
    "List the employees hired after 2003.",
    "What is the average unit price of the products?",
    "Name the three artists with the most tracks.",
    "How many orders were shipped to France?",
    "Which supplier ships the most products to Germany?",
    "What is the total revenue per year?",
    "Which genre has the longest average track length?",
]
SMALL = dict(
    max_think_tokens=12,
    max_final_think_tokens=8,
    max_sql_chars=24,
    max_name_chars=16,
    min_string_chars=8,
    min_think_tokens=4,
    max_final_sql_tokens=24,
    max_calls_per_turn=3,
)
HOT = dict(temperature=2.5, top_k=50, top_p=1.0)
SETUPS = {
    "protocol": (Budget(max_tokens=2048, **SMALL), {}),
    "hot-small-context": (Budget(max_tokens=1024, **SMALL), HOT),
    "hot-two-rounds": (Budget(max_tokens=2048, max_rounds=2, max_failed_queries=1, **SMALL), HOT),
}
EPISODES_PER_SETUP = 18


@pytest.fixture(scope="module")
def tiny_session(tiny_gguf_fast):
    with Session(tiny_gguf_fast, n_ctx=2048, n_threads=1) as session:
        yield session


@pytest.fixture(scope="module")
def episodes(tiny_session, tmp_path_factory) -> dict:
    """Runs every episode once for the module; returns them with the database hashes."""
    pristine_before = {p: sha256(p) for p in PRISTINE}
    folder = tmp_path_factory.mktemp("dbs")
    copies = {}
    for source in PRISTINE:
        copies[source.stem] = folder / source.name
        copies[source.stem].write_bytes(source.read_bytes())
    before = {name: sha256(path) for name, path in copies.items()}
    toolboxes = {name: Toolbox(ReadOnlyDatabase(path)) for name, path in copies.items()}
    runs: list[EpisodeRun] = []
    for setup, (budget, sampling) in SETUPS.items():
        for i in range(EPISODES_PER_SETUP):
            db = ("chinook", "northwind")[i % 2]
            seed = 1000 * len(runs) + i
            result = run_episode(
                tiny_session,
                toolboxes[db],
                QUESTIONS[i % len(QUESTIONS)],
                params=SamplingParams(seed=seed, **sampling),
                budget=budget,
            )
            runs.append(
                EpisodeRun(
                    setup,
                    db,
                    seed,
                    budget,
                    result,
                    tiny_session.n_past,
                    tiny_session.detokenize(tiny_session.tokens) == result.transcript,
                )
            )
    for toolbox in toolboxes.values():
        toolbox.db.close()
    return {
        "runs": runs,
        "before": before,
        "after": {name: sha256(path) for name, path in copies.items()},
        "pristine_before": pristine_before,
        "pristine_after": {p: sha256(p) for p in PRISTINE},
    }


def test_enough_episodes_over_both_databases(episodes):
    runs = episodes["runs"]
    assert len(runs) >= 50
    assert Counter(r.db for r in runs) == {"chinook": len(runs) // 2, "northwind": len(runs) // 2}
    assert len({r.seed for r in runs}) == len(runs)


def test_every_assistant_turn_parses_and_matches_the_recorded_calls(episodes):
    n_turns = sum(check_turns_parse(run.result) for run in episodes["runs"])
    assert n_turns > len(episodes["runs"])


def test_every_episode_ends_within_its_budget(episodes):
    for run in episodes["runs"]:
        result, budget = run.result, run.budget
        assert result.stop in ("submitted", "final_answer"), (run, result.error)
        assert result.error is None or "did not follow" not in result.error
        assert result.stats.to_json()["transcript_tokens"] <= min(budget.max_tokens, 2048)
        assert 1 <= len(result.rounds) <= budget.max_rounds
        assert all(1 <= len(r.calls) <= budget.max_calls_per_turn for r in result.rounds)
        assert result.forced == (result.stop == "final_answer")
        if result.stop == "submitted":
            assert result.rounds[-1].calls[-1].tool == "submit_sql"
            assert result.answer == result.rounds[-1].calls[-1].args["sql"]
        if result.force_reason == "max_rounds":
            assert len(result.rounds) == budget.max_rounds
        if result.force_reason == "failed_queries":
            failed = [c.ok for r in result.rounds for c in r.calls if c.tool == "run_query"]
            assert failed[-budget.max_failed_queries :] == [False] * budget.max_failed_queries


def test_the_loop_exits_are_all_exercised(episodes):
    runs = episodes["runs"]
    exits = Counter(run.result.force_reason or run.result.stop for run in runs)
    decode = sorted(run.result.stats.to_json()["decode_tok_s"] for run in runs)
    print(
        f"\n{len(runs)} episodes, exits {dict(exits)}, forced {sum(r.result.forced for r in runs)}, "
        f"rounds {sum(len(r.result.rounds) for r in runs)}, calls {sum(r.result.stats.to_json()['calls'] for r in runs)}, "
        f"generated {sum(r.result.stats.to_json()['generated_tokens'] for r in runs)} tokens, "
        f"median decode {decode[len(decode) // 2]:.1f} tok/s"
    )
    assert exits["submitted"] > 0
    assert exits["max_rounds"] > 0
    assert exits["context"] > 0
    assert sum(exits.values()) == len(episodes["runs"])


def test_budget_lines_count_down(episodes):
    for run in episodes["runs"]:
        lines = re.findall(r"\[(\d+) tool turns? left before you must answer\]", run.result.transcript)
        expected = [run.budget.max_rounds - k for k in range(1, len(lines) + 1)]
        assert [int(n) for n in lines] == expected
        assert "[1 tool turns" not in run.result.transcript
        if run.result.forced:  # the forced-final message once, in the budget line's place
            forced = PROMPT.forced_text(last_good_query(run.result))
            assert run.result.transcript.count(forced) == 1
            assert run.result.transcript.split(forced)[1].startswith(PROMPT.chat.turn_end)


def test_each_token_is_evaluated_once(episodes):
    multi_round = 0
    for run in episodes["runs"]:
        stats = run.result.stats.to_json()
        check_each_token_evaluated_once(run.result, run.session_tokens)  # and the session's own count
        assert run.session_text_matches  # the context's tokens spell the transcript exactly
        assert stats["decode_tok_s"] > 0 and stats["wall_s"] > 0
        multi_round += len(run.result.rounds) >= 3
    assert multi_round > 0


def test_failing_answers_have_no_rows_and_say_why(episodes):
    for run in episodes["runs"]:
        result = run.result
        if result.sql is None:
            assert result.error and not result.rows and not result.fallback
        else:
            assert result.error is None


def test_databases_are_byte_identical_afterwards(episodes):
    assert episodes["before"] == episodes["after"]
    assert episodes["pristine_before"] == episodes["pristine_after"]


def test_a_turn_that_reaches_the_end_of_the_context_says_what_to_change(tiny_gguf_fast, chinook_db):
    """The loop plans every segment to fit; should a turn still run into the end of the context,
    the episode's error names the options that change it rather than the grammar's internals."""
    from edge_sql.agent.episode import _BrokenTurn, _Episode

    with Session(tiny_gguf_fast, n_ctx=512, n_threads=1) as session, ReadOnlyDatabase(chinook_db) as db:
        episode = _Episode(session, Toolbox(db), PROMPT, Budget(), SamplingParams(seed=1), None, None)
        session.reset()
        filler = session.tokenize("the albums of every artist " * 200, special=False)
        session.eval(filler[: session.n_ctx - 3])  # three tokens of room for a final turn
        with pytest.raises(_BrokenTurn) as ended:
            episode._generate(episode.room.grammar_final(64), stop_tokens=(episode.end_id,))
    assert str(ended.value) == (
        "the turn reached the end of the 512-token context; bound thinking (--think-tokens, "
        "Budget.max_think_tokens) or use a larger context (--ctx, n_ctx)"
    )
