"""The soak's clients (benchmarks/serve/bench_serve_soak.py runs them against one `edge-sql serve`):
threads asking each way a client asks (JSON, SSE, MCP, the OpenAI stream, a cancel, a mid-stream
disconnect) with `/v1/query` and `list_databases` between asks, one timing `/v1/query` back to
back, and one sending what a web page in the user's browser can send to every route; what they
see goes into one `Tally`."""

from __future__ import annotations

import collections
import http.client
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

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
