"""`edge-sql serve` over HTTP: a real server process on a free port, the fixture model, real databases."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from edge_sql.charts import chart_for
from serve_helpers import (
    CLI,
    MCP_TOOLS,
    RESULT_KEYS,
    SMALL,
    ServerProcess,
    agent_queue,
    read_events,
    serve_command,
    without_stats,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
CHINOOK = DATA_DIR / "chinook" / "chinook.sqlite"
NORTHWIND = DATA_DIR / "northwind" / "northwind.sqlite"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("serve-dbs")
    copies = {"chinook": folder / "chinook.sqlite", "northwind": folder / "northwind.sqlite"}
    shutil.copyfile(CHINOOK, copies["chinook"])
    shutil.copyfile(NORTHWIND, copies["northwind"])
    return copies


@pytest.fixture(scope="module")
def server(tiny_gguf_fast, dbs, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-log") / "server.log"
    process = ServerProcess(
        serve_command(tiny_gguf_fast, dbs, *SMALL, "--port", "0", "--max-question", "300", "--max-body", "4096"), log
    )
    yield process
    assert process.stop() == 0, process.log()


def _rows_of(sql: str, path: Path) -> list[list]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return [list(row) for row in conn.execute(sql).fetchall()]


def _check_answer(answer: dict, question: str, path: Path) -> None:
    """A complete answer: every field of `run --json`, rounds with calls, rows that the SQL returns."""
    assert set(answer) == RESULT_KEYS and answer["question"] == question
    assert answer["stop"] in ("submitted", "final_answer") and answer["rounds"]
    assert all(call["tool"] and isinstance(call["ok"], bool) for r in answer["rounds"] for call in r["calls"])
    if answer["sql"] is not None:
        assert answer["rows"] == _rows_of(answer["sql"], path)[:200]
        assert answer["chart"] == chart_for(answer["columns"], answer["rows"], truncated=answer["truncated"])
    else:
        assert answer["error"] and answer["rows"] == [] and answer["chart"] is None


def test_health_and_databases(server, tiny_gguf_fast, dbs):
    health = server.health()
    assert health["model"] == tiny_gguf_fast.name and health["variant"] == "Q4_0" and health["architecture"] == "qwen35"
    assert health["queue"]["running"] is False and health["queue"]["waiting"] == 0
    assert health["queue"]["max_waiting"] == 8
    assert (health["queue"]["parallel"], health["queue"]["running_jobs"]) == (1, 0)  # the default: one at a time
    status, _, body = server.request("GET", "/v1/databases")
    assert status == 200
    with sqlite3.connect(dbs["northwind"]) as conn:
        northwind_tables = {
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        }
    by_name = {entry["name"]: entry["tables"] for entry in body["databases"]}
    assert set(by_name) == {"chinook", "northwind"}
    assert set(by_name["northwind"]) == northwind_tables
    assert "Album" in by_name["chinook"]
    assert str(dbs["chinook"].parent) not in json.dumps(body)  # clients never see paths
    assert f"(the web page: http://127.0.0.1:{server.port}/ ;" in server.log()  # where to point a browser


def test_ask_json_is_what_run_json_prints(server, tiny_gguf_fast, dbs):
    question = "How many albums are there?"
    status, headers, answer = server.request(
        "POST", "/v1/ask", {"question": question, "database": "chinook", "seed": 5}
    )
    assert status == 200 and headers["content-type"] == "application/json", answer
    _check_answer(answer, question, dbs["chinook"])
    run = subprocess.run(
        [
            *CLI,
            "run",
            "--db",
            str(dbs["chinook"]),
            "--model",
            str(tiny_gguf_fast),
            *SMALL,
            "--budget",
            "max_result_rows=200",
            "--question",
            question,
            "--seed",
            "5",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == (0 if json.loads(run.stdout)["sql"] is not None else 3), run.stderr  # 3: no answer
    assert without_stats(json.loads(run.stdout)) == without_stats(answer)
    assert set(json.loads(run.stdout)["stats"]) == set(answer["stats"])


def test_ask_streams_rounds_calls_and_the_answer(server, dbs):
    body = {"question": "Which genres are there?", "database": "chinook", "seed": 9}
    conn = server.connection()
    conn.request("POST", "/v1/ask", body=json.dumps(body), headers={"Accept": "text/event-stream"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    events = read_events(response)
    conn.close()
    names = [name for name, _ in events]
    assert names[0] == "queued" and events[0][1]["position"] == 1 and names[1] == "running"
    elapsed = [data["elapsed_s"] for name, data in events[:-1]]
    assert elapsed == sorted(elapsed) and 0 <= elapsed[0] < elapsed[-1] < 300
    assert names[-1] == "answer" and names[2] == "round"
    answer = events[-1][1]
    _check_answer(answer, body["question"], dbs["chinook"])
    assert [data["round"] for name, data in events if name == "round"] == [r["index"] for r in answer["rounds"]]
    assert [(data["round"], data["think"]) for name, data in events if name == "think"] == [
        (r["index"], r["think"]) for r in answer["rounds"]
    ]
    streamed_calls = [
        {k: v for k, v in data.items() if k not in ("round", "elapsed_s")} for name, data in events if name == "call"
    ]
    assert streamed_calls == [call for r in answer["rounds"] for call in r["calls"]]
    assert ("forced" in names) == answer["forced"]
    writing = [data for name, data in events if name == "tokens"]  # the first as soon as the model writes
    counts = [data["tokens"] for data in writing]
    assert writing and 0 < counts[0] and counts == sorted(counts) and counts[-1] <= answer["stats"]["generated_tokens"]
    assert writing[0]["text"] and all(data["tok_s"] > 0 for data in writing)
    assert {data["round"] for data in writing} <= {r["index"] for r in answer["rounds"]}
    status, _, plain = server.request("POST", "/v1/ask", body)  # the same request without streaming
    assert status == 200 and without_stats(plain) == without_stats(answer)


def test_a_doubtful_answer_says_so_in_the_json(server, dbs):
    """/v1/ask's JSON (that of `run --json`) says how sure an answer is, why, and how it came
    about: a vote of two episodes of the fixture model, whose answers fail their checks."""
    body = {"question": "How many albums?", "database": "chinook", "seed": 3, "vote": 2}
    status, _, answer = server.request("POST", "/v1/ask", body)
    assert status == 200, answer
    checks, vote = answer["checks"], answer["stats"]["vote"]
    assert checks["confidence"] == "doubtful"
    assert checks["reasons"] == [f["message"] for f in checks["findings"] if f["level"] == "doubtful"]
    forced_because = {"max_rounds": "tool rounds used up", "failed_queries": "too many failed queries"}
    forced_because["context"] = "context budget reached"
    said = f"the answer was forced ({forced_because.get(answer['force_reason'] or '', '')})"
    assert (said in checks["reasons"]) == answer["forced"]  # the reason the episode gave, not always rounds
    assert answer["forced"] == (answer["force_reason"] in ("max_rounds", "failed_queries", "context"))
    if answer["sql"] is None:  # the model's answer did not run, and the reasons say why
        failure = answer["error"].removeprefix("the answer failed to run: ")
        if failure.startswith("the final answer was not SQL"):  # prose: the checks say it does not parse
            assert any(reason.startswith("it does not parse as SQL (") for reason in checks["reasons"])
        else:
            assert f"the SQL failed to run: {failure}" in checks["reasons"]
    assert vote["k"] == 2 and checks["agreement"] == round(vote["agreed"] / 2, 4)
    assert f"{vote['agreed']} of 2 episodes agree on this result" in checks["reasons"]


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b'{"question": "How many albums?", "database": "nope"}', 404, "unknown database 'nope'"),
        (b"not json", 422, "not JSON"),
        (b'["How many albums?", "chinook"]', 422, "JSON object"),
        (b'{"database": "chinook"}', 422, "missing field 'question'"),
        (b'{"question": "How many albums?", "database": "chinook", "seed": "x"}', 422, "'seed' has the wrong type"),
        (b'{"question": "How many albums?", "database": "chinook", "seed": true}', 422, "'seed' has the wrong type"),
        (
            b'{"question": "How many albums?", "database": "chinook", "path": "/etc/passwd"}',
            422,
            "unknown field(s) 'path'",
        ),
        (b'{"question": "   ", "database": "chinook"}', 422, "question is empty"),
        (json.dumps({"question": "x" * 301, "database": "chinook"}).encode(), 422, "301 characters; the limit is 300"),
        (json.dumps({"question": "y", "database": "chinook", "evidence": "z" * 5000}).encode(), 413, "limit is 4096"),
    ],
)
def test_bad_requests_get_clear_errors(server, raw, status, message):
    got, headers, body = server.request("POST", "/v1/ask", raw=raw)
    assert got == status and headers["content-type"] == "application/json"
    assert message in body["error"]


def test_oversized_chunked_body_is_413(server):
    conn = server.connection()
    conn.request(
        "POST",
        "/v1/ask",
        body=iter([b'{"question": "', b"a" * 3000, b"b" * 3000, b'"}']),
        headers={"Content-Type": "application/json"},
        encode_chunked=True,
    )
    response = conn.getresponse()
    assert response.status == 413 and "over the limit of 4096" in json.loads(response.read())["error"]
    conn.close()


def test_unknown_route_and_method(server):
    status, _, body = server.request("GET", "/v1/nothing")
    assert status == 404 and body == {"error": "GET /v1/nothing: Not Found"}
    status, headers, body = server.request("GET", "/v1/ask")
    assert status == 405 and headers["allow"] == "POST" and body == {"error": "GET /v1/ask: Method Not Allowed"}


def test_two_concurrent_clients_get_complete_answers(server, dbs):
    asks = {
        "a": ({"question": "Which artist has the most albums?", "database": "chinook", "seed": 21}, "chinook"),
        "b": ({"question": "How many products are there?", "database": "northwind", "seed": 22}, "northwind"),
    }
    before = server.health()["queue"]["completed"]
    results: dict[str, tuple] = {}

    def client(name: str) -> None:
        results[name] = server.request("POST", "/v1/ask", asks[name][0])

    threads = [threading.Thread(target=client, args=(name,)) for name in asks]
    for thread in threads:
        thread.start()
    # one runs on the one model, the other waits its turn: watched until both are done (on a quiet
    # machine the first may finish before the second arrives, so the waiting need not be seen)
    deadline = time.monotonic() + 300
    while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
        queue = server.health()["queue"]
        assert queue["running"] <= 1
        assert not queue["waiting"] or queue["running"] == 1
        time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=300)
    for name, (body, db) in asks.items():
        status, _, answer = results[name]
        assert status == 200, answer
        _check_answer(answer, body["question"], dbs[db])
        alone = server.request("POST", "/v1/ask", body)[2]  # each alone gives the same episode
        assert without_stats(alone) == without_stats(answer)
    assert server.health()["queue"]["completed"] == before + 4


def test_mcp_over_streamable_http(server):
    async def main() -> None:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == MCP_TOOLS
            listed = await client.call_tool("list_databases", {})
            names = [entry["name"] for entry in listed.structured_content["databases"]]
            assert names == ["chinook", "northwind"]

    anyio.run(main)


def test_database_files_are_byte_identical_afterwards(server, dbs):
    server.wait_idle()
    assert dbs["chinook"].read_bytes() == CHINOOK.read_bytes()
    assert dbs["northwind"].read_bytes() == NORTHWIND.read_bytes()


# ---- a server bound to a non-local address ---------------------------------------------------


def test_non_local_address_requires_a_token(tiny_gguf_fast, dbs, tmp_path):
    refused = subprocess.run(
        serve_command(tiny_gguf_fast, dbs, "--host", "0.0.0.0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "set --token" in refused.stderr
    server = ServerProcess(
        serve_command(
            tiny_gguf_fast, {"chinook": dbs["chinook"]}, *SMALL, "--host", "0.0.0.0", "--port", "0", "--token", "s3cret"
        ),
        tmp_path / "server.log",
    )
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            status, got, body = server.request("GET", "/health", headers=headers)
            assert status == 401 and got["www-authenticate"].startswith("Bearer") and "bearer token" in body["error"]
        status, _, body = server.request("POST", "/v1/ask", {"question": "How many albums?", "database": "chinook"})
        assert status == 401
        assert server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})[0] == 401
        status, _, body = server.request("GET", "/v1/databases", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and body["databases"][0]["name"] == "chinook"
        assert (
            server.request("GET", "/health", headers={"Authorization": "Bearer s3cret"})[2]["queue"]["completed"] == 0
        )
    finally:
        assert server.stop() == 0, server.log()


# ---- the queue: full, timed out, disconnected ------------------------------------------------


def test_queue_full_timeout_and_disconnect(tiny_gguf_fast, dbs, tmp_path):
    """One long episode runs; one request waits past its limit; one finds the queue full; the
    streaming client disconnects and its episode stops."""
    # the fixture model (random weights) thinks up to the bound: round 1 lasts thousands of tokens
    long_episode = ["--threads", "1", "--ctx", "8192", "--max-rounds", "2", "--think-tokens", "4000", "--no-tune"]
    server = ServerProcess(
        serve_command(
            tiny_gguf_fast,
            {"chinook": dbs["chinook"]},
            *long_episode,
            "--port",
            "0",
            "--queue-size",
            "1",
            "--queue-timeout",
            "1.5",
        ),
        tmp_path / "server.log",
    )
    try:
        stream = server.connection()
        stream.request(
            "POST",
            "/v1/ask",
            body=json.dumps({"question": "List the albums.", "database": "chinook"}),
            headers={"Accept": "text/event-stream"},
        )
        response = stream.getresponse()
        assert [name for name, _ in read_events(response, until="round")] == ["queued", "running", "round"]

        waited: dict[str, tuple] = {}
        waiter = threading.Thread(
            target=lambda: waited.update(
                r=server.request("POST", "/v1/ask", {"question": "How many tracks?", "database": "chinook"})
            )
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while server.health()["queue"]["waiting"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, headers, body = server.request("POST", "/v1/ask", {"question": "And genres?", "database": "chinook"})
        assert status == 503 and int(headers["retry-after"]) >= 1 and "queue is full" in body["error"]

        waiter.join(timeout=30)
        status, headers, body = waited["r"]
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert "waited 1.5 s in the queue" in body["error"]
        queue = server.health()["queue"]
        assert queue["running"] and queue["waiting"] == 0 and queue["timed_out"] == 1 and queue["rejected"] == 1

        stream.close()  # the client goes away in the middle of round 1: its episode stops
        queue = server.wait_idle(timeout_s=20)["queue"]
        assert queue["cancelled"] == 1 and queue["completed"] == 0
        server.wait_for_log(r"ask #1 \(chinook\): cancelled, 1 round,")
    finally:
        assert server.stop() == 0, server.log()
    assert dbs["chinook"].read_bytes() == CHINOOK.read_bytes()


@pytest.fixture
def line(tiny_gguf_fast):
    """The queue of a real Agent (one call at a time) that serve's AskQueue waits in."""
    with agent_queue(tiny_gguf_fast) as queue:
        yield queue


def test_a_job_submitted_to_an_idle_queue_runs_at_once(tmp_path: Path, line) -> None:
    """The queue's own view, without a server (the Agent's queue, asks of the test's own): a job
    that arrives while nothing runs is the running one in the same step, so /health never shows
    one waiting while none runs (the worker thread may not have woken yet); a job behind a
    running one waits."""
    import asyncio

    from edge_sql.errors import EdgeSqlError
    from edge_sql.serve.queue import AskQueue, AskRequest

    db = tmp_path / "chinook.sqlite"
    shutil.copyfile(Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite", db)
    release = threading.Event()

    def ask(request, database, post, stopped, place):
        release.wait(30)
        raise EdgeSqlError(f"answered {request.question}")

    queue = AskQueue(ask, line)

    async def twice() -> list:
        seen = []
        for round_ in range(2):  # the second round finds the queue idle again
            first = queue.submit(AskRequest(question=f"{round_}a", database="chinook"), db)
            idle = queue.snapshot()
            second = queue.submit(AskRequest(question=f"{round_}b", database="chinook"), db)
            busy = queue.snapshot()
            release.set()
            outcomes = [str((await job.wait()).error) for job in (first, second)]
            release.clear()
            seen.append((idle, busy, outcomes))
        return seen

    try:
        seen = asyncio.run(twice())
    finally:
        queue.close()
    for round_, (idle, busy, outcomes) in enumerate(seen):
        assert (idle["running"], idle["waiting"]) == (True, 0)
        assert (busy["running"], busy["waiting"]) == (True, 1)
        assert outcomes == [f"answered {round_}a", f"answered {round_}b"]


def test_queue_events_withdrawal_and_time_out_on_the_loop(tmp_path: Path, line) -> None:
    """The queue's own view (the Agent's queue, asks of the test's own): a running episode's events (posted from the executor's thread)
    arrive in order before its outcome; a cancelled waiter leaves and the one behind moves up;
    a waiter past the time limit ends in QueueTimeout with Retry-After; counts say so."""
    import asyncio

    from edge_sql.agent.events import RoundStarted
    from edge_sql.errors import Cancelled, EdgeSqlError, QueueTimeout
    from edge_sql.serve.queue import AskQueue, Finished, Position
    from edge_sql.serve.request import AskRequest

    db = tmp_path / "chinook.sqlite"
    shutil.copyfile(CHINOOK, db)
    release = threading.Event()
    episode_threads: set[str] = set()

    def ask(request, database, post, stopped, place):
        episode_threads.add(threading.current_thread().name)
        for index in (1, 2, 3):
            post(RoundStarted(round=index))
        release.wait(30)
        raise EdgeSqlError(f"answered {request.question} ({database.table_names()[0]})")

    queue = AskQueue(ask, line, max_waiting=3, wait_timeout_s=0.5)

    async def scenario() -> tuple[list, list, list, dict]:
        running = queue.submit(AskRequest(question="first", database="chinook"), db)
        cancelled = queue.submit(AskRequest(question="second", database="chinook"), db)
        timed_out = queue.submit(AskRequest(question="third", database="chinook"), db)
        cancelled.cancel()
        waited = [item async for item in timed_out.updates()]  # ends when its time is up
        gone = [item async for item in cancelled.updates()]
        release.set()
        ran = [item async for item in running.updates()]
        return ran, gone, waited, queue.snapshot()

    try:
        ran, gone, waited, snapshot = asyncio.run(scenario())
    finally:
        queue.close()
    assert ran[:2] == [Position(1), Position(0)]
    assert [item.round for item in ran[2:-1]] == [1, 2, 3]
    assert isinstance(ran[-1], Finished) and str(ran[-1].error) == "answered first (Album)"
    assert gone == [Position(1), Finished(error=gone[-1].error)] and isinstance(gone[-1].error, Cancelled)
    assert waited[:2] == [Position(2), Position(1)]  # moved up when the second left
    assert isinstance(waited[-1], Finished) and isinstance(waited[-1].error, QueueTimeout)
    assert "waited 0.5 s in the queue" in str(waited[-1].error) and waited[-1].error.retry_after_s >= 1
    assert len(episode_threads) == 1 and threading.current_thread().name not in episode_threads
    assert (snapshot["running"], snapshot["waiting"]) == (False, 0)
    assert (snapshot["failed"], snapshot["cancelled"], snapshot["timed_out"]) == (1, 1, 1)
