"""Serving overhead: `edge-sql serve` (HTTP JSON, HTTP SSE, MCP at /mcp) against `Agent.ask`.

The same questions with the same seeds run four ways, interleaved question by question:
`Agent.ask` in this process, and through one `edge-sql serve --http` child process as a JSON
request, an SSE stream and an MCP `ask` call (streamable HTTP, with progress). Same model,
budget, threads and seed give the same episode, so the model's work is equal; what differs
is the path around it.

* added latency per request: (client wall time - the episode's own `stats.wall_s`) on each
  server path, minus the same difference for `Agent.ask` (opening the database and such).
  Subtracting each request's own episode time removes the model's run-to-run noise.
* added latency per streamed event: each SSE event carries `elapsed_s`, when the server
  produced it (the episode's on_event, in the worker thread) counted from the request's
  arrival; its arrival at the client counted from sending the request, minus `elapsed_s`, is
  the event's delivery time (plus the request's own transit, the same for every event of a
  request: the `queued` event, produced at once, shows it).

    .venv/bin/python -m benchmarks.serve.bench_serve MODEL.gguf --out benchmarks/results/serve.md
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from benchmarks.common.bench_machine import machine_line
from benchmarks.serve.serve_process import start_serve
from edge_sql.agent.budget import Budget, parse_budget_items
from edge_sql.api import Agent

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUESTIONS = [
    "How many albums are there?",
    "Which artist has the most albums?",
    "List the genres.",
    "Which customer spent the most?",
    "How many tracks are longer than five minutes?",
    "Which country has the most customers?",
    "What is the total revenue per year?",
    "Which employee supports the most customers?",
]


def direct(agent: Agent, db: Path, question: str, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    result = agent.ask(question, db, seed=seed)
    wall = time.perf_counter() - started
    return {"wall": wall, "episode": result.stats.to_json()["wall_s"], "json": result.to_json(transcript=False)}


def http_json(port: int, question: str, seed: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("POST", "/v1/ask", body=json.dumps({"question": question, "database": "chinook", "seed": seed}))
    body = json.loads(conn.getresponse().read())
    wall = time.perf_counter() - started
    conn.close()
    return {"wall": wall, "episode": body["stats"]["wall_s"], "json": body}


def http_sse(port: int, question: str, seed: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request(
        "POST",
        "/v1/ask",
        body=json.dumps({"question": question, "database": "chinook", "seed": seed}),
        headers={"Accept": "text/event-stream"},
    )
    response = conn.getresponse()
    delays, answer, name, arrived = [], None, None, 0.0
    while line := response.readline():
        text = line.decode().rstrip("\n")
        if text.startswith("event: "):
            name, arrived = text[7:], time.perf_counter() - started
        elif text.startswith("data: "):
            data = json.loads(text[6:])
            if name == "answer":
                answer = data
            else:  # arrival at the client minus the moment the server produced the event
                delays.append((name, arrived - data["elapsed_s"]))
    wall = time.perf_counter() - started
    conn.close()
    return {"wall": wall, "episode": answer["stats"]["wall_s"], "delays": delays, "json": answer}


def mcp_call(port: int, question: str, seed: int) -> dict[str, Any]:
    """An MCP ask over streamable HTTP, with progress."""
    from mcp import Client

    async def main() -> dict[str, Any]:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            messages = []

            async def progress(value, total, message) -> None:
                messages.append(message)

            started = time.perf_counter()
            result = await client.call_tool(
                "ask", {"question": question, "database": "chinook", "seed": seed}, progress_callback=progress
            )
            out = result.structured_content
            return {
                "wall": time.perf_counter() - started,
                "episode": out["wall_s"],
                "progress": len(messages),
                "sql": out["sql"],
            }

    return anyio.run(main)


async def list_databases(port: int) -> None:
    from mcp import Client

    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        await client.call_tool("list_databases", {})


def start_server(args, db: Path, log_path: Path) -> tuple[subprocess.Popen, int]:
    return start_serve(
        [
            "--model",
            str(args.model),
            "--db",
            f"chinook={db}",
            "--port",
            "0",
            "--threads",
            str(args.threads),
            "--ctx",
            str(args.ctx),
            "--max-rounds",
            str(args.max_rounds),
            "--think-tokens",
            str(args.think_tokens),
            "--max-rows",
            "1000",
            *[arg for item in args.budget_items for arg in ("--budget", item)],
        ],
        log_path,
    )


def _core(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key != "stats"}


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values) * 1000:.1f} (mean {statistics.mean(values) * 1000:.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--think-tokens", type=int, default=16)
    parser.add_argument(
        "--budget",
        dest="budget_items",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="more Budget fields, for both paths (repeatable)",
    )
    parser.add_argument("--label", default=None, help="name of the model in the report")
    parser.add_argument("--out", type=Path, default=None, help="append the markdown report to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    db = work / "chinook.sqlite"
    shutil.copyfile(CHINOOK, db)
    budget = replace(
        Budget(
            max_rounds=args.max_rounds,
            max_think_tokens=args.think_tokens,
            max_final_think_tokens=args.think_tokens,
            max_result_rows=1000,
        ),
        **parse_budget_items(args.budget_items),
    )
    server, port = start_server(args, db, work / "server.log")
    rows: dict[str, list[dict[str, Any]]] = {"direct": [], "json": [], "sse": [], "mcp": []}
    try:
        with Agent(args.model, n_threads=args.threads, n_ctx=args.ctx, budget=budget, pull_if_missing=False) as agent:
            # first-use costs, not counted: the grammar engine's vocabulary (the server builds
            # its own at start) and the MCP client's imports and first session
            agent.session.lltokenizer()
            anyio.run(list_databases, port)
            for i, question in enumerate(QUESTIONS[: args.questions]):
                seed = 100 + i
                rows["direct"].append(direct(agent, db, question, seed))
                rows["json"].append(http_json(port, question, seed))
                rows["sse"].append(http_sse(port, question, seed))
                rows["mcp"].append(mcp_call(port, question, seed))
                print(
                    f"{question}: direct {rows['direct'][-1]['wall']:.2f} s, json {rows['json'][-1]['wall']:.2f} s, "
                    f"sse {rows['sse'][-1]['wall']:.2f} s, mcp {rows['mcp'][-1]['wall']:.2f} s",
                    file=sys.stderr,
                )
    finally:
        server.terminate()
        server.wait(timeout=60)
    same = sum(
        1
        for d, j, s, m in zip(rows["direct"], rows["json"], rows["sse"], rows["mcp"])
        if _core(d["json"]) == _core(j["json"]) == _core(s["json"]) and m["sql"] == d["json"]["sql"]
    )
    base = [r["wall"] - r["episode"] for r in rows["direct"]]
    added = {path: [r["wall"] - r["episode"] - b for r, b in zip(rows[path], base)] for path in ("json", "sse")}
    first = [d for r in rows["sse"] for name, d in r["delays"] if name == "queued"]
    episode_events = [d for r in rows["sse"] for name, d in r["delays"] if name in ("round", "call", "forced")]
    added["mcp"] = [r["wall"] - r["episode"] - b for r, b in zip(rows["mcp"], base)]
    beyond = []  # each event's delivery minus its request's transit (the queued event's)
    for r in rows["sse"]:
        transit = next(d for name, d in r["delays"] if name == "queued")
        beyond += [d - transit for name, d in r["delays"] if name in ("round", "call", "forced")]
    episode = [r["episode"] for r in rows["direct"]]
    report = "\n".join(
        [
            f"## {args.label or args.model.name}",
            "",
            f"Machine: {machine_line()}; shared machine (other engineers' jobs were running: compare the",
            "differences measured in one run, not absolute times). Server and client on the same host, loopback.",
            f"Budget: --max-rounds {args.max_rounds} --think-tokens {args.think_tokens}"
            f"{''.join(' --budget ' + item for item in args.budget_items)}, --threads {args.threads}, "
            f"--ctx {args.ctx}; {len(episode)} questions on Chinook, seeds 100+.",
            f"Same episode on all paths (identical answer JSON apart from timings): {same} of {len(episode)} questions.",
            "",
            "| figure | median ms (mean) |",
            "|---|--:|",
            f"| episode time (`stats.wall_s`, direct) | {ms(episode)} |",
            f"| `Agent.ask` around the episode (wall - wall_s) | {ms(base)} |",
            f"| added per request, HTTP JSON | {ms(added['json'])} |",
            f"| added per request, HTTP SSE | {ms(added['sse'])} |",
            f"| per streamed event: delivery of round/call/forced events ({len(episode_events)} events) | "
            f"{ms(episode_events)} |",
            f"| the same for the `queued` event (the request's own transit) | {ms(first)} |",
            f"| per streamed event beyond its request's transit (event delivery - queued delivery) | {ms(beyond)} |",
            f"| added per request, MCP `ask` over streamable HTTP with progress (new session per call) | "
            f"{ms(added['mcp'])} |",
            "",
        ]
    )
    print(report)
    if args.out:
        with args.out.open("a") as out:
            out.write(report + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
