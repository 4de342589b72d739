"""The Agent in an app (issue 64): awaited asks that leave the event loop free, cancelling that
frees the session at once, one first-come-first-served queue with a bound, deadlines and
`should_stop` that count while waiting, `close(cancel=True)` leaving no thread behind, the
knowledge API on paths, the errors a caller catches, and one JSON form of a result."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

import edge_sql
from edge_sql.agent import Budget
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats

# long enough that a cancel or a deadline lands inside the episode (the fixture model writes at
# random until its bounds: about 10 s an episode on one thread of a loaded 2-core machine)
LONG = Budget(max_tokens=2048, max_rounds=3, max_think_tokens=48, max_calls_per_turn=2, max_sql_chars=24)


def _edge_sql_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("edge-sql"))


@pytest.fixture
def agent_of(tiny_gguf_fast):
    """Agents on the fixture model, one session each unless asked; closed after the test."""
    made: list[edge_sql.Agent] = []

    def make(**options) -> edge_sql.Agent:
        defaults = dict(n_ctx=2048, n_threads=1, budget=LONG, pull_if_missing=False, tune=False, prefix_cache=False)
        made.append(edge_sql.Agent(tiny_gguf_fast, **{**defaults, **options}))
        return made[-1]

    yield make
    for agent in made:
        agent.close(cancel=True)


async def _until(condition, timeout: float = 60.0) -> float:
    """Wait (on the loop) until `condition()`; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)
    return time.monotonic()


def test_awaited_asks_leave_the_loop_free_and_a_cancel_frees_the_session(agent_of, chinook_db):
    agent = agent_of()
    agent.warm_up()  # the grammar's view of the vocabulary, built holding the GIL: at start, as a server does

    async def main() -> tuple[float, float, EpisodeResult]:
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                gaps.append(time.monotonic() - last - 0.01)
                last = time.monotonic()

        tick = asyncio.create_task(ticker())
        first = asyncio.create_task(agent.ask_async("Which artist has the most albums?", chinook_db, seed=1))
        await _until(lambda: agent.queue_state()["running"] == 1)
        second = asyncio.create_task(agent.ask_async("How many albums are there?", chinook_db, seed=2))
        await _until(lambda: agent.queue_state()["waiting"] == 1)
        await asyncio.sleep(1.0)  # the first episode is well under way
        cancelled_at = time.monotonic()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        served_at = await _until(lambda: agent.queue_state()["waiting"] == 0)
        result = await second
        tick.cancel()
        return max(gaps), served_at - cancelled_at, result

    worst_gap, handover_s, second = asyncio.run(main())
    assert worst_gap < 0.5  # the loop never waited for an episode (goal 50 ms; a loaded CI machine)
    assert handover_s < 2.0  # stopped at the next token (benchmarks/embedding: the figure)
    assert second.question == "How many albums are there?" and second.stop != "cancelled"
    assert agent.queue_state() == {"running": 0, "waiting": 0, "sessions": 1, "max_waiting": 64}


def test_waiting_calls_are_served_in_arrival_order_within_a_bound(agent_of, chinook_db):
    agent = agent_of(max_waiting=2)
    order: list[str] = []

    def ask(name: str) -> None:
        agent.ask(f"How many rows does {name} have?", chinook_db, seed=3)
        order.append(name)

    first = threading.Thread(target=ask, args=("Album",))
    first.start()
    while agent.queue_state()["running"] == 0:
        time.sleep(0.005)
    waiting = []
    for name in ("Artist", "Genre"):  # they queue in this order
        waiting.append(threading.Thread(target=ask, args=(name,)))
        waiting[-1].start()
        while agent.queue_state()["waiting"] < len(waiting):
            time.sleep(0.005)
    with pytest.raises(edge_sql.QueueFull, match=r"2 calls already wait for a session \(max_waiting=2\)") as full:
        agent.ask("One too many?", chinook_db)
    assert full.value.retry_after_s >= 1 and isinstance(full.value, edge_sql.RetryLater)
    for thread in [first, *waiting]:
        thread.join(timeout=300)
    assert order == ["Album", "Artist", "Genre"]


def test_deadlines_and_should_stop_count_while_waiting_and_close_cancels(agent_of, chinook_db):
    agent = agent_of()
    running: list[EpisodeResult] = []
    thread = threading.Thread(target=lambda: running.append(agent.ask("List every track.", chinook_db, seed=4)))
    thread.start()
    while agent.queue_state()["running"] == 0:
        time.sleep(0.005)

    started = time.monotonic()
    late = agent.ask("How many albums are there?", chinook_db, timeout=0.3)
    assert time.monotonic() - started < 2.0  # not the running episode's end
    assert (late.stop, late.rounds, late.sql) == ("cancelled", [], None)
    assert late.error == "stopped at the deadline: timeout=0.3 s passed before the episode started"

    flag = threading.Event()
    threading.Timer(0.2, flag.set).start()
    stopped = agent.ask("How many artists are there?", chinook_db, should_stop=flag.is_set)
    assert stopped.error == "stopped by the user before the episode started"

    gc.collect()  # an Agent another test dropped unclosed (it keeps the decode thread while it lives)
    agent.close(cancel=True)  # the running episode stops at its next token
    thread.join(timeout=60)
    assert running[0].stop == "cancelled" and running[0].error == "stopped: the Agent was closed (close(cancel=True))"
    assert _edge_sql_threads() == []  # no thread of edge-sql's outlives the Agent (the decode thread included)
    with pytest.raises(edge_sql.ClosedError):
        agent.ask("How many?", chinook_db)
    with pytest.raises(edge_sql.ClosedError):
        asyncio.run(agent.ask_async("How many?", chinook_db))


def test_a_deadline_inside_the_episode_says_so(agent_of, chinook_db):
    agent = agent_of()
    result = agent.ask("Which customer spent the most?", chinook_db, seed=5, timeout=1.5)
    assert result.stop == "cancelled" and result.error == "stopped at the deadline: timeout=1.5 s passed"
    assert 1.0 <= result.stats.wall_s < 10  # `stats.wall_s`, as the docs name it (the episode's part of the 1.5 s)
    # the episode above, twice: it runs past 1.5 s, so the 1 s deadline falls inside (a short question's
    # episode can end within 1 s on the fixture model, depending on how that model was trained)
    slow = ["Which customer spent the most?"] * 2
    many = asyncio.run(agent.ask_many_async(slow, chinook_db, seed=5, timeout=1.0))
    assert [r.stop for r in many] == ["cancelled", "cancelled"]
    assert all(r.error is not None and r.error.startswith("stopped at the deadline: timeout=1 s") for r in many)


def test_the_knowledge_api_takes_a_path_and_closes_with_the_agent(agent_of, chinook_db, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    agent = agent_of(n_ctx=1024)
    kb = agent.knowledge
    note = kb.add_note(chinook_db, "Prices are in US dollars.")
    answer = asyncio.run(
        agent.run_async(kb.verify, chinook_db, "How many albums are there?", "SELECT count(*) FROM Album")
    )
    assert [n.text for n in kb.notes(str(chinook_db))] == [note.text]
    assert [a.sql for a in kb.verified(chinook_db)] == [answer.sql]
    verified = agent.ask("how many albums are there", chinook_db)
    assert (verified.stop, verified.rows) == ("verified", [[347]])
    agent.close()
    with pytest.raises(edge_sql.ClosedError):
        kb.notes(chinook_db)
    with pytest.raises(edge_sql.ClosedError):
        agent.knowledge  # noqa: B018 - the access is what raises


def test_the_errors_a_caller_meets_are_edge_sql_errors(agent_of, chinook_db):
    with pytest.raises(edge_sql.BudgetError, match=r"Budget.max_rounds=0 is out of range") as bad:
        Budget(max_rounds=0)
    assert isinstance(bad.value, ValueError) and isinstance(bad.value, edge_sql.EdgeSqlError)
    agent = agent_of(n_ctx=1024)
    with pytest.raises(edge_sql.QuestionError, match="empty question"):
        agent.ask("  ", chinook_db)
    with pytest.raises(edge_sql.DatabaseError):
        agent.ask("How many?", chinook_db.parent / "missing.sqlite")
    with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
        agent.ask("How many?", chinook_db, timeout=0)


def _result(rows: list[list[object]]) -> EpisodeResult:
    return EpisodeResult(
        question="Show the cover.",
        evidence=None,
        sql="SELECT cover, name FROM t",
        columns=["cover", "name"],
        rows=rows,
        truncated=False,
        forced=True,
        fallback=False,
        answer="SELECT cover, name FROM t",
        rounds=[],
        stats=EpisodeStats(),
        transcript="...",
        stop="final_answer",
        force_reason="max_rounds",
    )


def test_one_json_form_blobs_as_datasette_writes_them_and_the_doubt():
    from pydantic import TypeAdapter

    result = _result([[b"\x00\xff", "00ff"], [None, "none"]])
    data = result.to_json(transcript=False)
    assert data["rows"] == [[{"$base64": True, "encoded": "AP8="}, "00ff"], [None, "none"]]
    assert TypeAdapter(EpisodeResult).dump_python(result, mode="json") == data  # what FastAPI returns
    assert TypeAdapter(EpisodeResult).dump_json(result) == TypeAdapter(dict).dump_json(data)
    assert result.doubt.forced and result.doubt.force_reason == "max_rounds"
    assert result.doubt.how == ["forced final answer: tool rounds used up"]
    assert result.stats.wall_s == 0.0 and result.stats.generated_tokens == 0
