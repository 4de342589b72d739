"""A short run of benchmarks/serve/bench_serve_soak.py: six clients asking each way at once (JSON, SSE,
MCP, an OpenAI stream, a cancel, a mid-stream disconnect) beside /v1/query and hostile requests,
against a real server with the fixture model. Nothing lost or answered twice, nothing hostile
let in, the queue idle at the end, the database unchanged."""

from __future__ import annotations

from benchmarks.serve.bench_serve_soak import check, parse_args, soak
from benchmarks.serve.soak_clients import KINDS


def test_a_short_soak_holds(tiny_gguf_fast):
    figures = soak(
        parse_args(
            [
                str(tiny_gguf_fast),
                "--clients",
                str(len(KINDS)),
                "--asks",
                "1",
                "--max-seconds",
                "600",
                "--hostile-interval",
                "0.02",
            ]
        )
    )
    assert check(figures) == []
    statuses = figures["statuses"]
    for kind in (
        "ask json 200",
        "ask sse 200",
        "ask sse cancel 200",
        "ask mcp ok",
        "openai stream 200",
        "openai disconnect 200",
    ):
        assert statuses.get(kind) == 1, statuses
    # every ask was taken (6 fit in 2 running + 8 waiting), four were read to their one outcome
    assert (figures["asks_accepted"], figures["asks_read_to_the_end"], figures["outcomes_received"]) == (6, 4, 4)
    assert figures["server_ask_numbers"] == figures["server_jobs_ended"] == 6
    assert figures["queue_counts"]["completed"] >= 4
    assert figures["hostile_sent"] >= figures["hostile_kinds"] and figures["hostile_let_in"] == []
    assert set(statuses) >= {"hostile 403", "hostile 415", "hostile 421"}
    assert figures["query_n"] > 0 and figures["query_p95_ms"] >= figures["query_p50_ms"] > 0
    assert figures["db_sha256_before"] == figures["db_sha256_after"]
