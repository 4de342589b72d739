"""Helpers for the `edge-sql serve` tests: a real server process and plain HTTP calls (stdlib only)."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-c", "from edge_sql.cli import main; main()"]
# A small episode budget: each ask takes seconds on the fixture model.
SMALL = ["--threads", "1", "--ctx", "2048", "--max-rounds", "2", "--think-tokens", "16", "--no-tune"]
LISTENING = re.compile(r"listening on http://(\S+?):(\d+) ")
# the tools `serve` offers over MCP: asking, and teaching (issue 61: history and undo)
MCP_TOOLS = {"ask", "list_databases", "add_note", "list_notes", "remove_note", "verify", "history", "undo"}
# the keys of one answer's JSON (`EpisodeResult.to_json`, what /v1/ask and an app's endpoint return)
RESULT_KEYS = {
    "question",
    "evidence",
    "sql",
    "columns",
    "rows",
    "truncated",
    "forced",
    "fallback",
    "answer",
    "stop",
    "force_reason",
    "error",
    "rounds",
    "stats",
    "prompt_version",
    "checks",
    "given",
    "chart",
}


def serve_command(model: Path, databases: dict[str, Path], *extra: str) -> list[str]:
    db_args = [arg for name, path in databases.items() for arg in ("--db", f"{name}={path}")]
    return [*CLI, "serve", "--model", str(model), *db_args, *extra]


class ServerProcess:
    """`edge-sql serve --http` in a child process; stderr goes to a file the test can read."""

    def __init__(self, command: list[str], log_path: Path, *, start_timeout_s: float = 180.0) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + start_timeout_s
        while True:
            match = LISTENING.search(self.log())
            if match:
                self.host, self.port = "127.0.0.1", int(match.group(2))
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, pattern: str, timeout_s: float = 60.0) -> re.Match[str]:
        return wait_for_log(pattern, self.log_path, timeout_s)

    def connection(self, timeout_s: float = 120.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One request; returns (status, headers, parsed JSON body or text)."""
        conn = self.connection()
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            text = response.read().decode()
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = text
            return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed
        finally:
            conn.close()

    def health(self) -> dict[str, Any]:
        status, _, body = self.request("GET", "/health")
        assert status == 200, body
        return body

    def wait_idle(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """/health once nothing runs or waits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            health = self.health()
            if not health["queue"]["running"] and health["queue"]["waiting"] == 0:
                return health
            time.sleep(0.1)
        raise AssertionError(f"the server is still busy: {self.health()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def wait_for_log(pattern: str, log_path: Path, timeout_s: float = 60.0) -> re.Match[str]:
    """The first match of `pattern` in a server's log file, once it is there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, log_path.read_text())
        if match:
            return match
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not in the server log within {timeout_s} s:\n{log_path.read_text()}")


def read_events(response: http.client.HTTPResponse, *, until: str | None = None) -> list[tuple[str, Any]]:
    """Server-sent events as (event, data) until the stream ends, or through the first `until` event."""
    events: list[tuple[str, Any]] = []
    name, data = None, []
    while True:
        line = response.readline()
        if not line:
            return events
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif line == "" and name is not None:
            events.append((name, json.loads("\n".join(data))))
            if name == until:
                return events
            name, data = None, []


def without_stats(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without its timings (the only part that differs between identical episodes)."""
    return {key: value for key, value in answer.items() if key != "stats"}


@contextmanager
def agent_queue(model: Path, parallel: int = 1) -> Iterator[Any]:
    """The queue of a real Agent on `model` (`agent.queue`, what serve's AskQueue waits in),
    `parallel` calls at a time, for tests of serve's queue with asks of their own."""
    from edge_sql.api import Agent

    with Agent(
        model, n_ctx=1024, n_threads=1, parallel=parallel, tune=False, pull_if_missing=False, prefix_cache=False
    ) as agent:
        yield agent.queue
