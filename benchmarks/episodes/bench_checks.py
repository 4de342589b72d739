"""What the answer checks (edge_sql/checks) are worth: false alarms, errors caught, cost, provenance.

1. False alarms: the gold SQL of the 64 bundled questions (Chinook, Northwind) and the three
   published SQaLe episodes' final SQL (their databases rebuilt by `benchmarks/sqale/replay.py`): the share
   called `doubtful`, each flag with its reason.
2. Errors caught: the gold SQL mutated the ways small models err, each kind on every question it
   applies to: a literal's case, a letter dropped, two letters swapped, a value from another
   column, a column swapped for a sibling of the same table, and a table the episode never
   described (the SQL unchanged; the episode's transcript, built from real tool calls, lists the
   tables and describes every other one). A mutation is "flagged" when the confidence falls below
   `checked`; "doubtful" is counted apart. Every mutant is checked with the transcript of an
   episode that listed the tables and described the gold SQL's tables.
3. Cost: the checks' time per answer (median, p95) on Chinook and Northwind (the rows given, as an
   episode gives them), and on a 5,000,000-row table this script builds (an indexed and an
   unindexed column: the index answers, the rest is a bounded scan).
4. Provenance of the published episodes: the share of their final SQL's names and literals that
   the published calls showed (the page publishes only some outputs: a lower bound).

    .venv/bin/python -m benchmarks.episodes.bench_checks --out benchmarks/results/checks.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common.bench_machine import write_results
from benchmarks.episodes.sql_mutations import MUTATIONS, VALUE_KINDS
from benchmarks.sqale.replay import build_database
from edge_sql.agent.result import CallRecord, RoundRecord
from edge_sql.bench.machine import cpu_model
from edge_sql.checks import Checks, attach_provenance, check_sql
from edge_sql.checks.checker import _lookup
from edge_sql.checks.names import read_names
from edge_sql.evaluation.datasets import Question, load_bundled
from edge_sql.evaluation.sqale_published import call_args, load_episodes
from edge_sql.tools import ReadOnlyDatabase, Toolbox

REPO = Path(__file__).resolve().parents[2]
BIG_ROWS = 5_000_000


# -- episodes built from real tool calls ---------------------------------------------------


def explored(toolbox: Toolbox, tables: list[str], *, skip: str | None = None) -> list[RoundRecord]:
    """An episode's rounds: list_tables, then describe_table of each table but `skip`."""
    first = RoundRecord(index=1, think="")
    result = toolbox.call("list_tables", {})
    first.calls.append(CallRecord("list_tables", {}, result.ok, result.output))
    second = RoundRecord(index=2, think="")
    for table in tables:
        if table != skip:
            result = toolbox.call("describe_table", {"table_name": table})
            second.calls.append(CallRecord("describe_table", {"table_name": table}, result.ok, result.output))
    return [first, second]


# -- the parts -----------------------------------------------------------------------------


def gold_false_alarms(questions: list[Question], dbs: dict[str, ReadOnlyDatabase]) -> dict[str, Any]:
    flags: list[tuple[str, str, list[str]]] = []
    levels: Counter[str] = Counter()
    with_rows = doubtful_with_rows = 0
    for q in questions:
        db = dbs[q.db_id]
        checks = check_sql(db, q.gold_sql)
        levels[checks.confidence] += 1
        has_rows = not any(f.code in ("no_rows", "null_row", "failed") for f in checks.findings)
        with_rows += has_rows
        if checks.confidence != "checked":
            flags.append((q.id, checks.confidence, [f.message for f in checks.findings if f.level != "note"]))
            doubtful_with_rows += has_rows and checks.confidence == "doubtful"
    return {
        "n": len(questions),
        "levels": levels,
        "flags": flags,
        "with_rows": with_rows,
        "doubtful_with_rows": doubtful_with_rows,
    }


def published_rounds(ep: dict[str, Any]) -> list[RoundRecord]:
    """The published calls as an episode records them (an unpublished output is empty)."""
    rounds = []
    for r_index, round_ in enumerate(ep["rounds"], start=1):
        record = RoundRecord(index=r_index, think=round_.get("think") or "")
        for call in round_["calls"]:
            if call["tool"] == "answer":
                continue
            output = call.get("out") or ""
            args = call_args(call["tool"], call["args"])
            record.calls.append(CallRecord(call["tool"], args, not output.startswith("Error"), output))
        rounds.append(record)
    return rounds


def published(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for ep in load_episodes():
        path = build_database(ep["id"], folder)
        final = ep["final"]["sql"]
        with ReadOnlyDatabase(path) as db:
            checks = check_sql(db, final)
            alone = (checks.confidence, [f.message for f in checks.findings if f.level != "note"])
            attach_provenance(checks, published_rounds(ep), ep["question"], ep.get("hint"))
        rows.append({"id": ep["id"], "alone": alone, "checks": checks})
    return rows


def mutations(questions: list[Question], dbs: dict[str, ReadOnlyDatabase]) -> dict[str, dict[str, Any]]:
    toolboxes = {name: Toolbox(db) for name, db in dbs.items()}
    out: dict[str, dict[str, Any]] = {}
    for kind, mutate in [*MUTATIONS.items(), ("table never described", None)]:
        counts: Counter[str] = Counter()
        examples: list[str] = []
        for i, q in enumerate(questions):
            db, toolbox = dbs[q.db_id], toolboxes[q.db_id]
            tables = read_names(q.gold_sql, _lookup(db)).tables
            if mutate is None:
                if len(tables) < 1:
                    continue
                sql, skip = q.gold_sql, tables[i % len(tables)]
            else:
                mutated = mutate(q.gold_sql, db, i)
                if mutated is None or mutated == q.gold_sql:
                    continue
                sql, skip = mutated, None
            checks = check_sql(db, sql)
            attach_provenance(checks, explored(toolbox, tables, skip=skip), q.question, q.evidence)
            counts["n"] += 1
            counts["failed to run"] += any(f.code == "failed" for f in checks.findings)
            counts["flagged"] += checks.confidence != "checked"
            counts["doubtful"] += checks.confidence == "doubtful"
            if checks.confidence == "checked" and len(examples) < 3:
                examples.append(f"{q.id}: `{sql}`")
        out[kind] = {"counts": counts, "missed": examples}
    return out


def timed(check: Callable[[], Checks], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        check()
        times.append(time.perf_counter() - started)
    return times


def cost_bundled(questions: list[Question], dbs: dict[str, ReadOnlyDatabase], repeats: int) -> dict[str, list[float]]:
    per_db: dict[str, list[float]] = {}
    for q in questions:
        db = dbs[q.db_id]
        result = db.execute(q.gold_sql, max_rows=200)
        per_db.setdefault(q.db_id, []).extend(
            timed(lambda db=db, q=q, result=result: check_sql(db, q.gold_sql, result=result), repeats)
        )
    return per_db


def build_big(path: Path, rows: int) -> float:
    started = time.perf_counter()
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER, kind TEXT, city TEXT, note TEXT)")
    kinds = ["click", "view", "purchase", "refund", "signup", "logout", "search", "share"]
    cities = ["Berlin", "Paris", "Lisbon", "Oslo", "Prague", "Vienna", "Madrid", "Rome", "Dublin", "Zagreb"]
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events (user_id, kind, city, note) VALUES (?, ?, ?, ?)",
        ((i % 100_003, kinds[i % 8], cities[(i * 7) % 10], f"note {i % 50_000}") for i in range(rows)),
    )
    conn.execute("INSERT INTO events (user_id, kind, city, note) VALUES (-1, 'rare-kind', 'Atlantis', 'last row')")
    conn.execute("COMMIT")
    conn.execute("CREATE INDEX events_kind ON events(kind)")
    conn.close()
    return time.perf_counter() - started


BIG_QUERIES = [
    ("indexed, found", "SELECT count(*) FROM events WHERE kind = 'purchase'"),
    ("indexed, found only in the last row", "SELECT count(*) FROM events WHERE kind = 'rare-kind'"),
    ("indexed, not found (wrong case)", "SELECT count(*) FROM events WHERE kind = 'Purchase'"),
    ("no index, found early", "SELECT count(*) FROM events WHERE city = 'Paris'"),
    ("no index, only in the last row", "SELECT count(*) FROM events WHERE city = 'Atlantis'"),
    ("no index, not found (typo)", "SELECT count(*) FROM events WHERE city = 'Lisbn'"),
    ("no index, LIKE", "SELECT count(*) FROM events WHERE note LIKE 'note 4999%'"),
]


def cost_big(path: Path, repeats: int) -> list[tuple[str, str, list[float], Checks]]:
    rows = []
    with ReadOnlyDatabase(path, time_limit_s=30) as db:
        for label, sql in BIG_QUERIES:
            result = db.execute(sql, max_rows=200)
            times = timed(lambda sql=sql, result=result: check_sql(db, sql, result=result), repeats)
            rows.append((label, sql, times, check_sql(db, sql, result=result)))
    return rows


# -- report --------------------------------------------------------------------------------


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.1f} / {p95 * 1000:.1f}"


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the report (markdown) here")
    parser.add_argument("--big-rows", type=int, default=BIG_ROWS, help="rows of the large table (default 5,000,000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each check")
    parser.add_argument("--work", type=Path, default=None, help="folder for the built databases (default: a temp dir)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-checks-"))
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Answer checks (`benchmarks/episodes/bench_checks.py`)",
        "",
        f"CPU: {cpu_model()} ({os.cpu_count()} cores visible), Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}. Command: `python -m benchmarks.episodes.bench_checks --big-rows {args.big_rows} "
        f"--repeats {args.repeats}`.",
        "",
    ]

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    for line in lines:
        print(line)
    questions = load_bundled()
    dbs = {}
    for q in questions:
        if q.db_id not in dbs:
            dbs[q.db_id] = ReadOnlyDatabase(q.db_path)

    gold = gold_false_alarms(questions, dbs)
    say("## 1. False alarms on correct SQL")
    say()
    say(
        f"Gold SQL of the {gold['n']} bundled questions, checked alone (`edge-sql check`): "
        + ", ".join(
            f"{level} {share(gold['levels'][level], gold['n'])}" for level in ("checked", "unchecked", "doubtful")
        )
        + f". Doubtful among the {gold['with_rows']} that return rows: {gold['doubtful_with_rows']}."
    )
    say()
    for qid, level, reasons in gold["flags"]:
        say(f"- {qid} ({level}): {'; '.join(reasons)}")
    say()
    say("The three published SQaLe episodes' final SQL (databases rebuilt from the page):")
    say()
    say("| episode | checked alone | with the episode's provenance |")
    say("|---|---|---|")
    pub = published(work)
    for row in pub:
        checks = row["checks"]
        alone = row["alone"][0] + (f": {'; '.join(row['alone'][1])}" if row["alone"][1] else "")
        traced = checks.confidence + (f": {'; '.join(checks.reasons)}" if checks.confidence != "checked" else "")
        say(f"| {row['id']} | {alone} | {traced} |")
    say()

    say(
        "## 2. Errors caught (mutated gold SQL, checked with an episode that listed the tables and described the gold SQL's)"
    )
    say()
    say("| mutation | mutants | failed to run | flagged (below `checked`) | doubtful |")
    say("|---|--:|--:|--:|--:|")
    caught = mutations(questions, dbs)
    for kind, data in caught.items():
        c = data["counts"]
        say(
            f"| {kind} | {c['n']} | {c['failed to run']} | {share(c['flagged'], c['n'])} | {share(c['doubtful'], c['n'])} |"
        )
    value_n = sum(caught[k]["counts"]["n"] for k in VALUE_KINDS)
    value_flagged = sum(caught[k]["counts"]["flagged"] for k in VALUE_KINDS)
    say()
    say(f"Value mutations together: {share(value_flagged, value_n)} flagged.")
    for kind, data in caught.items():
        if data["missed"]:
            say(f"- missed ({kind}): " + "; ".join(data["missed"]))
    say()

    say("## 3. Cost per answer (median / p95, ms; rows given as an episode gives them)")
    say()
    per_db = cost_bundled(questions, dbs, args.repeats)
    say("| database | checks timed | median / p95 ms |")
    say("|---|--:|--:|")
    for name, times in per_db.items():
        say(f"| {name} | {len(times)} | {ms(times)} |")
    big = work / "big.sqlite"
    built = build_big(big, args.big_rows)
    say()
    say(
        f"A table of {args.big_rows + 1:,} rows (`events`, index on `kind` only; {big.stat().st_size / 2**20:.0f} MiB, "
        f"built in {built:.0f} s):"
    )
    say()
    say("| comparison | median / p95 ms | value found | scope | confidence |")
    say("|---|--:|---|---|---|")
    for label, _sql, times, checks in cost_big(big, args.repeats):
        value = checks.values[0]
        found = {True: "yes", False: "no", None: "not in the scanned rows"}[value.found]
        closest = f" (closest: {', '.join(map(repr, value.closest))})" if value.closest else ""
        say(f"| {label} | {ms(times)} | {found}{closest} | {value.scope} | {checks.confidence} |")
    say()

    say("## 4. Provenance of the published episodes (names and literals the published calls showed)")
    say()
    say("| episode | tables seen | columns seen | literals seen |")
    say("|---|--:|--:|--:|")
    totals = Counter()
    for row in pub:
        checks = row["checks"]
        parts = {}
        for kind in ("table", "column"):
            uses = [n for n in checks.names if n.kind == kind]
            seen = sum(1 for n in uses if n.seen)
            parts[kind] = share(seen, len(uses))
            totals[f"{kind} seen"] += seen
            totals[kind] += len(uses)
        literals = checks.values
        seen_literals = sum(1 for v in literals if v.seen)
        totals["literal seen"] += seen_literals
        totals["literal"] += len(literals)
        say(f"| {row['id']} | {parts['table']} | {parts['column']} | {share(seen_literals, len(literals))} |")
    say(
        f"| all | {share(totals['table seen'], totals['table'])} | {share(totals['column seen'], totals['column'])} | "
        f"{share(totals['literal seen'], totals['literal'])} |"
    )
    say()
    say("The page leaves many outputs unpublished (`out` null): a name those calls showed counts as unseen here.")
    for db in dbs.values():
        db.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_results(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
