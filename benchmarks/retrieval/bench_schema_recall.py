"""Recall of gold tables in what `list_tables` shows, on big merged schemas; ranking time per
question; index build time and size. Prints its figures (and writes them as JSON with --out).

Two corpora (benchmarks/retrieval/schema_corpora.py): BIRD mini-dev, which the ranking is tuned on, and
Spider 1.0's dev set, held out (read for reporting only). Each question's database is merged
with the corpus's other databases (for Spider, BIRD's too) and generated distractors of four
kinds (same-shaped archive copies, yearly and quarterly tables of changing shape, link tables,
generic shards) into 1,000 and 5,000 tables; a question counts when every table of its gold SQL
(parsed with sqlglot) is named in the shown text. The baseline is plain FTS5 BM25 over table
and column names with the question's words, top 150 names; then the ranking as issue 55 left
it, and each part of issue 62 switched on in turn, through the real `SchemaView`. Shown text is
counted with the real Qwen3.5 tokenizer (benchmarks/model/checkpoint_tokenizer.py), which is also
the count the share is filled with where the ranking counts real tokens (as the agent does).

    python -m benchmarks.retrieval.bench_schema_recall --corpus spider --sizes 1000 --out benchmarks/results/schemas/spider-1000.json
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import sqlglot
from sqlglot import exp

from benchmarks.model.checkpoint_tokenizer import build_tokenizer
from benchmarks.retrieval.bird_schemas import GENERIC_COLUMNS, merged_schema, write_database
from benchmarks.retrieval.schema_corpora import CORPORA, SEEDS, load_corpus, mixed_distractors
from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_index import index_for, index_path
from edge_sql.tools.schema_ranking import Ranking, rank_tables
from edge_sql.tools.schema_view import SchemaView

SIZES = (1000, 5000)
BASELINE_TOP = 150
PASS4_OFF = {"spread": False, "english": False, "counts_only": False}  # issue 62's fourth pass, switched off
PASS3_OFF = {"table_columns": False, "reach": False, **PASS4_OFF}  # the third pass and later, switched off


def issue_55_rules() -> Ranking:
    """The ranking as issue 55 left it."""
    return Ranking(split=False, keys=False, same_shape=False, real_tokens=False, **PASS3_OFF)


def ranking_steps() -> list[tuple[str, Ranking, bool]]:
    """Each step switches one more part on (cumulative): what each addition bought. Made when
    asked, not on import: bench_rank_time's `--against` worker imports this module with an older
    tree's edge_sql, whose `Ranking` lacks the later parts' flags."""
    return [
        ("issue 55's ranking (estimated tokens, copies by half the columns)", issue_55_rules(), True),
        ("+ the share counted in real tokens", Ranking(split=False, keys=False, same_shape=False, **PASS3_OFF), True),
        ("+ copies only of the same shape, look-alikes apart", Ranking(split=False, keys=False, **PASS3_OFF), True),
        ("+ glued names split against the schema's words", Ranking(keys=False, **PASS3_OFF), True),
        ("+ undeclared key names (issue 62's first pass)", Ranking(cover=False, joined=False, **PASS3_OFF), True),
        ("+ neighbouring question words joined where the schema glues them", Ranking(cover=False, **PASS3_OFF), True),
        ("+ each question word's best name matches above the neighbours (second pass)", Ranking(**PASS3_OFF), True),
        ("+ columns named as tables link to them", Ranking(reach=False, **PASS4_OFF), True),
        ("+ unmatched tables near the matched ones listed first (third pass)", Ranking(**PASS4_OFF), True),
        ("+ a hub raises its best-linked neighbours, not hundreds", Ranking(english=False, counts_only=False), True),
        ("+ glued names split by English word frequency", Ranking(counts_only=False), True),
        ("+ folded lines count their members, name only one that raised the line (default)", Ranking(), True),
        ("default, question only (no evidence)", Ranking(), False),
    ]


def gold_tables(sql: str) -> set[str]:
    tree = sqlglot.parse_one(sql, read="sqlite")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}


def baseline_shown(db_path: Path, question: str, conn_cache: dict[Path, sqlite3.Connection]) -> list[str]:
    """Plain FTS5 BM25 over each table's name and column names; the question's words OR'ed; top 150."""
    conn = conn_cache.get(db_path)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(name, cols)")
        src = sqlite3.connect(db_path)
        names = [r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        for name in names:
            cols = " ".join(r[1] for r in src.execute("SELECT * FROM pragma_table_info(?)", (name,)))
            conn.execute("INSERT INTO t VALUES (?, ?)", (name, cols))
        src.close()
        conn_cache[db_path] = conn
    words = {w for w in "".join(ch if ch.isalnum() else " " for ch in question.lower()).split()}
    if not words:
        return []
    query = " OR ".join(f'"{w}"' for w in sorted(words))
    rows = conn.execute("SELECT name FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (query, BASELINE_TOP))
    return [r[0] for r in rows]


def listed(view: SchemaView) -> tuple[set[str], str]:
    listing = view.listing()
    return {n.lower() for n in listing.named()}, listing.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        choices=CORPORA,
        default="bird",
        help="bird, spider, heldout2, heldout3, heldout4: tuned on; heldout5: held out (its own distractor seed)",
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="schema sizes in tables")
    parser.add_argument(
        "--steps", type=int, nargs="*", help="only these steps of ranking_steps() (0-based; default all)"
    )
    parser.add_argument("--build", action="store_true", help="also time a 5,000 x 20 index build")
    parser.add_argument(
        "--splitter", choices=("schema", "wordninja", "wordsegment"), default="schema", help="what splits glued names"
    )
    args = parser.parse_args()
    if args.splitter != "schema":
        use_library_splitter(args.splitter)
    work = Path(tempfile.mkdtemp(prefix="schema-recall-"))
    os.environ["EDGE_SQL_HOME"] = str(work / "home")
    count_tokens = real_token_counter(work)
    databases, questions, unrelated = load_corpus(args.corpus)
    if args.limit:
        questions = questions[: args.limit]
    golds = [gold_tables(q["SQL"]) for q in questions]
    real_count = sum(len(t) for t in databases.values()) + len(unrelated)
    every_step = ranking_steps()
    steps = [every_step[i] for i in args.steps] if args.steps is not None else every_step
    figures: dict = {"corpus": args.corpus, "questions": len(questions), "cpu": _cpu(), "sizes": {}}
    figures["splitter"] = args.splitter
    for size in args.sizes:
        extra = unrelated + mixed_distractors(databases, size - real_count, SEEDS[args.corpus])
        paths = {}
        for db_id in sorted({q["db_id"] for q in questions}):
            paths[db_id] = write_database(merged_schema(databases, db_id, extra), work / f"{db_id}-{size}.sqlite")
        per_size: dict = {"tables": len(merged_schema(databases, next(iter(paths)), extra))}
        cache: dict[Path, sqlite3.Connection] = {}
        for label, with_evidence in (("question", False), ("question+evidence", True)):
            hits = 0
            for q, gold in zip(questions, golds, strict=True):
                text = q["question"] + (" " + (q.get("evidence") or "") if with_evidence else "")
                hits += gold <= {n.lower() for n in baseline_shown(paths[q["db_id"]], text, cache)}
            key = f"baseline (plain FTS5, names+columns, {label}, top 150)"
            per_size[key] = _share(hits, len(questions))
            print(f"{size} tables: {key}: {per_size[key]}%", flush=True)
        opened = {db_id: ReadOnlyDatabase(p) for db_id, p in paths.items()}
        for label, ranking, with_evidence in steps:
            hits, tokens, times, misses, building = 0, [], [], [], 0.0
            for q, gold in zip(questions, golds, strict=True):
                text = q["question"] + ("\n" + (q.get("evidence") or "") if with_evidence else "")
                view = SchemaView(opened[q["db_id"]], text, ranking=ranking, count_tokens=count_tokens)
                started = time.perf_counter()
                view._open_index()  # built once per schema and options; not part of the per-question time
                building += time.perf_counter() - started
                started = time.perf_counter()
                shown, shown_text = listed(view)
                times.append(time.perf_counter() - started)
                view.close()
                hits += gold <= shown
                if not gold <= shown:
                    misses.append({"db": q["db_id"], "question": q["question"], "missing": sorted(gold - shown)})
                tokens.append(count_tokens(shown_text))
            per_size[label] = {
                "recall_%": _share(hits, len(questions)),
                "tokens_mean": round(statistics.mean(tokens)),
                "tokens_max": max(tokens),
                "rank_ms_mean": round(1000 * statistics.mean(times), 1),
                "rank_ms_p95": round(1000 * sorted(times)[int(0.95 * len(times))], 1),
                "index_builds_s": round(building, 1),  # every schema's index with this step's options (0: built before)
            }
            print(f"{size} tables: {label}: {per_size[label]}", flush=True)
            per_size[label]["misses"] = misses
        for db in opened.values():
            db.close()
        figures["sizes"][size] = per_size
    if args.build:
        figures["build"] = _build_figures(work)
        print(f"index build at 5,000 tables x 20 columns: {figures['build']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


def use_library_splitter(name: str) -> None:
    """Glued names split by a word-segmentation library (English word frequency) instead of the
    schema's own words, in the index and in the question: what issue 62 asked to measure (the
    default splits by English frequency only what the schema's words leave whole). wordninja is
    installed with edge-sql; wordsegment is not: `pip install wordsegment`."""
    import edge_sql.tools.schema_ranking as ranking_module
    import edge_sql.tools.schema_words as words_module

    if name == "wordninja":
        import wordninja

        segment = wordninja.split
    else:
        import wordsegment

        wordsegment.load()
        segment = wordsegment.segment

    def split_glued(word: str, vocabulary: frozenset[str]) -> list[str]:
        if len(word) < 2 * words_module.MIN_PART or not word.isalpha():
            return []
        parts = [p for p in segment(word) if p]
        return parts if len(parts) > 1 else []

    words_module.split_glued = split_glued  # type: ignore[assignment]
    ranking_module.split_glued = split_glued  # type: ignore[assignment]


def real_token_counter(work: Path):
    """The real Qwen3.5 tokenizer's count (what the agent's model counts)."""
    build_tokenizer(work / "tokenizer")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(work / "tokenizer" / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def _build_figures(work: Path) -> dict:
    """5,000 tables x 20 columns, three rows each with short text values: build time and size."""
    path = work / "wide-5000x20.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        for i in range(5000):
            cols = [f"{GENERIC_COLUMNS[(i + j) % len(GENERIC_COLUMNS)]}_{j}" for j in range(20)]
            conn.execute(f"CREATE TABLE t{i}_{cols[0]} ({', '.join(c + ' TEXT' for c in cols)})")
            row = ", ".join(f"'v{i}_{j}'" for j in range(20))
            conn.executemany(f"INSERT INTO t{i}_{cols[0]} VALUES ({row})", [()] * 3)
    conn.close()
    with ReadOnlyDatabase(path) as db:
        started = time.perf_counter()
        index_for(db).close()
        seconds = time.perf_counter() - started
        size = index_path(db).stat().st_size
        index = index_for(db)
        started = time.perf_counter()
        for i in range(100):
            rank_tables(index, f"what is the total amount per region for status {i}")
        per_question = (time.perf_counter() - started) / 100
        index.close()
    return {"seconds": round(seconds, 2), "mib": round(size / 2**20, 2), "rank_ms": round(1000 * per_question, 1)}


def _share(hits: int, total: int) -> float:
    return round(100 * hits / total, 1)


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    return "unknown"


if __name__ == "__main__":
    main()
