"""`edge-sql serve`'s OpenAI-compatible endpoints through the real `openai` client against a real
server (the fixture model, a copy of Chinook), streaming and not, plus a cancel; and what the
server shows of itself: /metrics and the access log."""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from pathlib import Path

import openai
import pytest

from edge_sql.agent.display import plural
from serve_helpers import SMALL, ServerProcess, serve_command

CHINOOK = Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUESTION = "How many albums are there?"


@pytest.fixture(scope="module")
def chinook(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("openai-db") / "chinook.sqlite"
    shutil.copyfile(CHINOOK, path)
    return path


@pytest.fixture(scope="module")
def server(tiny_gguf_fast, chinook, tmp_path_factory):
    process = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook, "music": chinook}, *SMALL, "--port", "0"),
        tmp_path_factory.mktemp("openai-log") / "server.log",
    )
    yield process
    assert process.stop() == 0, process.log()
    assert chinook.read_bytes() == CHINOOK.read_bytes()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0, timeout=300)


def metrics(server: ServerProcess) -> dict[str, float]:
    """`name{labels}` -> value, from the Prometheus text."""
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(edge_sql_\S+) (\S+)$", text, re.MULTILINE)}


def timeless(text: str) -> str:
    """The reply without the stats line's timings (the one part that differs between equal episodes)."""
    return re.sub(r"[\d.]+ s; (\d+ tokens generated) at [\d.]+ tok/s", r"\1", text)


def rows_of(sql: str, path: Path) -> list[list]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return [list(row) for row in conn.execute(sql).fetchall()]


def test_models_one_per_database(client):
    assert sorted(model.id for model in client.models.list()) == ["edge-sql/chinook", "edge-sql/music"]


def test_chat_completion_and_its_stream_are_the_same_episode(server, client, chinook):
    before = metrics(server)
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": QUESTION},
    ]
    whole = client.chat.completions.create(model="edge-sql/chinook", messages=messages, seed=5, temperature=0.2)
    assert whole.object == "chat.completion" and whole.model == "edge-sql/chinook"
    choice = whole.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    content = choice.message.content
    reasoning = choice.message.model_extra["reasoning_content"]
    assert reasoning.startswith("Round 1\n")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    # the same request through /v1/ask: the reply is that episode in Markdown
    status, _, answer = server.request("POST", "/v1/ask", {"question": QUESTION, "database": "chinook", "seed": 5})
    assert status == 200
    assert whole.usage.completion_tokens == answer["stats"]["generated_tokens"]
    assert re.findall(r"^Round (\d+)$", reasoning, re.MULTILINE) == [str(r["index"]) for r in answer["rounds"]]
    if answer["sql"] is not None:
        assert content.startswith("> Confidence: ")
        assert content.split("\n\n")[1] == f"```sql\n{answer['sql'].strip()}\n```"
        assert f"\n\n{len(answer['rows'])} row" in content
        first = rows_of(answer["sql"], chinook)[:1]
        if answer["columns"] and first:
            assert "| " + " | ".join(answer["columns"]) + " |" in content
    else:
        assert content.startswith("No answer: ")
    assert f"{plural(answer['stats']['rounds'], 'round')}, {plural(answer['stats']['calls'], 'call')}" in content

    stream = client.chat.completions.create(model="edge-sql/chinook", messages=messages, seed=5, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.id == chunks[0].id and c.object == "chat.completion.chunk" for c in chunks)
    streamed_reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    streamed_content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed_reasoning == reasoning
    assert timeless(streamed_content) == timeless(content)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # /metrics saw three episodes of chinook, with their tokens
    after = metrics(server)
    ended = sum(
        after[f'edge_sql_episodes_total{{database="chinook",outcome="{o}"}}']
        - before[f'edge_sql_episodes_total{{database="chinook",outcome="{o}"}}']
        for o in ("answered", "no_answer")
    )
    assert ended == 3
    generated = (
        after['edge_sql_generated_tokens_total{database="chinook"}']
        - before['edge_sql_generated_tokens_total{database="chinook"}']
    )
    assert generated == 3 * whole.usage.completion_tokens
    assert (
        after['edge_sql_episode_seconds_count{database="chinook"}']
        == before['edge_sql_episode_seconds_count{database="chinook"}'] + 3
    )
    assert after['edge_sql_queue_waiting{database="chinook"}'] == 0
    assert after['edge_sql_episodes_total{database="music",outcome="answered"}'] == 0
    server.wait_for_log(r"POST /v1/chat/completions 200 \d+\.\d ms")
    server.wait_for_log(r"GET /metrics 200 \d+\.\d ms")


def test_a_doubtful_answer_says_so_in_the_text_and_a_field(server, client):
    """A wrong answer must not look authoritative in a chat window: the fixture model's answers
    fail their checks, and the reply's text and its `edge_sql` field say how sure it is, why, and
    how it came about, as /v1/ask's JSON of the same episode has them; the stream's last chunk too."""
    messages = [{"role": "user", "content": "How many albums?"}]
    whole = client.chat.completions.create(model="edge-sql/chinook", messages=messages, seed=3)
    status, _, answer = server.request(
        "POST", "/v1/ask", {"question": "How many albums?", "database": "chinook", "seed": 3}
    )
    assert status == 200
    field = whole.model_extra["edge_sql"]
    assert (field["sql"], field["stop"]) == (answer["sql"], answer["stop"])
    doubt = field["doubt"]
    assert doubt["confidence"] == answer["checks"]["confidence"] == "doubtful"
    assert doubt["reasons"] == answer["checks"]["reasons"] and doubt["reasons"]
    assert (doubt["forced"], doubt["force_reason"], doubt["fallback"]) == (
        answer["forced"],
        answer["force_reason"],
        answer["fallback"],
    )
    assert doubt["vote"] is None
    forced = {
        "max_rounds": "forced final answer: tool rounds used up",
        "failed_queries": "forced final answer: too many failed queries",
        "context": "forced final answer: context budget reached",
    }
    assert doubt["how"] == ([forced[answer["force_reason"]]] if answer["forced"] else [])
    line = "> Confidence: doubtful: " + "; ".join(doubt["reasons"])  # forced: the reasons say it, once
    assert line in whole.choices[0].message.content.split("\n")
    chunks = list(client.chat.completions.create(model="edge-sql/chinook", messages=messages, seed=3, stream=True))
    assert chunks[-1].model_extra["edge_sql"] == field
    assert line in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split("\n")


def test_errors_have_openai_shape(server, client):
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="edge-sql/nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found" and "unknown database 'nope'" in missing.value.message
    assert missing.value.body["type"] == "invalid_request_error" and missing.value.body["param"] == "model"
    with pytest.raises(openai.UnprocessableEntityError) as empty:
        client.chat.completions.create(model="edge-sql/chinook", messages=[{"role": "system", "content": "x"}])
    assert "no user message" in empty.value.message
    with pytest.raises(openai.BadRequestError) as malformed:
        client.chat.completions.create(model="edge-sql/chinook", messages="not a list")  # type: ignore[arg-type]
    assert malformed.value.body["param"] == "messages"
    queue = server.health()["queue"]
    assert queue["waiting"] == 0 and not queue["running"]


def test_closing_the_stream_cancels_the_episode(tiny_gguf_fast, chinook, tmp_path):
    """A long episode (thousands of think tokens): the client reads the first reasoning chunk and
    closes the stream; the episode stops and the metrics count it as cancelled."""
    long_episode = ["--threads", "1", "--ctx", "8192", "--max-rounds", "2", "--think-tokens", "4000", "--no-tune"]
    server = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook}, *long_episode, "--port", "0"), tmp_path / "server.log"
    )
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0, timeout=120)
        stream = client.chat.completions.create(
            model="edge-sql/chinook", stream=True, messages=[{"role": "user", "content": "List the albums."}]
        )
        for chunk in stream:
            if chunk.choices and (chunk.choices[0].delta.model_extra or {}).get("reasoning_content"):
                assert chunk.choices[0].delta.model_extra["reasoning_content"] == "Round 1\n"
                break
        assert server.health()["queue"]["running"]
        stream.close()
        queue = server.wait_idle(timeout_s=30)["queue"]
        assert (queue["cancelled"], queue["completed"]) == (1, 0)
        server.wait_for_log(r"ask #1 \(chinook\): cancelled, 1 round")
        deadline = time.monotonic() + 10
        while metrics(server)['edge_sql_episodes_total{database="chinook",outcome="cancelled"}'] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        assert server.stop() == 0, server.log()
