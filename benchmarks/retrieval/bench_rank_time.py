"""Time to rank and list one question at 5,000 tables, interleaved on one schema: issue 55's rules,
the default with the estimate, and the default counting real tokens; wall time and this
process's CPU time (on a shared machine the wall time is mostly the others' load) (the Qwen3.5 tokenizer
through `tokenizers`, as a stand-in for the agent's llama.cpp count). Interleaving question by
question puts each variant under the same load on a shared machine.

`--against TREE` compares two copies of edge-sql instead (an A/B of the code itself): this
worktree and TREE (another checkout, such as the commit before), each in its own worker process
on the same schema, the default with real tokens, question by question in turn; it prints both
medians and their ratios.

    python -m benchmarks.retrieval.bench_rank_time --questions 100
    python -m benchmarks.retrieval.bench_rank_time --questions 100 --against /tmp/edge-sql-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.retrieval.bench_schema_recall import _cpu, issue_55_rules, real_token_counter
from benchmarks.retrieval.bird_schemas import merged_schema, write_database
from benchmarks.retrieval.schema_corpora import load_corpus, mixed_distractors
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_ranking import Ranking
from edge_sql.tools.schema_view import SchemaView

TREE = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--db", default="formula_1")
    parser.add_argument("--against", type=Path, help="another edge-sql checkout to compare with, question by question")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # a worker: time each question read from stdin
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rank-time-"))
    os.environ["EDGE_SQL_HOME"] = str(work / "home")
    if args.serve:
        serve(args.serve, work)
        return
    databases, questions, unrelated = load_corpus("bird")
    extra = unrelated + mixed_distractors(databases, 5000 - sum(len(t) for t in databases.values()))
    path = write_database(merged_schema(databases, args.db, extra), work / "schema.sqlite")
    texts = [q["question"] + "\n" + (q.get("evidence") or "") for q in questions if q["db_id"] == args.db]
    texts = (texts * 5)[: args.questions]
    if args.against:
        compare(path, texts, args.against)
        return

    count = real_token_counter(work)
    variants = {
        "issue 55's rules": (issue_55_rules(), None),
        "default, estimate": (Ranking(), None),
        "default, real tokens": (Ranking(), count),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}  # this process's CPU time: less the load's
    with ReadOnlyDatabase(path) as db:
        for ranking, counter in variants.values():  # build each index once, outside the timing
            SchemaView(db, "warm", ranking=ranking, count_tokens=counter).listing()
        for text in texts:
            for name, (ranking, counter) in variants.items():
                wall, own = timed(db, text, ranking, counter)
                times[name].append(wall)
                cpu[name].append(own)
    print(f"{_cpu()}, {args.questions} questions on {args.db} at 5,000 tables (ms a question, open to listed):")
    for name, values in times.items():
        values.sort()
        p95 = values[int(0.95 * len(values))]
        own = statistics.median(cpu[name])
        wall = f"wall median {statistics.median(values):.1f}, mean {statistics.mean(values):.1f}, p95 {p95:.1f}"
        print(f"  {name}: {wall}; CPU median {own:.1f}")


def timed(db: ReadOnlyDatabase, text: str, ranking: Ranking, counter) -> tuple[float, float]:
    started, started_cpu = time.perf_counter(), time.process_time()
    view = SchemaView(db, text, ranking=ranking, count_tokens=counter)
    view.listing()
    view.close()
    return 1000 * (time.perf_counter() - started), 1000 * (time.process_time() - started_cpu)


def serve(path: Path, work: Path) -> None:
    """One line of JSON in (a question), one out ([wall ms, CPU ms]); the default, real tokens."""
    from tokenizers import Tokenizer

    from benchmarks.model.checkpoint_tokenizer import build_tokenizer

    build_tokenizer(work / "tokenizer")
    tokenizer = Tokenizer.from_file(str(work / "tokenizer" / "tokenizer.json"))
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
    with ReadOnlyDatabase(path) as db:
        SchemaView(db, "warm", count_tokens=count).listing()
        print("ready", flush=True)
        for line in sys.stdin:
            print(json.dumps(timed(db, json.loads(line), Ranking(), count)), flush=True)


def compare(path: Path, texts: list[str], other: Path) -> None:
    """This tree and `other`, each a worker on the same schema file, asked in turn."""
    workers = {}
    for name, tree in (("this tree", TREE), (f"{other}", other)):
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{TREE}"}  # its edge_sql; benchmarks.* from here
        command = [sys.executable, __file__, "--serve", str(path)]
        workers[name] = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        while workers[name].stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            pass
    walls: dict[str, list[float]] = {n: [] for n in workers}
    cpus: dict[str, list[float]] = {n: [] for n in workers}
    for i, text in enumerate(texts):
        for name, worker in list(workers.items()) if i % 2 == 0 else list(workers.items())[::-1]:
            worker.stdin.write(json.dumps(text) + "\n")  # type: ignore[union-attr]
            worker.stdin.flush()  # type: ignore[union-attr]
            wall, own = json.loads(worker.stdout.readline())  # type: ignore[union-attr]
            walls[name].append(wall)
            cpus[name].append(own)
    for worker in workers.values():
        worker.stdin.close()  # type: ignore[union-attr]
        worker.wait(timeout=60)

    print(f"{_cpu()}, {len(texts)} questions at 5,000 tables, default ranking, real tokens (ms a question):")
    medians = {n: (statistics.median(walls[n]), statistics.median(cpus[n])) for n in workers}
    for name, (wall, own) in medians.items():
        print(f"  {name}: wall median {wall:.1f}, CPU median {own:.1f}")
    (a_wall, a_cpu), (b_wall, b_cpu) = medians.values()
    print(f"  ratio this / other: wall {a_wall / b_wall:.2f}, CPU {a_cpu / b_cpu:.2f}")


if __name__ == "__main__":
    main()
