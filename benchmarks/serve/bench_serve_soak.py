"""A bounded soak of `edge-sql serve`: many clients at once on loopback, legitimate and hostile.

One `edge-sql serve --http` child process on a free loopback port, a copy of Chinook, and:

* `--clients` threads, each doing `--asks` asks in turn, rotating through the ways clients
  ask: JSON `/v1/ask`, SSE `/v1/ask`, an MCP `ask` (streamable HTTP, with progress), an
  OpenAI-compatible stream (the real `openai` client), a cancel (an SSE ask closed once it
  runs or waits), a mid-stream disconnect (an OpenAI stream closed after its first reasoning
  chunk), each with a `/v1/query` and an MCP `list_databases` between asks;
* one thread timing `/v1/query` under that load, back to back;
* one thread sending hostile requests (a DNS-rebinding Host, a foreign Origin, text/plain and
  form "simple" POSTs, a foreign preflight) to every route, as fast as the server answers.

It reports requests by kind and status; asks lost (accepted, no outcome) or answered twice (two
outcomes for one ask, or a server `ask #N` line twice), which must be 0; hostile requests let
in, which must be 0; the queue back to idle at the end; the server's RSS at start and end;
p50/p95 latency of `/v1/query` under load; and the database's SHA-256 before and after.
tests/test_serve_soak.py runs a short version; the committed figures come from:

    .venv/bin/python benchmarks/serve/bench_serve_soak.py MODEL.gguf --out benchmarks/results/serve-soak.md
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
import itertools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from bench_machine import write_results  # this folder is on sys.path when run as a script
from edge_sql.bench.machine import cpu_model
from serve_process import start_serve

CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
ASK_LINE = re.compile(r"^edge-sql serve: ask #(\d+) ", re.MULTILINE)
KINDS = ("json", "sse", "mcp", "openai", "cancel", "disconnect")
QUESTIONS = [
    "How many albums are there?",
    "Which artist has the most albums?",
    "List the genres.",
    "Which customer spent the most?",
    "How many tracks are longer than five minutes?",
]
QUERIES = [
    "SELECT COUNT(*) FROM Album",
    "SELECT Name FROM Genre ORDER BY Name",
    "SELECT a.Name, COUNT(*) FROM Album al JOIN Artist a USING (ArtistId) GROUP BY a.Name ORDER BY 2 DESC LIMIT 5",
    "SELECT BillingCountry, ROUND(SUM(Total), 2) FROM Invoice GROUP BY 1 ORDER BY 2 DESC",
]
HOSTILE_BODY = json.dumps({"database": "soak", "sql": "SELECT * FROM Customer"}).encode()


@dataclass
class Tally:
    """What the clients saw, under one lock."""

    statuses: collections.Counter = field(default_factory=collections.Counter)  # (kind, status) -> n
    outcomes: collections.Counter = field(default_factory=collections.Counter)  # ask tag -> outcomes seen
    accepted: set[str] = field(default_factory=set)  # ask tags the server took (not 503)
    expect_outcome: set[str] = field(default_factory=set)  # of those, the ones read to the end
    query_ms: list[float] = field(default_factory=list)
    hostile_sent: int = 0
    hostile_let_in: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def status(self, kind: str, status: int | str) -> None:
        with self.lock:
            self.statuses[(kind, str(status))] += 1


class Soak:
    def __init__(self, port: int, tally: Tally, stop: threading.Event, hostile_interval_s: float = 0.05) -> None:
        self.port = port
        self.hostile_interval_s = hostile_interval_s
        self.tally = tally
        self.stop = stop
        self.tags = itertools.count(1)

    def conn(self, timeout: float = 600) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def body(self, tag: str, seed: int) -> dict[str, Any]:
        return {"question": f"{QUESTIONS[seed % len(QUESTIONS)]} [{tag}]", "database": "soak", "seed": seed}

    # ---- the legitimate clients --------------------------------------------------------------

    def client(self, index: int, asks: int) -> None:
        for turn in range(asks):
            if self.stop.is_set():
                return
            kind = KINDS[(index + turn) % len(KINDS)]
            tag = f"c{index}-{next(self.tags)}"
            try:
                getattr(self, f"ask_{kind}")(tag, seed=index * 100 + turn)
                self.query(QUERIES[turn % len(QUERIES)], "query")
                if turn % 2 == 0:
                    self.mcp_list()
            except Exception as exc:  # reported, never hidden
                with self.tally.lock:
                    self.tally.errors.append(f"{kind} {tag}: {type(exc).__name__}: {exc}")

    def _accepted(self, tag: str, read_to_end: bool) -> None:
        with self.tally.lock:
            self.tally.accepted.add(tag)
            if read_to_end:
                self.tally.expect_outcome.add(tag)

    def _outcome(self, tag: str) -> None:
        with self.tally.lock:
            self.tally.outcomes[tag] += 1

    def ask_json(self, tag: str, seed: int) -> None:
        conn = self.conn()
        body = self.body(tag, seed)
        conn.request("POST", "/v1/ask", body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = json.loads(response.read())
        conn.close()
        self.tally.status("ask json", response.status)
        if response.status != 503:
            self._accepted(tag, True)
            if response.status == 200 and data["question"] != body["question"]:
                raise AssertionError(f"{tag} got the answer to {data['question']!r}")
            self._outcome(tag)

    def _sse(self, tag: str, seed: int, *, close_on: tuple[str, ...] = ()) -> None:
        conn = self.conn()
        body = self.body(tag, seed)
        conn.request(
            "POST",
            "/v1/ask",
            body=json.dumps(body),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        response = conn.getresponse()
        kind = "ask sse cancel" if close_on else "ask sse"
        self.tally.status(kind, response.status)
        if response.status != 200:
            response.read()
            conn.close()
            return
        self._accepted(tag, not close_on)
        name = None
        while line := response.readline():
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text[7:]
                if name in close_on:
                    break
            elif text.startswith("data: ") and name in ("answer", "error"):
                data = json.loads(text[6:])
                if name == "answer" and data["question"] != body["question"]:
                    raise AssertionError(f"{tag} got the answer to {data['question']!r}")
                self._outcome(tag)
        conn.close()  # a cancel: the server withdraws or stops the episode

    def ask_sse(self, tag: str, seed: int) -> None:
        self._sse(tag, seed)

    def ask_cancel(self, tag: str, seed: int) -> None:
        self._sse(tag, seed, close_on=("queued", "running", "round") if seed % 2 else ("round",))

    def ask_mcp(self, tag: str, seed: int) -> None:
        from mcp import Client
        from mcp.shared.exceptions import MCPError

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{self.port}/mcp") as client:
                progress: list[str] = []

                async def on_progress(value, total, message) -> None:
                    progress.append(message)

                try:
                    result = await client.call_tool("ask", self.body(tag, seed), progress_callback=on_progress)
                except MCPError as exc:
                    self.tally.status("ask mcp", f"error: {exc}"[:40])
                    return
                self.tally.status("ask mcp", "error" if result.is_error else "ok")
                if result.is_error and "queue is full" in str(result.content):
                    return
                self._accepted(tag, True)
                self._outcome(tag)

        anyio.run(main)

    def _openai_stream(self, tag: str, seed: int, *, disconnect: bool) -> None:
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="soak", max_retries=0, timeout=600)
        kind = "openai disconnect" if disconnect else "openai stream"
        try:
            stream = client.chat.completions.create(
                model="edge-sql/soak",
                stream=True,
                seed=seed,
                messages=[{"role": "user", "content": self.body(tag, seed)["question"]}],
            )
        except openai.APIStatusError as exc:
            self.tally.status(kind, exc.status_code)
            return
        self.tally.status(kind, 200)
        self._accepted(tag, not disconnect)
        finished = 0
        for chunk in stream:
            if disconnect and chunk.choices and (chunk.choices[0].delta.model_extra or {}).get("reasoning_content"):
                break
            if chunk.choices and chunk.choices[0].finish_reason:
                finished += 1
        stream.close()
        if not disconnect:
            for _ in range(finished):
                self._outcome(tag)

    def ask_openai(self, tag: str, seed: int) -> None:
        self._openai_stream(tag, seed, disconnect=False)

    def ask_disconnect(self, tag: str, seed: int) -> None:
        self._openai_stream(tag, seed, disconnect=True)

    def query(self, sql: str, kind: str) -> float:
        conn = self.conn(60)
        started = time.perf_counter()
        conn.request(
            "POST",
            "/v1/query",
            body=json.dumps({"database": "soak", "sql": sql}),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        response.read()
        ms = (time.perf_counter() - started) * 1000
        conn.close()
        self.tally.status(kind, response.status)
        return ms

    def mcp_list(self) -> None:
        from mcp import Client

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{self.port}/mcp") as client:
                result = await client.call_tool("list_databases", {})
                self.tally.status("mcp list_databases", "error" if result.is_error else "ok")

        anyio.run(main)

    def timed_queries(self) -> None:
        """/v1/query back to back while the asks run: its latency under load."""
        for sql in itertools.cycle(QUERIES):
            if self.stop.is_set():
                return
            ms = self.query(sql, "query (timed)")
            with self.tally.lock:
                self.tally.query_ms.append(ms)
            time.sleep(0.05)

    # ---- the hostile neighbour --------------------------------------------------------------------

    def hostile(self) -> None:
        port = self.port
        cases = hostile_requests(port)
        for method, path, headers, body in itertools.cycle(cases):
            if self.stop.is_set():
                return
            conn = self.conn(30)
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read()
            conn.close()
            self.tally.status("hostile", response.status)
            with self.tally.lock:
                self.tally.hostile_sent += 1
                if response.status not in (403, 415, 421) or b"AC/DC" in text or b"Album" in text:
                    self.tally.hostile_let_in.append(f"{method} {path} {headers}: {response.status}")
            time.sleep(self.hostile_interval_s)


def hostile_requests(port: int) -> list[tuple[str, str, dict[str, str], bytes | None]]:
    """What a web page in the user's browser can send, to every route."""
    rebinding = {"Host": f"attacker.example:{port}"}
    foreign = {"Origin": "http://attacker.example"}
    json_type = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    ask = json.dumps({"question": "How many albums?", "database": "soak"}).encode()
    chat = json.dumps({"model": "edge-sql/soak", "messages": [{"role": "user", "content": "Albums?"}]}).encode()
    mcp = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    cases: list[tuple[str, str, dict[str, str], bytes | None]] = []
    for path in ("/", "/static/app.js", "/v1/databases", "/health", "/metrics", "/v1/models"):
        cases += [("GET", path, rebinding, None), ("GET", path, foreign, None)]
    for path, body in (("/v1/query", HOSTILE_BODY), ("/v1/ask", ask), ("/v1/chat/completions", chat), ("/mcp", mcp)):
        cases += [
            ("POST", path, {**json_type, **rebinding}, body),
            ("POST", path, {**json_type, **foreign}, body),
            ("POST", path, {"Content-Type": "text/plain"}, body),
            ("POST", path, {"Content-Type": "text/plain", **foreign}, body),
            ("POST", path, {"Content-Type": "application/x-www-form-urlencoded"}, body),
            ("POST", path, {"Content-Type": "multipart/form-data; boundary=x"}, body),
            ("OPTIONS", path, {**foreign, "Access-Control-Request-Method": "POST"}, None),
        ]
    return cases


# ---- the run ---------------------------------------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


def health(port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/health")
    data = json.loads(conn.getresponse().read())
    conn.close()
    return data


def start_server(args: argparse.Namespace, db: Path, log_path: Path) -> tuple[subprocess.Popen, int]:
    return start_serve(
        [
            "--model",
            str(args.model),
            "--db",
            f"soak={db}",
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
            "--no-tune",
            "--parallel",
            str(args.parallel),
            "--queue-size",
            str(args.queue_size),
        ],
        log_path,
    )


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the soak; returns the figures (and writes nothing)."""
    folder = Path(tempfile.mkdtemp(prefix="edge-sql-soak-"))
    db = folder / "soak.sqlite"
    shutil.copyfile(CHINOOK, db)
    before = digest(db)
    log_path = folder / "server.log"
    process, port = start_server(args, db, log_path)
    tally, stop = Tally(), threading.Event()
    try:
        health(port)
        rss_start = rss(process.pid)
        runner = Soak(port, tally, stop, args.hostile_interval)
        started = time.monotonic()
        clients = [
            threading.Thread(target=runner.client, args=(i, args.asks), name=f"client-{i}") for i in range(args.clients)
        ]
        helpers = [
            threading.Thread(target=runner.timed_queries, name="queries"),
            threading.Thread(target=runner.hostile, name="hostile"),
        ]
        for thread in [*clients, *helpers]:
            thread.start()
        deadline = started + args.max_seconds
        for thread in clients:
            thread.join(max(0.0, deadline - time.monotonic()))
        stop.set()  # past the bound: the clients start no more asks
        for thread in [*clients, *helpers]:
            thread.join(600)
        wall = time.monotonic() - started
        idle_deadline = time.monotonic() + 120
        while True:
            end = health(port)
            if (not end["queue"]["running"] and end["queue"]["waiting"] == 0) or time.monotonic() > idle_deadline:
                break
            time.sleep(0.2)
        rss_end = rss(process.pid)
    finally:
        stop.set()
        process.terminate()
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    log = log_path.read_text()
    numbers = collections.Counter(int(n) for n in ASK_LINE.findall(log))
    submitted = max(numbers, default=0)
    queue = end["queue"]
    ended_server = queue["completed"] + queue["cancelled"] + queue["failed"] + queue["timed_out"]
    lost = sorted(tag for tag in tally.expect_outcome if tally.outcomes[tag] == 0)
    twice = sorted(tag for tag, n in tally.outcomes.items() if n > 1)
    ms = sorted(tally.query_ms)
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "wall_s": round(wall, 1),
        "clients": args.clients,
        "asks_per_client": args.asks,
        "statuses": {f"{kind} {status}": n for (kind, status), n in sorted(tally.statuses.items())},
        "asks_accepted": len(tally.accepted),
        "asks_read_to_the_end": len(tally.expect_outcome),
        "outcomes_received": sum(tally.outcomes[t] for t in tally.expect_outcome),
        "lost": lost,
        "answered_twice": twice,
        "server_ask_numbers": submitted,
        "server_ask_lines_twice": sorted(n for n, c in numbers.items() if c > 1),
        "server_ask_numbers_missing": sorted(set(range(1, submitted + 1)) - set(numbers)),
        "server_jobs_ended": ended_server,
        "queue_at_end": {k: queue[k] for k in ("running", "running_jobs", "waiting")},
        "queue_counts": {k: queue[k] for k in ("completed", "cancelled", "failed", "timed_out", "rejected")},
        "rss_start_mb": round(rss_start / 2**20, 1),
        "rss_end_mb": round(rss_end / 2**20, 1),
        "query_n": len(ms),
        "query_p50_ms": round(statistics.median(ms), 1) if ms else None,
        "query_p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1) if ms else None,
        "hostile_sent": tally.hostile_sent,
        "hostile_let_in": tally.hostile_let_in,
        "hostile_kinds": len(hostile_requests(port)),
        "db_sha256_before": before,
        "db_sha256_after": digest_or(db, before),
        "client_errors": tally.errors,
        "server_exit": code,
    }


def digest_or(db: Path, fallback: str) -> str:
    return digest(db) if db.exists() else fallback


def check(figures: dict[str, Any]) -> list[str]:
    """What must hold; empty when it all did."""
    problems = []
    for key in (
        "lost",
        "answered_twice",
        "server_ask_lines_twice",
        "server_ask_numbers_missing",
        "hostile_let_in",
        "client_errors",
    ):
        if figures[key]:
            problems.append(f"{key}: {figures[key][:10]}")
    if figures["queue_at_end"] != {"running": False, "running_jobs": 0, "waiting": 0}:
        problems.append(f"the queue is not idle at the end: {figures['queue_at_end']}")
    if figures["server_jobs_ended"] != figures["server_ask_numbers"]:
        problems.append(f"{figures['server_ask_numbers']} asks queued, {figures['server_jobs_ended']} ended")
    if figures["db_sha256_before"] != figures["db_sha256_after"]:
        problems.append("the database changed")
    if figures["server_exit"] != 0:
        problems.append(f"the server exited with {figures['server_exit']}")
    return problems


def report(args: argparse.Namespace, figures: dict[str, Any], problems: list[str]) -> str:
    f = figures
    import psutil

    memory_gib = psutil.virtual_memory().total / 2**30
    setup = (
        f"CPU: {cpu_model()} ({platform.machine()}, {os.cpu_count()} CPUs, {memory_gib:.0f} GiB), shared "
        "with other work while it ran; model "
        f"`{Path(args.model).name}`, `--threads {args.threads} --ctx {args.ctx} --max-rounds {args.max_rounds} "
        f"--think-tokens {args.think_tokens} --parallel {args.parallel} --queue-size {args.queue_size}`."
    )
    load = (
        f"{f['clients']} clients x {f['asks_per_client']} asks (rotating JSON, SSE, MCP, OpenAI stream, "
        "cancel, mid-stream disconnect; a /v1/query after each and an MCP list_databases every other), one "
        f"client timing /v1/query back to back, one sending {f['hostile_kinds']} kinds of hostile "
        f"request in a loop; {f['wall_s']} s."
    )
    rows = [
        (
            "asks accepted / read to the end / outcomes received",
            f"{f['asks_accepted']} / {f['asks_read_to_the_end']} / {f['outcomes_received']}",
        ),
        ("asks lost / answered twice", f"{len(f['lost'])} / {len(f['answered_twice'])}"),
        (
            "server: asks queued / ended / `ask #N` lines twice or missing",
            f"{f['server_ask_numbers']} / {f['server_jobs_ended']} / {len(f['server_ask_lines_twice'])} or "
            f"{len(f['server_ask_numbers_missing'])}",
        ),
        ("server counts at the end", str(f["queue_counts"])),
        ("queue at the end", str(f["queue_at_end"])),
        ("hostile requests sent / let in", f"{f['hostile_sent']} / {len(f['hostile_let_in'])}"),
        ("/v1/query under load: n, p50, p95", f"{f['query_n']}, {f['query_p50_ms']} ms, {f['query_p95_ms']} ms"),
        ("server RSS at start / end", f"{f['rss_start_mb']} MiB / {f['rss_end_mb']} MiB"),
        ("database SHA-256 before", f"`{f['db_sha256_before']}`"),
        ("database SHA-256 after", f"`{f['db_sha256_after']}`"),
        ("client errors", str(len(f["client_errors"]))),
    ]
    lines = [
        "# `edge-sql serve` soak",
        "",
        f"`{' '.join(sys.argv)}`",
        "",
        setup,
        "",
        load,
        "",
        "| figure | value |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows],
        "",
        "Requests by kind and status:",
        "",
        "| kind status | n |",
        "|---|---|",
        *[f"| {key} | {n} |" for key, n in f["statuses"].items()],
        "",
        "Checks: " + ("all held." if not problems else "; ".join(problems)),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a GGUF (the tests use the random-weight fixture)")
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--asks", type=int, default=6, help="asks per client")
    parser.add_argument("--max-seconds", type=float, default=600, help="no new asks after this")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--queue-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--think-tokens", type=int, default=16)
    parser.add_argument("--hostile-interval", type=float, default=0.05, help="seconds between hostile requests")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here (and .json beside)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figures = soak(args)
    problems = check(figures)
    text = report(args, figures, problems)
    print(text)
    if args.out is not None:
        write_results(args.out, text)
        write_results(args.out.with_suffix(".json"), json.dumps(figures, indent=1) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
