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

    .venv/bin/python -m benchmarks.serve.bench_serve_soak MODEL.gguf --out benchmarks/results/serve-soak.md
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import http.client
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
from pathlib import Path
from typing import Any

from benchmarks.common.bench_machine import write_results
from benchmarks.serve.serve_process import start_serve
from benchmarks.serve.soak_clients import Soak, Tally, hostile_requests
from edge_sql.bench.machine import cpu_model

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
ASK_LINE = re.compile(r"^edge-sql serve: ask #(\d+) ", re.MULTILINE)
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
