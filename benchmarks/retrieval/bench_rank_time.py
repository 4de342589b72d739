"""Time to rank and list one question at 5,000 tables, interleaved on one schema: issue 55's rules,
the default with the estimate, and the default counting real tokens; wall time and this
process's CPU time (on a shared machine the wall time is mostly the others' load) (the Qwen3.5 tokenizer
through `tokenizers`, as a stand-in for the agent's llama.cpp count). Interleaving question by
question puts each variant under the same load on a shared machine.

    python -m benchmarks.retrieval.bench_rank_time --questions 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bird_schemas import merged_schema, write_database
from benchmarks.retrieval.bench_schema_recall import BEFORE, _cpu, real_token_counter
from benchmarks.schema_corpora import load_corpus, mixed_distractors
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_ranking import Ranking
from edge_sql.tools.schema_view import SchemaView


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--db", default="formula_1")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rank-time-"))
    os.environ["EDGE_SQL_HOME"] = str(work / "home")
    count = real_token_counter(work)
    databases, questions, unrelated = load_corpus("bird")
    extra = unrelated + mixed_distractors(databases, 5000 - sum(len(t) for t in databases.values()))
    path = write_database(merged_schema(databases, args.db, extra), work / "schema.sqlite")
    texts = [q["question"] + "\n" + (q.get("evidence") or "") for q in questions if q["db_id"] == args.db]
    variants = {
        "issue 55's rules": (BEFORE, None),
        "default, estimate": (Ranking(), None),
        "default, real tokens": (Ranking(), count),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}  # this process's CPU time: less the load's
    with ReadOnlyDatabase(path) as db:
        for ranking, counter in variants.values():  # build each index once, outside the timing
            SchemaView(db, "warm", ranking=ranking, count_tokens=counter).listing()
        for text in (texts * 5)[: args.questions]:
            for name, (ranking, counter) in variants.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                view = SchemaView(db, text, ranking=ranking, count_tokens=counter)
                view.listing()
                view.close()
                times[name].append(1000 * (time.perf_counter() - started))
                cpu[name].append(1000 * (time.process_time() - started_cpu))
    print(f"{_cpu()}, {args.questions} questions on {args.db} at 5,000 tables (ms a question, open to listed):")
    for name, values in times.items():
        values.sort()
        p95 = values[int(0.95 * len(values))]
        own = statistics.median(cpu[name])
        wall = f"wall median {statistics.median(values):.1f}, mean {statistics.mean(values):.1f}, p95 {p95:.1f}"
        print(f"  {name}: {wall}; CPU median {own:.1f}")


if __name__ == "__main__":
    main()
