"""`Agent(parallel=N)`: a pool of sessions, `ask_many`, asks from several threads at once, and
answers by vote (`agent/majority_vote.py`).

Episodes run at once must be the episodes run alone: each is compared with the same question
asked of a plain `parallel=1` Agent (transcript, SQL and rounds; the tolerance of the batched
engine, when it comes, is the runtime's near-tie rounding). The vote is checked twice: its
choice function on constructed results over a real database, and K sampled episodes of the
trained fixture, whose majority is recomputed here with sqlite3 on the same file.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
import threading
from collections import Counter
from pathlib import Path

import pytest

import edge_sql
from edge_sql.agent import Budget
from edge_sql.agent.events import Answered, RoundStarted
from edge_sql.agent.majority_vote import STOPPED, Tally, agreement_line, choose, decided, failed_queries
from edge_sql.agent.result import CallRecord, EpisodeResult, RoundRecord
from edge_sql.agent.stats import EpisodeFigures, EpisodeStats
from edge_sql.api import Ask
from edge_sql.errors import EdgeSqlError
from edge_sql.tools import ReadOnlyDatabase
from fixture_budget import TRAINED_LIMITS

SMALL = Budget(
    max_tokens=2048,
    max_rounds=3,
    max_think_tokens=8,
    max_final_think_tokens=8,
    max_sql_chars=24,
    max_name_chars=16,
    min_string_chars=8,
    min_think_tokens=4,
    max_final_sql_tokens=24,
    max_calls_per_turn=2,
)
PARALLEL = 3
LOAD = dict(n_ctx=2048, n_threads=1, pull_if_missing=False, tune=False, prefix_cache=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_episode(result: EpisodeResult, alone: EpisodeResult) -> None:
    assert result.question == alone.question and result.evidence == alone.evidence
    assert result.transcript == alone.transcript
    assert result.sql == alone.sql and result.answer == alone.answer and result.stop == alone.stop
    assert result.to_json(transcript=False)["rounds"] == alone.to_json(transcript=False)["rounds"]


@pytest.fixture(scope="module")
def single(tiny_gguf_fast):
    """The plain path: what each episode must equal."""
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, **LOAD) as agent:
        yield agent


@pytest.fixture(scope="module")
def pooled(tiny_gguf_fast):
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, parallel=PARALLEL, **LOAD) as agent:
        yield agent


def test_the_pool_has_one_session_per_sequence(pooled, single):
    assert pooled.parallel == PARALLEL and len(pooled.sessions) == PARALLEL
    assert len({id(s) for s in pooled.sessions}) == PARALLEL
    assert all(s.n_ctx == 2048 for s in pooled.sessions)  # each sequence gets its own window
    with pytest.raises(EdgeSqlError, match=r"has 3 sessions .*agent.sessions"):
        pooled.session  # noqa: B018 - the access is what raises
    assert single.parallel == 1 and single.sessions == [single.session]
    with pytest.raises(ValueError, match="parallel must be at least 1"):
        edge_sql.Agent(single.model_path, parallel=0, **LOAD)


def test_identical_greedy_questions_at_once_equal_the_lone_episode(pooled, single, chinook_db):
    before = sha256(chinook_db)
    question = "How many albums are there?"
    alone = single.ask(question, chinook_db, greedy=True)
    results = pooled.ask_many([question] * PARALLEL, chinook_db, greedy=True)
    assert len(results) == PARALLEL
    for result in results:
        same_episode(result, alone)
        assert result.stats.to_json()["generated_tokens"] == alone.stats.to_json()["generated_tokens"] > 0
    assert sha256(chinook_db) == before


def test_different_questions_each_equal_their_lone_episode(pooled, single, chinook_db, northwind_db):
    """Mixed databases, evidence and seeds in one call, results in input order."""
    before = {db: sha256(db) for db in (chinook_db, northwind_db)}
    questions = [
        Ask("Which artist has the most albums?", seed=3),
        ("How many orders were shipped to France?", northwind_db, "France is a country", 4),
        "List the genres.",  # ask_many's db, evidence and seed
        Ask("How many products are discontinued?", northwind_db, seed=6),
    ]
    results = pooled.ask_many(questions, chinook_db, evidence="a hint", seed=5)
    alone = [
        single.ask("Which artist has the most albums?", chinook_db, evidence="a hint", seed=3),
        single.ask("How many orders were shipped to France?", northwind_db, evidence="France is a country", seed=4),
        single.ask("List the genres.", chinook_db, evidence="a hint", seed=5),
        single.ask("How many products are discontinued?", northwind_db, evidence="a hint", seed=6),
    ]
    assert [r.question for r in results] == [a.question for a in alone]
    for result, lone in zip(results, alone):
        same_episode(result, lone)
    assert len({r.transcript for r in results}) == 4
    assert {db: sha256(db) for db in before} == before


def test_a_failing_question_costs_no_other_its_answer(pooled, single, chinook_db, tmp_path):
    seen: list[int] = []
    results = pooled.ask_many(
        [Ask("How many?", tmp_path / "missing.sqlite"), "   ", "How many tracks are there?"],
        chinook_db,
        seed=8,
        on_result=lambda i, _r: seen.append(i),
    )
    assert [r.stop for r in results[:2]] == ["error", "error"]
    assert "database file not found" in results[0].error and results[0].sql is None and not results[0].rounds
    assert results[1].error == "empty question"
    same_episode(results[2], single.ask("How many tracks are there?", chinook_db, seed=8))
    assert seen == [2]  # on_result: the questions that ran
    with pytest.raises(ValueError, match="no database for the question"):
        pooled.ask_many(["How many?"])


def test_should_stop_ends_every_episode_of_ask_many(pooled, chinook_db):
    results = pooled.ask_many(
        ["How many albums?", "How many artists?", "How many tracks?", "How many genres?"],
        chinook_db,
        seed=1,
        should_stop=lambda: True,
    )
    assert [r.stop for r in results] == ["cancelled"] * 4
    assert all(r.sql is None and r.error == "stopped by the user" for r in results)
    assert [r.question for r in results] == [
        "How many albums?",
        "How many artists?",
        "How many tracks?",
        "How many genres?",
    ]


def test_two_threads_ask_at_once(pooled, single, chinook_db, northwind_db):
    """Both episodes are under way together: each one's first round waits for the other's (a
    pool that ran them one after another would never let the barrier open)."""
    jobs = {
        "a": ("Which customer spent the most?", chinook_db, 11),
        "b": ("How many products are discontinued?", northwind_db, 12),
    }
    expected = {name: single.ask(q, db, seed=seed) for name, (q, db, seed) in jobs.items()}
    both_started = threading.Barrier(2, timeout=600)
    got: dict[str, EpisodeResult] = {}
    failures: list[BaseException] = []

    def work(name: str) -> None:
        question, db, seed = jobs[name]
        first = []

        def on_event(event) -> None:
            if isinstance(event, RoundStarted) and not first:
                first.append(event)
                both_started.wait()

        try:
            got[name] = pooled.ask(question, db, seed=seed, on_event=on_event)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and set(got) == {"a", "b"}
    for name in jobs:
        same_episode(got[name], expected[name])


def test_close_waits_for_the_running_asks_and_refuses_new_ones(tiny_gguf_fast, chinook_db):
    agent = edge_sql.Agent(tiny_gguf_fast, budget=SMALL, parallel=2, **LOAD)
    started, closing = threading.Event(), threading.Event()
    order: list[str] = []
    results: list[EpisodeResult] = []

    def on_event(event) -> None:
        if isinstance(event, RoundStarted) and event.round == 1:
            started.set()
            closing.wait()  # the episode goes on once close() is being called
        elif isinstance(event, Answered):  # the episode's last event, while it holds its session
            order.append("answer")

    def ask() -> None:
        results.append(agent.ask("How many albums?", chinook_db, seed=1, on_event=on_event))

    def close() -> None:
        started.wait()
        closing.set()
        agent.close()
        order.append("closed")

    threads = [threading.Thread(target=ask), threading.Thread(target=close)]
    threads[0].start()
    threads[1].start()
    for thread in threads:
        thread.join()
    assert order == ["answer", "closed"] and agent.sessions == []
    assert results[0].stop in ("submitted", "final_answer") and results[0].rounds
    with pytest.raises(EdgeSqlError, match="closed"):
        agent.ask("How many?", chinook_db)
    agent.close()  # idempotent


# ---- the vote's choice, on constructed episodes ------------------------------------------------------


def episode(sql: str | None, failed: int = 0, error: str | None = None) -> EpisodeResult:
    calls = [CallRecord("run_query", {"sql": "SELECT nope"}, False, "Error: no such column: nope")] * failed
    calls.append(CallRecord("run_query", {"sql": "SELECT 1"}, True, "1"))
    return EpisodeResult(
        question="q",
        evidence=None,
        sql=sql,
        columns=[],
        rows=[],
        truncated=False,
        forced=False,
        fallback=False,
        answer=sql,
        rounds=[RoundRecord(1, "", calls)],
        stats=EpisodeStats(EpisodeFigures(rounds=1)),
        transcript="",
        stop="submitted" if sql else "final_answer",
        error=error if sql is None else None,
    )


@pytest.fixture
def chinook(chinook_db):
    before = sha256(chinook_db)
    with ReadOnlyDatabase(chinook_db) as db:
        yield db
    assert sha256(chinook_db) == before


def test_the_majority_result_set_wins(chinook):
    """Result sets compare as the evaluation scores them: row order, duplicates and the query's
    text do not matter, 1 equals 1.0, column names do not count."""
    results = [
        episode("SELECT COUNT(*) FROM Genre"),  # 25: group 0
        episode("SELECT 1 UNION ALL SELECT 2", failed=1),  # {1, 2}: group 1
        episode("SELECT 2.0 AS b UNION ALL SELECT 1 UNION ALL SELECT 1"),  # {1, 2} again
        episode(None, error="no answer: the model gave none and no query ran without error"),
        episode("SELECT nope FROM nowhere"),  # fails now: no vote
        episode("SELECT count(GenreId) FROM Genre"),  # 25 again
        episode("SELECT 1 UNION SELECT 2", failed=0),  # {1, 2}: group 1 has 3
    ]
    voted = choose(results, chinook)
    vote = voted.stats.to_json()["vote"]
    assert [e["group"] for e in vote["episodes"]] == [0, 1, 1, None, None, 0, 1]
    assert [e["sql"] for e in vote["episodes"]] == [r.sql for r in results]
    assert [e["failed_queries"] for e in vote["episodes"]] == [0, 1, 0, 0, 0, 0, 0]
    assert vote["episodes"][3]["reason"].startswith("no answer")
    assert vote["episodes"][4]["reason"].startswith("the SQL failed to run: no such table: nowhere")
    # group 1 (3 votes) beats group 0 (2); within it, episode 2 has no failed query and comes before 6
    assert (vote["k"], vote["voters"], vote["agreed"], vote["chosen"], vote["agreement"]) == (7, 5, 3, 2, 0.6)
    assert voted.sql == results[2].sql and voted.stats.to_json()["rounds"] == 1
    assert results[2].stats.vote is None  # the inputs are left as they were
    assert agreement_line(voted.stats.vote) == "3 of 7 episodes agreed (2 without an answer that runs)"


def test_a_tie_goes_to_the_fewest_failed_queries_then_the_first(chinook):
    tie = [episode("SELECT 1", failed=2), episode("SELECT 2", failed=1), episode("SELECT 1"), episode("SELECT 2")]
    assert choose(tie, chinook).stats.to_json()["vote"]["chosen"] == 2  # groups of 2 and 2: episode 2 has no failure
    first = [episode("SELECT 1", failed=1), episode("SELECT 2", failed=1), episode("SELECT 3", failed=1)]
    chosen = choose(first, chinook)
    vote = chosen.stats.to_json()["vote"]
    assert (vote["chosen"], vote["agreed"], vote["agreement"]) == (0, 1, round(1 / 3, 4))
    assert agreement_line(chosen.stats.vote) == "1 of 3 episodes agreed"
    assert failed_queries(first[0]) == 1


def test_episodes_without_an_answer_do_not_vote(chinook):
    results = [episode(None, failed=3, error="no answer"), episode("SELECT 'x'", failed=4), episode(None)]
    vote = choose(results, chinook).stats.to_json()["vote"]
    assert (vote["chosen"], vote["voters"], vote["agreed"], vote["agreement"]) == (1, 1, 1, 1.0)
    nobody = choose([episode(None), episode("SELECT nope")], chinook)
    assert nobody.sql is None
    none = nobody.stats.to_json()["vote"]
    assert (none["chosen"], none["voters"], none["agreement"]) == (0, 0, 0.0)
    assert agreement_line(nobody.stats.vote) == "0 of 2 episodes agreed (2 without an answer that runs)"


def test_a_vote_needs_sampled_episodes(pooled, chinook_db):
    with pytest.raises(ValueError, match="greedy ones would all write the same answer"):
        pooled.ask("How many albums?", chinook_db, vote=3, greedy=True)
    with pytest.raises(ValueError, match="at least 2 episodes"):
        pooled.ask("How many albums?", chinook_db, vote=1)
    with pytest.raises(EdgeSqlError, match="empty question"):
        pooled.ask(" ", chinook_db, vote=2)


# ---- stopping once the vote is decided -------------------------------------------------------------


def test_decided_when_no_remaining_episode_can_change_the_winner():
    assert decided([3], 1) and not decided([2], 2) and decided([2, 1], 0) and not decided([1, 1], 0)
    assert not decided([], 0) and decided([3, 1], 1) and not decided([3, 2], 1)


LABELS = [None, "SELECT 1", "SELECT 2", "SELECT 3", "SELECT 'x' FAILS", "SELECT 2 + 0"]  # the last agrees with 2


def test_the_early_stop_never_changes_the_winner(chinook):
    """Every vote of up to 5 episodes over these answers (none, three result sets, one that fails
    to run, another SQL with the same result as SELECT 2), finishing in every order: the episodes
    finished when `Tally` first says decided elect the result set that all K elect."""
    for k in range(2, 6):
        for answers in itertools.product(range(len(LABELS)), repeat=k):
            if answers != tuple(sorted(answers)):  # orders come below; one multiset each
                continue
            episodes = [episode(LABELS[a]) for a in answers]
            full = choose(episodes, chinook)
            winner = (
                None if not full.stats.to_json()["vote"]["voters"] else frozenset(map(tuple, _rows(chinook, full.sql)))
            )
            for order in set(itertools.permutations(range(k))):
                tally = Tally(k, chinook)
                finished = [False] * k
                for i in order:
                    finished[i] = True
                    if tally.add(episodes[i]):
                        break
                if not tally.decided:
                    assert all(finished)
                    continue
                early = choose([e if f else None for e, f in zip(episodes, finished)], chinook, keys=tally.keys)
                vote = early.stats.to_json()["vote"]
                assert frozenset(map(tuple, _rows(chinook, early.sql))) == winner, (answers, order)
                assert vote["finished"] == sum(finished) and vote["k"] == k
                assert all(e["reason"] == STOPPED for e, f in zip(vote["episodes"], finished) if not f)


def _rows(db: ReadOnlyDatabase, sql: str) -> list:
    return db.execute(sql, max_rows=10, max_cell_chars=None).rows


def test_the_vote_line_says_how_many_were_stopped(chinook):
    voted = choose([episode("SELECT 1"), None, episode("SELECT 1"), episode(None), episode("SELECT 1")], chinook)
    assert agreement_line(voted.stats.vote) == (
        "3 of 5 episodes agreed (1 without an answer that runs; 1 stopped once the vote was decided)"
    )


def test_a_cancel_stops_every_episode_of_a_vote(pooled, chinook_db):
    """A client's cancel (or Ctrl-C, which `run` turns into should_stop) reaches all K episodes."""
    calls = Counter()

    def stop() -> bool:
        calls[threading.current_thread().name] += 1
        return sum(calls.values()) > 3 * PARALLEL  # each episode has started by then

    voted = pooled.ask("How many albums?", chinook_db, vote=PARALLEL, seed=5, should_stop=stop)
    assert voted.stop == "cancelled"
    assert voted.stats.to_json()["vote"]["finished"] == PARALLEL  # cancelled by the user, not by the vote
    assert len(calls) == PARALLEL  # every episode's thread asked


# ---- a vote of the trained fixture -----------------------------------------------------------------

TRAINED_BUDGET = Budget(**TRAINED_LIMITS)
VOTE_K = 4
VOTE_SEED = 33
VOTE_QUESTION = "How many rows does the Album table have?"  # worded as the teacher's: the episodes mostly agree


def rows_of(db: Path, sql: str) -> frozenset | None:
    """The result set of `sql` by sqlite3 itself (read-only), None when it fails."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return frozenset(tuple(row) for row in conn.execute(sql).fetchall())
        except sqlite3.Error:
            return None


def test_a_vote_of_trained_episodes_answers_with_the_majority(tiny_trained_gguf, chinook_db):
    before = sha256(chinook_db)
    with edge_sql.Agent(tiny_trained_gguf, budget=TRAINED_BUDGET, parallel=VOTE_K, **{**LOAD, "n_ctx": 4096}) as agent:
        episodes = agent.ask_many([Ask(VOTE_QUESTION, seed=VOTE_SEED + i) for i in range(VOTE_K)], chinook_db)
        voted = agent.ask(VOTE_QUESTION, chinook_db, vote=VOTE_K, seed=VOTE_SEED, early_stop=False)
        early = agent.ask(VOTE_QUESTION, chinook_db, vote=VOTE_K, seed=VOTE_SEED)
    vote = voted.stats.to_json()["vote"]
    assert vote["finished"] == VOTE_K
    # the opening evaluated once for the K episodes (the prompt's state restored in both runs): the
    # other K - 1 evaluate only the turns that follow
    alone = sum(r.stats.to_json()["prompt_tokens_evaluated"] for r in episodes)
    assert vote["prompt_tokens_evaluated"] < alone
    # stopped once decided: the same winning result set, from the episodes that finished first
    assert frozenset(tuple(row) for row in early.rows) == frozenset(tuple(row) for row in voted.rows)
    assert early.stats.to_json()["vote"]["finished"] <= VOTE_K
    assert vote["k"] == VOTE_K and vote["seeds"] == [VOTE_SEED + i for i in range(VOTE_K)]
    assert vote["wall_s"] >= voted.stats.to_json()["wall_s"] > 0  # the whole vote, and the chosen episode within it
    # the stats list every episode's SQL: the same episodes asked one by one
    assert [e["sql"] for e in vote["episodes"]] == [r.sql for r in episodes]
    assert [e["failed_queries"] for e in vote["episodes"]] == [failed_queries(r) for r in episodes]
    # the majority, recomputed with sqlite3: every voter's group is its result set
    sets = [rows_of(chinook_db, r.sql) if r.sql else None for r in episodes]
    counts = Counter(s for s in sets if s is not None)
    assert vote["voters"] == sum(counts.values()) >= 2
    assert vote["agreed"] == max(counts.values()) >= 2
    assert vote["agreement"] == round(vote["agreed"] / vote["voters"], 4)
    majority = {s for s, n in counts.items() if n == vote["agreed"]}
    assert sets[vote["chosen"]] in majority
    for e, s in zip(vote["episodes"], sets):
        assert (e["group"] is None) == (s is None)
    assert voted.sql == episodes[vote["chosen"]].sql and voted.transcript == episodes[vote["chosen"]].transcript
    assert frozenset(tuple(row) for row in voted.rows) == sets[vote["chosen"]]
    assert sha256(chinook_db) == before


def test_a_vote_then_a_single_run_load_each_others_saved_prompt_state(
    tiny_gguf_fast, chinook_db, tmp_path, monkeypatch
):
    """Issue 40, bug 5: `run --vote 3` noted three times that the saved prompt state did not
    load, and the next plain run once more. One saved state per prompt now loads in both."""
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    notes: list[str] = []
    load = {**LOAD, "prefix_cache": True, "log": notes.append}
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, parallel=3, **load) as voter:
        voter.ask("How many albums?", chinook_db, vote=3, seed=1)
    states = list((tmp_path / "home").rglob("*.state"))
    assert len(states) == 1  # the prompt's, saved by the vote's first episode
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, **load) as single:
        alone = single.ask("How many albums?", chinook_db, seed=1)
    assert alone.stats.to_json()["prefix_tokens_restored"] > 0
    states[0].unlink()
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, **load) as single:
        single.ask("How many albums?", chinook_db, seed=1)  # saves it again, alone
    with edge_sql.Agent(tiny_gguf_fast, budget=SMALL, parallel=3, **load) as voter:
        voted = voter.ask("How many albums?", chinook_db, vote=3, seed=1, early_stop=False)
    assert (
        voted.stats.to_json()["prefix_tokens_restored"] >= alone.stats.to_json()["prefix_tokens_restored"]
    )  # or the whole opening
    assert not [n for n in notes if "did not load" in n or "ignoring" in n], notes
    assert len(list((tmp_path / "home").rglob("*.state"))) == 1
