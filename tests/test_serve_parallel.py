"""`edge-sql serve --parallel 2`: two clients answered at once, a third queued behind them, and a
client that leaves stops its own episode only. The queue's own view first (asks of the test's
own, in a real Agent's queue), then a
real server process on a free port with the fixture model and real databases."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest

from edge_sql.agent.events import RoundStarted
from edge_sql.errors import Cancelled, EdgeSqlError
from edge_sql.serve.queue import AskQueue, Finished, Position
from edge_sql.serve.request import AskRequest
from serve_helpers import ServerProcess, agent_queue, read_events, serve_command, without_stats

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
CHINOOK = DATA_DIR / "chinook" / "chinook.sqlite"
NORTHWIND = DATA_DIR / "northwind" / "northwind.sqlite"


@pytest.fixture
def two_at_once(tiny_gguf_fast):
    """The queue of a real Agent with two sessions (two calls at a time)."""
    with agent_queue(tiny_gguf_fast, parallel=2) as queue:
        yield queue


def test_two_slots_run_two_jobs_at_once_and_the_third_waits(tmp_path: Path, two_at_once) -> None:
    """`a` and `b` must both be inside `ask` at the same time (a two-party barrier, which breaks
    otherwise); `c` waits at position 1 (in its own thread, in the Agent's queue) until `a` is
    cancelled, then runs beside `b`; `b` and `c` end as they would alone."""
    db = tmp_path / "chinook.sqlite"
    shutil.copyfile(CHINOOK, db)
    met = threading.Barrier(2, timeout=30)
    released = {name: threading.Event() for name in "abc"}
    threads: dict[str, str] = {}

    def ask(request, database, post, stopped, place):
        name = request.question
        threads[name] = threading.current_thread().name
        if name in "ab":
            met.wait()
        post(RoundStarted(round=1))
        while not released[name].wait(0.01):
            if stopped():
                raise Cancelled(f"{name} stopped")
        raise EdgeSqlError(f"answered {name} ({database.table_names()[0]})")

    queue = AskQueue(ask, two_at_once, max_waiting=1)

    async def scenario() -> dict:
        jobs = {name: queue.submit(AskRequest(question=name, database="chinook"), db) for name in "abc"}
        streams = {name: job.updates() for name, job in jobs.items()}
        seen = {name: [] for name in "abc"}

        async def take(name: str, n: int) -> None:
            for _ in range(n):
                seen[name].append(await anext(streams[name]))

        busy = queue.snapshot()
        await take("a", 3)
        await take("b", 3)
        await take("c", 1)
        jobs["a"].cancel()  # a running job leaves: its slot goes to c
        await take("a", 1)
        await take("c", 2)
        middle = queue.snapshot()
        released["b"].set()
        await take("b", 1)
        released["c"].set()
        await take("c", 1)
        return {"seen": seen, "busy": busy, "middle": middle, "end": queue.snapshot()}

    try:
        out = asyncio.run(scenario())
    finally:
        queue.close()
    seen = out["seen"]
    assert seen["a"][:2] == [Position(1), Position(0)] and seen["a"][2].round == 1
    assert isinstance(seen["a"][3], Finished) and str(seen["a"][3].error) == "a stopped"
    assert seen["b"][:2] == [Position(1), Position(0)] and seen["b"][2].round == 1
    assert str(seen["b"][3].error) == "answered b (Album)"
    assert seen["c"][:2] == [Position(1), Position(0)] and seen["c"][2].round == 1
    assert str(seen["c"][3].error) == "answered c (Album)"
    assert len({threads["a"], threads["b"], threads["c"]}) == 3  # c waited for its turn in its own thread
    assert {k: out["busy"][k] for k in ("running", "running_jobs", "parallel", "waiting")} == {
        "running": True,
        "running_jobs": 2,
        "parallel": 2,
        "waiting": 1,
    }
    assert (out["middle"]["running_jobs"], out["middle"]["waiting"], out["middle"]["cancelled"]) == (2, 0, 1)
    end = out["end"]
    assert (end["running"], end["running_jobs"], end["waiting"]) == (False, 0, 0)
    assert (end["cancelled"], end["failed"], end["rejected"]) == (1, 2, 0)


def test_a_full_queue_counts_every_slot(tmp_path: Path, two_at_once) -> None:
    """With two slots and no waiting room, two jobs run and the third is refused (QueueFull)."""
    from edge_sql.errors import QueueFull

    db = tmp_path / "chinook.sqlite"
    shutil.copyfile(CHINOOK, db)
    release = threading.Event()

    def ask(request, database, post, stopped, place):
        release.wait(30)
        raise EdgeSqlError(f"answered {request.question}")

    queue = AskQueue(ask, two_at_once, max_waiting=0)

    async def scenario() -> tuple[dict, str, list[str]]:
        first = queue.submit(AskRequest(question="1", database="chinook"), db)
        second = queue.submit(AskRequest(question="2", database="chinook"), db)
        snapshot = queue.snapshot()
        with pytest.raises(QueueFull) as refused:
            queue.submit(AskRequest(question="3", database="chinook"), db)
        release.set()
        return snapshot, str(refused.value), [str((await job.wait()).error) for job in (first, second)]

    try:
        snapshot, refused, outcomes = asyncio.run(scenario())
    finally:
        queue.close()
    assert (snapshot["running_jobs"], snapshot["waiting"]) == (2, 0)
    assert "the queue is full (0 waiting, limit 0)" in refused
    assert outcomes == ["answered 1", "answered 2"]


# ---- a real server -----------------------------------------------------------------------------

# Each round thinks up to the bound (the fixture's random weights never close a think block
# early), so an episode lasts hundreds of tokens: long enough to overlap with another one.
PARALLEL = [
    "--threads",
    "1",
    "--ctx",
    "4096",
    "--max-rounds",
    "1",
    "--think-tokens",
    "300",
    "--no-tune",
    "--parallel",
    "2",
    "--queue-size",
    "2",
]


def _stream(server: ServerProcess, body: dict):
    conn = server.connection(timeout_s=300)
    conn.request("POST", "/v1/ask", body=json.dumps(body), headers={"Accept": "text/event-stream"})
    response = conn.getresponse()
    assert response.status == 200
    return conn, response


def test_two_clients_at_once_a_third_queued_and_a_cancel_changes_nothing(tiny_gguf_fast, tmp_path):
    dbs = {"chinook": tmp_path / "chinook.sqlite", "northwind": tmp_path / "northwind.sqlite"}
    shutil.copyfile(CHINOOK, dbs["chinook"])
    shutil.copyfile(NORTHWIND, dbs["northwind"])
    server = ServerProcess(serve_command(tiny_gguf_fast, dbs, *PARALLEL, "--port", "0"), tmp_path / "server.log")
    asks = {
        "a": {"question": "List the albums.", "database": "chinook", "seed": 1},
        "b": {"question": "How many products are there?", "database": "northwind", "seed": 2},
        "c": {"question": "Which genres are there?", "database": "chinook", "seed": 3},
    }
    try:
        health = server.health()["queue"]
        assert (health["parallel"], health["running_jobs"], health["running"]) == (2, 0, False)
        conn_a, stream_a = _stream(server, asks["a"])
        assert [name for name, _ in read_events(stream_a, until="round")] == ["queued", "running", "round"]
        conn_b, stream_b = _stream(server, asks["b"])
        events_b = read_events(stream_b, until="round")
        assert [name for name, _ in events_b] == ["queued", "running", "round"]
        # both stream, neither has finished: two episodes run at once
        health = server.health()["queue"]
        assert (health["running_jobs"], health["waiting"], health["completed"]) == (2, 0, 0)

        conn_c, stream_c = _stream(server, asks["c"])
        events_c = read_events(stream_c, until="queued")
        assert events_c[0][1]["position"] == 1  # first behind the two running
        assert server.health()["queue"]["waiting"] == 1

        conn_a.close()  # client a goes away mid-episode: its episode stops, c takes its slot
        events_c += read_events(stream_c, until="running")
        assert [name for name, _ in events_c] == ["queued", "running"]

        events_b += read_events(stream_b)
        events_c += read_events(stream_c)
        conn_b.close()
        conn_c.close()
        assert events_b[-1][0] == "answer" and events_c[-1][0] == "answer"
        server.wait_for_log(r"ask #1 \(chinook\): cancelled")

        # b's answer, made beside a (then cancelled) and c, is the answer b gets alone
        status, _, alone = server.request("POST", "/v1/ask", asks["b"])
        assert status == 200 and without_stats(alone) == without_stats(events_b[-1][1])
        assert alone["question"] == asks["b"]["question"] and alone["rounds"]
        queue = server.wait_idle()["queue"]
        assert (queue["cancelled"], queue["completed"], queue["failed"]) == (1, 3, 0)
        assert (queue["running_jobs"], queue["waiting"]) == (0, 0)
    finally:
        assert server.stop() == 0, server.log()
    assert dbs["chinook"].read_bytes() == CHINOOK.read_bytes()
    assert dbs["northwind"].read_bytes() == NORTHWIND.read_bytes()
