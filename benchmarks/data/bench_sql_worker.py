"""What the SQL worker process costs per tool call.

The same statements run two ways, interleaved call by call: in this process, through the very
code the worker runs (`sql_worker.Worker`: same connection settings, authorizer, progress
handler, row and cell caps), and through `ReadOnlyDatabase.execute`, which sends them over the
worker's pipes. The difference is the overhead a tool call pays for hard limits. Also timed:
opening a database (starting a worker) and a time-out (killing and restarting one).

    .venv/bin/python -m benchmarks.data.bench_sql_worker --out benchmarks/results/sql_worker.md
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.database import DEFAULT_MAX_CELL_CHARS, DEFAULT_MEMORY_LIMIT_MB
from edge_sql.tools.db_file import prepare
from edge_sql.tools.sql_worker import Worker

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
# What tool calls send: sample_rows, distinct_values, a join from run_query, a schema read.
STATEMENTS = [
    ('SELECT * FROM "Genre"', 5),
    ('SELECT DISTINCT "Name" FROM "MediaType"', 10),
    (
        "SELECT a.Title, count(*) FROM Album a JOIN Track t ON t.AlbumId = a.AlbumId "
        "GROUP BY a.AlbumId ORDER BY 2 DESC LIMIT 5",
        5,
    ),
    ("SELECT name FROM pragma_table_info('Track')", 5),
    ("SELECT * FROM Track WHERE Name LIKE '%love%'", 5),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def run(rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"in_process": [], "worker": [], "added": []}
    worker = Worker()
    reply = worker.open(prepare(CHINOOK).uri, DEFAULT_MEMORY_LIMIT_MB * 1024 * 1024)
    assert reply == ("ok",), reply
    with ReadOnlyDatabase(CHINOOK) as db:
        for _ in range(20):  # warm both paths (page cache, statement parsing)
            for sql, rows in STATEMENTS:
                worker.execute(sql, (), rows, DEFAULT_MAX_CELL_CHARS, 5.0)
                db.execute(sql, max_rows=rows)
        for i in range(rounds):
            for sql, rows in STATEMENTS:
                order = (0, 1) if i % 2 == 0 else (1, 0)
                taken = [0.0, 0.0]
                for which in order:
                    start = time.perf_counter()
                    if which == 0:
                        result = worker.execute(sql, (), rows, DEFAULT_MAX_CELL_CHARS, 5.0)
                        assert result[0] == "ok", result
                    else:
                        db.execute(sql, max_rows=rows)
                    taken[which] = time.perf_counter() - start
                times["in_process"].append(taken[0])
                times["worker"].append(taken[1])
                times["added"].append(taken[1] - taken[0])
    return times


def lifecycle(samples: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"open": [], "timeout_restart": []}
    for _ in range(samples):
        start = time.perf_counter()
        db = ReadOnlyDatabase(CHINOOK, time_limit_s=0.2)
        out["open"].append(time.perf_counter() - start)
        start = time.perf_counter()
        try:
            db.execute("SELECT printf('%.*c', 2000000000, 'x')", max_rows=1)
        except Exception:  # the time-out is expected
            pass
        out["timeout_restart"].append(time.perf_counter() - start - 0.2)
        start = time.perf_counter()
        db.execute("SELECT 1", max_rows=1)  # waits for the restarted worker, if still starting
        out["timeout_restart"][-1] += time.perf_counter() - start
        db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400, help="rounds over the 5 statements")
    parser.add_argument("--lifecycle", type=int, default=10, help="opens and time-outs timed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    header = machine_detail()
    times = run(args.rounds)
    life = lifecycle(args.lifecycle)
    rows = [
        f"| {name} | {len(v)} | {ms(statistics.median(v))} | {ms(percentile(v, 0.95))} |"
        for name, v in [
            ("in process (no worker)", times["in_process"]),
            ("through the worker", times["worker"]),
            ("added per call (paired)", times["added"]),
            ("open (start a worker, read schema)", life["open"]),
            ("time-out: kill + restart, past the limit", life["timeout_restart"]),
        ]
    ]
    text = "\n".join(
        [
            "# SQL worker overhead per tool call",
            "",
            f"Command: `python -m benchmarks.data.bench_sql_worker --rounds {args.rounds} "
            f"--lifecycle {args.lifecycle}" + (f" --out {args.out}`" if args.out else "`"),
            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            "",
            "```",
            header,
            "```",
            "",
            "Shared machine: about six engineers were running builds and tests on these 2 cores at",
            "the same time, so absolute figures are noisy; the two paths were interleaved call by",
            "call so they saw the same load, and `added` is the per-call paired difference.",
            "",
            "Statements: sample_rows / distinct_values / a grouped join / a pragma_table_info read /",
            "a LIKE scan over Track, each fetching at most 5 or 10 rows (what the tools send).",
            "",
            "| path | calls | median ms | p95 ms |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )
    print(text)
    if args.out:
        write_results(args.out, text)


if __name__ == "__main__":
    main()
