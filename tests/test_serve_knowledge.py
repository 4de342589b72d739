"""What a person teaches `edge-sql serve` about a database (issue 51) through its interfaces on
real sockets: notes and verified answers over HTTP, the same through MCP (streamable HTTP at
/mcp, the SDK's client), a verified question answered at once, a follow-up carried to the model,
and the OpenAI-compatible endpoint taking the conversation's earlier turns as the follow-up.

The server keeps its knowledge in a store of its own (EDGE_SQL_HOME), so no other test's copy
of the same schema sees these notes; the served file stays byte-identical, nothing is written
beside it."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import anyio
import openai
import pytest
from mcp import Client

from serve_helpers import MCP_TOOLS, SMALL, ServerProcess, serve_command

SHOP_TABLES = (
    "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price_cents INTEGER)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, product_id INTEGER REFERENCES products(id), quantity INTEGER,"
    " ordered_at TEXT)",
)
COUNT_SQL = "SELECT COUNT(*) FROM products"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("knowledge-db") / "shop.db"
    with sqlite3.connect(path) as conn:
        for statement in SHOP_TABLES:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO products (name, price_cents) VALUES (?, ?)", [("tea", 450), ("mug", 1200), ("pot", 3900)]
        )
        conn.executemany(
            "INSERT INTO orders (product_id, quantity, ordered_at) VALUES (?, ?, ?)",
            [(1, 2, "2025-01-03"), (2, 1, "2025-02-10"), (1, 5, "2026-03-01")],
        )
    conn.close()
    return path


@pytest.fixture(scope="module")
def server(tiny_gguf_fast, shop, tmp_path_factory):
    before = _digest(shop)
    home = tmp_path_factory.mktemp("knowledge-home")
    saved = os.environ["EDGE_SQL_HOME"]
    os.environ["EDGE_SQL_HOME"] = str(home)  # the server's own store (its knowledge database)
    try:
        process = ServerProcess(
            [*serve_command(tiny_gguf_fast, {}, *SMALL, "--port", "0"), "--db", str(shop)],
            tmp_path_factory.mktemp("knowledge-log") / "server.log",
        )
    finally:
        os.environ["EDGE_SQL_HOME"] = saved
    yield process
    assert process.stop() == 0, process.log()
    assert _digest(shop) == before and sorted(p.name for p in shop.parent.iterdir()) == ["shop.db"]
    assert (home / "knowledge.sqlite").exists()


def notes_of(server: ServerProcess) -> dict:
    status, _, body = server.request("GET", "/v1/notes?database=shop")
    assert status == 200, body
    return body


def test_notes_over_http_added_listed_refused_and_removed(server):
    status, _, added = server.request("POST", "/v1/notes", {"database": "shop", "text": "prices are in cents"})
    assert status == 201, added
    note = added["note"]
    assert note["text"] == "prices are in cents" and note["question"] is None and note["stale"] is None
    status, _, tied = server.request(
        "POST", "/v1/notes", {"database": "shop", "text": "a year is strftime('%Y', ordered_at)", "question": "year"}
    )
    assert status == 201 and tied["note"]["question"] == "year"
    listed = notes_of(server)
    assert [n["id"] for n in listed["notes"]] == [note["id"], tied["note"]["id"]]
    assert listed["database"] == "shop" and listed["schema_change"] is None
    for body, status_code, message in [
        ({"database": "shop", "text": "   "}, 422, "empty note"),
        ({"database": "nope", "text": "x"}, 404, "unknown database 'nope'"),
        ({"database": "shop"}, 422, "missing field 'text'"),
        ({"database": "shop", "text": "x", "path": "/etc"}, 422, "unknown field(s) 'path'"),
    ]:
        status, _, refused = server.request("POST", "/v1/notes", body)
        assert status == status_code and message in refused["error"], refused
    status, _, removed = server.request("DELETE", f"/v1/notes/{tied['note']['id']}?database=shop")
    assert status == 200 and removed["removed"] == tied["note"]["id"] and removed["note"] == tied["note"]
    assert (
        removed["message"]
        == f"removed note {tied['note']['id']}: a year is strftime('%Y', ordered_at) (the history keeps it)"
    )
    status, _, again = server.request("DELETE", f"/v1/notes/{tied['note']['id']}?database=shop")
    assert status == 422 and f"no note {tied['note']['id']}" in again["error"]
    status, _, missing = server.request("GET", "/v1/notes")
    assert status == 422 and "missing query parameter 'database'" in missing["error"]
    assert [n["id"] for n in notes_of(server)["notes"]] == [note["id"]]


def test_a_verified_answer_is_reused_at_once_and_fresh_asks_the_model(server, shop):
    for sql, message in [("DELETE FROM products", "read-only SELECT"), ("SELECT nope FROM products", "no such column")]:
        status, _, refused = server.request(
            "POST", "/v1/verify", {"database": "shop", "question": "How many products?", "sql": sql}
        )
        assert status == 422 and message in refused["error"], refused
    status, _, stored = server.request(
        "POST", "/v1/verify", {"database": "shop", "question": "How many products?", "sql": COUNT_SQL}
    )
    assert status == 201, stored
    verified = stored["verified"]
    assert (verified["question"], verified["sql"]) == ("How many products?", COUNT_SQL) and verified["verified_at"]
    assert [a["id"] for a in notes_of(server)["verified"]] == [verified["id"]]
    completed = server.health()["queue"]["completed"]
    # the same question in other case, spacing and punctuation: answered at once, no episode
    status, _, answer = server.request("POST", "/v1/ask", {"question": "how many   PRODUCTS", "database": "shop"})
    assert status == 200, answer
    assert answer["stop"] == "verified" and answer["sql"] == COUNT_SQL and answer["rows"] == [[3]]
    assert answer["given"]["verified"] == {k: verified[k] for k in ("id", "question", "sql", "verified_at")}
    assert answer["rounds"] == [] and answer["checks"]["confidence"] in ("checked", "unchecked")
    # fresh: the model answers, given the note that always applies and the verified answer as an example
    status, _, fresh = server.request(
        "POST", "/v1/ask", {"question": "How many products?", "database": "shop", "fresh": True, "seed": 1}
    )
    assert status == 200, fresh
    assert fresh["stop"] != "verified" and fresh["rounds"] and fresh["given"]["verified"] is None
    assert [n["text"] for n in fresh["given"]["notes"]] == ["prices are in cents"]
    assert [e["id"] for e in fresh["given"]["examples"]] == [verified["id"]]
    assert server.health()["queue"]["completed"] == completed + 2


def test_a_follow_up_travels_to_the_model(server):
    follow_up = {"question": "How many orders?", "sql": "SELECT COUNT(*) FROM orders"}
    body = {"question": "and by year?", "database": "shop", "follow_up": follow_up, "seed": 2}
    status, _, answer = server.request("POST", "/v1/ask", body)
    assert status == 200, answer
    assert answer["given"]["follow_up"] == follow_up and answer["evidence"] is None
    for bad, message in [
        ({**body, "follow_up": {"question": "How many orders?"}}, "missing field 'follow_up.sql'"),
        ({**body, "follow_up": {"question": " ", "sql": ""}}, "follow_up needs the previous question and its SQL"),
        ({**body, "fresh": "yes"}, "'fresh' has the wrong type"),
    ]:
        status, _, refused = server.request("POST", "/v1/ask", bad)
        assert status == 422 and message in refused["error"], refused


def test_mcp_tools_teach_verify_and_follow(server):
    """The same through MCP (streamable HTTP at /mcp, the SDK's client): add, list and remove a
    note, verify an answer (a write refused), a verified question answered at once, a follow-up."""
    orders = {"question": "How many orders?", "sql": "SELECT COUNT(*) FROM orders"}

    async def main() -> None:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == MCP_TOOLS
            assert {"follow_up", "fresh"} <= set(tools["ask"].input_schema["properties"])
            assert tools["verify"].annotations.read_only_hint is False
            added = await client.call_tool("add_note", {"database": "shop", "text": "quantity counts items"})
            assert not added.is_error, added.content
            note_id = added.structured_content["note"]["id"]
            listed = await client.call_tool("list_notes", {"database": "shop"})
            assert note_id in [n["id"] for n in listed.structured_content["notes"]]
            empty = await client.call_tool("add_note", {"database": "shop", "text": "  "})
            assert empty.is_error and "empty note" in empty.content[0].text
            writes = await client.call_tool("verify", {"database": "shop", **orders, "sql": "DROP TABLE orders"})
            assert writes.is_error and "read-only" in writes.content[0].text
            stored = await client.call_tool("verify", {"database": "shop", **orders})
            assert not stored.is_error, stored.content
            verified = stored.structured_content["verified"]
            at_once = await client.call_tool("ask", {"question": "how many orders", "database": "shop"})
            out = at_once.structured_content
            assert out["stop"] == "verified" and out["sql"] == orders["sql"] and out["rows"] == [[3]]
            assert out["given"]["verified"]["id"] == verified["id"]
            day = verified["verified_at"][:10]
            assert f"a verified answer from {day}, its SQL run afresh" in at_once.content[0].text.splitlines()
            follow = await client.call_tool(
                "ask", {"question": "and by year?", "database": "shop", "follow_up": orders, "seed": 2}
            )
            assert not follow.is_error, follow.content
            assert follow.structured_content["given"]["follow_up"] == orders
            assert any("the previous answer" in line for line in follow.structured_content["given_text"])
            removed = await client.call_tool("remove_note", {"database": "shop", "note_id": note_id})
            assert removed.structured_content["removed"] == note_id
            assert removed.structured_content["message"] == f"removed note {note_id}: quantity counts items"
            listed = await client.call_tool("list_notes", {"database": "shop"})
            assert note_id not in [n["id"] for n in listed.structured_content["notes"]]

    anyio.run(main)


def test_the_openai_conversation_follows_its_last_answer(server):
    """A two-turn chat through the `openai` client: the first reply (a verified question, answered
    at once) says so; the second question goes with the first question and that reply's SQL."""
    first_question = "What is the total quantity ordered?"
    sql = "SELECT SUM(quantity) FROM orders"
    status, _, stored = server.request(
        "POST", "/v1/verify", {"database": "shop", "question": first_question, "sql": sql}
    )
    assert status == 201, stored
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": first_question}]
    first = client.chat.completions.create(model="edge-sql/shop", messages=messages)
    reply = first.choices[0].message.content
    day = stored["verified"]["verified_at"][:10]
    assert reply.startswith(f"> a verified answer from {day}, its SQL run afresh\n> Confidence: ")
    assert first.model_extra["edge_sql"]["stop"] == "verified" and first.model_extra["edge_sql"]["sql"] == sql
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "and per product?"}]
    second = client.chat.completions.create(model="edge-sql/shop", messages=messages, seed=4)
    given = second.model_extra["edge_sql"]["given"]
    assert given["follow_up"] == {"question": first_question, "sql": sql}
    lines = second.choices[0].message.content.splitlines()
    said = [line for line in lines if line.startswith("> given: ")]  # with the notes and examples, if any
    assert len(said) == 1 and said[0].endswith("the previous answer"), lines
