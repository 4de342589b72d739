"""Teaching rights and trustworthy teaching on a served database (issue 61), on real sockets:
with `--token` and `--teach-token`, asking and listing need the token, teaching the teach token
(403, one line, nothing stored) over HTTP and MCP; every teaching reply names what it stored;
replacing a verified answer is refused (409, naming the stored SQL) unless `"replace": true`,
and the history shows and undoes it. Every refusal is checked against the whole store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from serve_helpers import SMALL, ServerProcess, serve_command

TOKEN, TEACH = "ask-s3cret", "teach-s3cret"
ASKER = {"Authorization": f"Bearer {TOKEN}"}
TEACHER = {"Authorization": f"Bearer {TEACH}"}
COUNT = "SELECT COUNT(*) FROM products"
REFUSED = (
    "teaching (adding or removing notes, verifying, replacing, undoing) needs the teach token: send "
    "Authorization: Bearer TEACH_TOKEN (the --teach-token or EDGE_SQL_TEACH_TOKEN the server was started with); "
    "asking and listing need only the token"
)


@pytest.fixture(scope="module")
def served(tiny_gguf_fast, tmp_path_factory):
    folder = tmp_path_factory.mktemp("teach-db")
    shop = folder / "shop.db"
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price_cents INTEGER)")
        conn.executemany("INSERT INTO products (name, price_cents) VALUES (?, ?)", [("tea", 450), ("mug", 1200)])
    conn.close()
    home = tmp_path_factory.mktemp("teach-home")
    saved = os.environ["EDGE_SQL_HOME"]
    os.environ["EDGE_SQL_HOME"] = str(home)
    os.environ["EDGE_SQL_TEACH_TOKEN"] = TEACH  # the environment variable, as an operator sets it
    try:
        process = ServerProcess(
            [*serve_command(tiny_gguf_fast, {}, *SMALL, "--port", "0", "--token", TOKEN), "--db", str(shop)],
            tmp_path_factory.mktemp("teach-log") / "server.log",
        )
    finally:
        os.environ["EDGE_SQL_HOME"] = saved
        del os.environ["EDGE_SQL_TEACH_TOKEN"]
    yield process, home / "knowledge.sqlite"
    assert process.stop() == 0, process.log()


def _dump(store: Path) -> list[str]:
    with sqlite3.connect(store) as conn:
        return list(conn.iterdump())


def test_teaching_needs_the_teach_token_and_asking_only_the_token(served):
    server, store = served
    status, _, health = server.request("GET", "/health", headers=ASKER)
    assert status == 200 and (health["teaching"], health["teacher"]) == ("teach token", False)
    assert server.request("GET", "/health", headers=TEACHER)[2]["teacher"] is True
    assert server.request("GET", "/v1/notes?database=shop")[0] == 401  # no token at all
    status, _, added = server.request(
        "POST", "/v1/notes", {"database": "shop", "text": "prices are in cents"}, headers=TEACHER
    )
    assert status == 201 and added["message"] == f"added note {added['note']['id']}: prices are in cents"
    before = _dump(store)
    note_id = added["note"]["id"]
    verify = {"database": "shop", "question": "How many products?", "sql": COUNT}
    for method, path, body in [
        ("POST", "/v1/notes", {"database": "shop", "text": "a note from an asker"}),
        ("DELETE", f"/v1/notes/{note_id}?database=shop", None),
        ("POST", "/v1/verify", verify),
        ("POST", "/v1/verify", {**verify, "replace": True}),
        ("POST", "/v1/notes/undo", {"database": "shop", "change": 1}),
    ]:
        status, _, refused = server.request(method, path, body, headers=ASKER)
        assert (status, refused) == (403, {"error": REFUSED}), (path, refused)
    assert _dump(store) == before  # no refusal stored anything
    status, _, listed = server.request("GET", "/v1/notes?database=shop", headers=ASKER)  # listing: the token
    assert status == 200 and [n["id"] for n in listed["notes"]] == [note_id]
    status, _, answer = server.request("POST", "/v1/query", {"database": "shop", "sql": COUNT}, headers=ASKER)
    assert status == 200 and answer["rows"] == [[2]]


def test_replacing_a_verified_answer_is_refused_unless_asked_and_can_be_undone(served):
    server, store = served
    question = "How many products are there?"
    status, _, stored = server.request(
        "POST", "/v1/verify", {"database": "shop", "question": question, "sql": COUNT}, headers=TEACHER
    )
    assert status == 201, stored
    first = stored["verified"]
    assert (stored["action"], stored["replaced"]) == ("added", None)
    assert stored["message"] == f'kept as verified (v{first["id"]}): "{question}" -> {COUNT}'
    status, _, same = server.request(
        "POST", "/v1/verify", {"database": "shop", "question": question, "sql": COUNT}, headers=TEACHER
    )
    assert status == 200 and same["action"] == "unchanged" and same["verified"]["id"] == first["id"]
    before = _dump(store)
    other = "SELECT COUNT(id) FROM products"
    body = {"database": "shop", "question": question, "sql": other}
    status, _, refused = server.request("POST", "/v1/verify", body, headers=TEACHER)
    assert status == 409 and refused["error"] == (
        f'refused: "{question}" already has a verified answer (v{first["id"]}): {COUNT}; send "replace": true '
        "to replace it, once the person confirms (the old one is kept in the history)"
    )
    assert _dump(store) == before
    status, _, replaced = server.request("POST", "/v1/verify", {**body, "replace": True}, headers=TEACHER)
    assert status == 201 and replaced["action"] == "replaced" and replaced["replaced"]["id"] == first["id"]
    assert replaced["verified"]["sql"] == other and replaced["verified"]["question"] == question
    status, _, history = server.request("GET", "/v1/notes/history?database=shop", headers=ASKER)
    assert status == 200
    last = history["changes"][-1]
    assert (last["surface"], last["action"], last["old"], last["new"]) == ("HTTP", "replaced", COUNT, other)
    status, _, undone = server.request(
        "POST", "/v1/notes/undo", {"database": "shop", "change": last["id"]}, headers=TEACHER
    )
    assert status == 200 and undone["message"] == (
        f"undid change #{last['id']} (replaced verified answer): v{first['id']} is back in place of "
        f"v{replaced['verified']['id']}"
    )
    listed = server.request("GET", "/v1/notes?database=shop", headers=ASKER)[2]["verified"]
    assert [(a["id"], a["sql"]) for a in listed] == [(first["id"], COUNT)]


def test_mcp_teaching_needs_the_teach_token(served):
    server, store = served
    url = f"http://127.0.0.1:{server.port}/mcp"

    async def main() -> None:
        before = _dump(store)
        async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=ASKER))) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"verify", "history", "undo", "add_note", "remove_note"} <= tools
            for name, arguments in [
                ("add_note", {"database": "shop", "text": "from an asker"}),
                ("verify", {"database": "shop", "question": "How many?", "sql": COUNT}),
                ("remove_note", {"database": "shop", "note_id": 1}),
                ("undo", {"database": "shop", "change": 1}),
            ]:
                refused = await client.call_tool(name, arguments)
                assert refused.is_error and refused.content[0].text == f"Error executing tool {name}: {REFUSED}", name
            listed = await client.call_tool("history", {"database": "shop"})
            assert not listed.is_error
        assert _dump(store) == before
        async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=TEACHER))) as client:
            stored = await client.call_tool(
                "verify",
                {
                    "database": "shop",
                    "question": "Cheapest product?",
                    "sql": "SELECT name FROM products ORDER BY price_cents LIMIT 1",
                },
            )
            assert not stored.is_error, stored.content
            out = stored.structured_content
            assert out["action"] == "added" and out["verified"]["question"] == "Cheapest product?"
            assert out["message"].startswith(
                f'kept as verified (v{out["verified"]["id"]}): "Cheapest product?" -> SELECT'
            )
            again = await client.call_tool(
                "verify", {"database": "shop", "question": "cheapest product", "sql": "SELECT 'tea'"}
            )
            assert again.is_error and 'call verify again with "replace": true' in again.content[0].text

    anyio.run(main)
