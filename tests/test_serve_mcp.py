"""`edge-sql serve --mcp` over stdio, driven by the MCP SDK's own client (as a desktop client would)."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from edge_sql.charts import chart_for
from serve_helpers import MCP_TOOLS, serve_command, wait_for_log

SMALL = ["--mcp", "--threads", "1", "--ctx", "2048", "--max-rounds", "2", "--think-tokens", "16", "--no-tune"]
# the fixture model (random weights) thinks up to the bound: round 1 lasts thousands of tokens,
# long enough to cancel in the middle of it
LONG = ["--mcp", "--threads", "1", "--ctx", "8192", "--max-rounds", "2", "--think-tokens", "4000", "--no-tune"]
ORIGINAL = Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"


def _params(tiny_gguf_fast: Path, db: Path, args: list[str]) -> StdioServerParameters:
    command = serve_command(tiny_gguf_fast, {"chinook": db}, *args)
    # the SDK passes a server only a few variables of its own (HOME, PATH...): hand it this
    # process's environment, so it keeps the test run's store (EDGE_SQL_HOME, see conftest)
    return StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))


def test_mcp_client_over_stdio(tiny_gguf_fast, chinook_db, tmp_path):
    async def main() -> None:
        with (tmp_path / "server.log").open("w") as errlog:
            async with Client(stdio_client(_params(tiny_gguf_fast, chinook_db, SMALL), errlog=errlog)) as client:
                await _tools_are_listed(client)
                await _list_databases(client, chinook_db)
                await _ask_reports_progress(client, chinook_db)
                await _a_doubtful_answer_says_so(client)
                await _unknown_database_is_a_tool_error(client)
                await _bad_arguments_are_tool_errors(client)

    anyio.run(main)
    assert chinook_db.read_bytes() == ORIGINAL.read_bytes()


def test_mcp_cancellation_stops_the_episode(tiny_gguf_fast, chinook_db, tmp_path):
    log_path = tmp_path / "server.log"

    async def main() -> None:
        with log_path.open("w") as errlog:
            async with Client(stdio_client(_params(tiny_gguf_fast, chinook_db, LONG), errlog=errlog)) as client:
                await _cancel_stops_the_episode(client, log_path)

    anyio.run(main)
    assert chinook_db.read_bytes() == ORIGINAL.read_bytes()


async def _tools_are_listed(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == MCP_TOOLS
    schema = tools["ask"].input_schema
    assert set(schema["properties"]) == {
        "question",
        "database",
        "evidence",
        "seed",
        "vote",
        "abstain_below",
        "follow_up",
        "fresh",
    }
    assert set(schema["required"]) == {"question", "database"}
    output = set(tools["ask"].output_schema["properties"])
    assert {"sql", "rows", "row_count", "forced", "fallback", "rounds", "checks", "doubt"} <= output
    assert tools["ask"].annotations.read_only_hint is True


async def _list_databases(client: Client, db: Path) -> None:
    result = await client.call_tool("list_databases", {})
    assert not result.is_error
    with sqlite3.connect(db) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
    assert result.structured_content == {"databases": [{"name": "chinook", "tables": tables}]}


async def _ask_reports_progress(client: Client, db: Path) -> None:
    messages: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append((value, message))

    result = await client.call_tool(
        "ask", {"question": "How many albums are there?", "database": "chinook"}, progress_callback=progress
    )
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["stop"] in ("submitted", "final_answer") and out["rounds"]
    assert 0 < out["wall_s"] < 300
    texts = [m for _, m in messages]
    assert texts[0] == "queued: position 1" and texts[1] == "running"
    assert [t for t in texts if re.fullmatch(r"round \d+", t)] == [f"round {r['round']}" for r in out["rounds"]]
    calls = [
        f"round {r['round']}: {c['tool']} {'ok' if c['ok'] else 'error'}" for r in out["rounds"] for c in r["calls"]
    ]
    writing = [t for t in texts if re.fullmatch(r"round \d+: \d+ tokens? generated, [\d.]+ tok/s", t)]
    counts = [int(re.search(r": (\d+) token", t)[1]) for t in writing]
    assert counts and counts[0] > 0 and counts == sorted(counts)  # the first as soon as the model writes
    assert [t for t in texts if ":" in t and t.startswith("round") and t not in writing] == calls
    assert [v for v, _ in messages] == list(range(1, len(messages) + 1))  # progress only grows
    assert out["row_count"] == len(out["rows"]) or out["row_count"] > len(out["rows"]) == 20
    if out["sql"] is not None:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = [list(r) for r in conn.execute(out["sql"]).fetchall()]
        assert out["rows"] == rows[:20] and out["row_count"] == min(len(rows), 200)
        assert out["chart"] == chart_for(out["columns"], rows[:200], truncated=out["more_rows"])  # all its rows
        assert result.content[0].text.startswith(f"SQL: {out['sql']}")
    else:
        assert out["error"] and result.content[0].text.startswith(f"No answer ({out['stop']})")
        assert out["chart"] is None
    rounds = len(out["rounds"])
    assert f"{rounds} round{'' if rounds == 1 else 's'}, " in result.content[0].text


async def _a_doubtful_answer_says_so(client: Client) -> None:
    """A vote of two episodes of the fixture model, whose answers fail their checks: the result's
    `doubt` and its text say how sure it is, why, and how the vote went."""
    arguments = {"question": "How many albums?", "database": "chinook", "seed": 3, "vote": 2}
    result = await client.call_tool("ask", arguments)
    assert not result.is_error, result.content
    out = result.structured_content
    doubt = out["doubt"]
    assert doubt["confidence"] == out["checks"]["confidence"] == "doubtful"
    assert doubt["reasons"] == out["checks"]["reasons"]
    vote = doubt["vote"]
    assert vote["k"] == 2 and 0 <= vote["agreed"] <= 2 and vote["agreement"] == vote["agreed"] / 2
    assert f"{vote['agreed']} of 2 episodes agree on this result" in doubt["reasons"]  # half or less: doubtful
    agreement = f"vote: {vote['agreed']} of 2 episodes agree on this result"
    assert doubt["how"][-1] == agreement and (doubt["forced"], doubt["fallback"]) == (out["forced"], out["fallback"])
    last = result.content[0].text.splitlines()[-1]
    assert last == "Confidence: doubtful: " + "; ".join(doubt["reasons"])  # forced or not: said once, by the reasons


async def _unknown_database_is_a_tool_error(client: Client) -> None:
    result = await client.call_tool("ask", {"question": "How many albums?", "database": "/etc/passwd"})
    assert result.is_error
    assert result.content[0].text.endswith("unknown database '/etc/passwd'; this server has: chinook")


async def _bad_arguments_are_tool_errors(client: Client) -> None:
    """The HTTP body's rules and words: no unknown arguments, no coercion, the seed's range."""
    for arguments, message in [
        ({"question": "How many albums?", "database": "chinook", "path": "/etc/passwd"}, "unknown field(s) 'path'"),
        ({"question": "How many albums?", "database": "chinook", "seed": "5"}, "'seed' has the wrong type (str)"),
        ({"question": "How many albums?", "database": "chinook", "seed": -1}, "'seed' is out of range"),
        ({"database": "chinook"}, "missing field 'question'"),
        ({"question": "   ", "database": "chinook"}, "question is empty"),
    ]:
        result = await client.call_tool("ask", arguments)
        assert result.is_error and message in result.content[0].text, (arguments, result.content)
        assert "\n" not in result.content[0].text


async def _cancel_stops_the_episode(client: Client, log_path: Path) -> None:
    started = anyio.Event()
    scopes: list[anyio.CancelScope] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        if message == "round 1":
            started.set()

    async def call() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await client.call_tool(
                "ask", {"question": "List every track.", "database": "chinook"}, progress_callback=progress
            )
            raise AssertionError("the call was meant to be cancelled")

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(120):
            await started.wait()
        scopes[0].cancel()
    # the server stops the episode at the next token, in round 1 (4,000 tokens of thinking)
    wait_for_log(r"ask #1 \(chinook\): cancelled, 1 round, 0 calls", log_path, timeout_s=30)
    # and serves the next call
    result = await client.call_tool("list_databases", {})
    assert not result.is_error
