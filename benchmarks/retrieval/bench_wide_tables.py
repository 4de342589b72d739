"""Share of gold columns `describe_table` shows for tables of 500 and 2,000 columns.

Each question's gold tables (parsed from its gold SQL with sqlglot) are made wide one at a
time: the real table's columns scattered among others up to the width, no rows
in their real database (benchmarks/retrieval/schema_corpora.wide_table, three kinds: other real tables' columns, numbered
generic measures, the table's own columns repeated per period). A question counts when, for
every gold table, `describe_table` (the real tool, shares counted with the real Qwen3.5
tokenizer as the agent counts them) shows every column of that table its gold SQL names.
Tuned on BIRD mini-dev with the first two kinds; Spider and the `periods` kind are held out.

    python -m benchmarks.retrieval.bench_wide_tables --corpus spider --out benchmarks/results/schemas/wide-spider.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import sqlglot
from sqlglot import exp

from benchmarks.retrieval.bench_schema_recall import _cpu, _share, real_token_counter
from benchmarks.retrieval.bird_schemas import Table, write_database
from benchmarks.retrieval.schema_corpora import CORPORA, SEEDS, WIDE_KINDS, load_corpus, wide_table
from edge_sql.tools import ReadOnlyDatabase, Toolbox, schema_view

WIDTHS = (500, 2000)  # SQLite allows at most 2,000 columns a table
COLUMN_ORDERS = {  # rank_columns' flags as each pass of issue 62 left them
    "pass2": {"plain_first": False, "repeats_last": False, "short_first": False, "families": False},
    "pass3": {"repeats_last": False, "short_first": False, "families": False},
    "pass4": {"families": False},
    "pass5": {},  # the sixth pass added no flag: it shows an undeclared `id` key first (`named_key`)
    "default": {},
}


def gold_columns(sql: str, tables: dict[str, Table]) -> dict[str, set[str]]:
    """Gold table (lower-case) -> the columns of it the SQL names (a column named in the SQL
    counts for every gold table that has a column of that name)."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    used = {c.name.lower() for c in tree.find_all(exp.Column) if c.name}
    gold = {t.name.lower() for t in tree.find_all(exp.Table) if t.name}
    found: dict[str, set[str]] = {}
    for name in gold:
        table = tables.get(name)
        if table is not None:
            found[name] = {c for c, _ in table.columns if c.lower() in used}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=CORPORA, default="bird")
    parser.add_argument("--kinds", nargs="+", default=list(WIDE_KINDS), choices=WIDE_KINDS)
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    parser.add_argument("--estimate", action="store_true", help="fill the share with the estimate, not real tokens")
    parser.add_argument(
        "--order",
        choices=sorted(COLUMN_ORDERS),
        default="default",
        help="the column order of an earlier pass: pass2 (unmatched columns in table order), pass3 (plain ones first), pass4 (any numbered name a repeat), pass5 (an undeclared key ranked as any column)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    schema_view.rank_columns = functools.partial(schema_view.rank_columns, **COLUMN_ORDERS[args.order])
    if args.order != "default":  # every earlier pass showed only a declared key first
        schema_view.named_key = lambda table, names: []
    work = Path(tempfile.mkdtemp(prefix="wide-tables-"))
    os.environ["EDGE_SQL_HOME"] = str(work / "home")
    count = real_token_counter(work)
    databases, questions, _ = load_corpus(args.corpus)
    seed = SEEDS[args.corpus]
    questions = questions[: args.limit] if args.limit else questions
    figures: dict = {
        "order": args.order,
        "corpus": args.corpus,
        "questions": len(questions),
        "cpu": _cpu(),
        "results": {},
    }
    for kind in args.kinds:
        for width in args.widths:
            hits, tokens, times, misses, made = 0, [], [], [], {}
            for q in questions:
                tables = {t.name.lower(): t for t in databases[q["db_id"]]}
                ok = True
                for name, columns in gold_columns(q["SQL"], tables).items():
                    key = (q["db_id"], name)
                    if key not in made:
                        made[key] = _wide_db(work, tables[name], width, kind, databases, q["db_id"], len(made), seed)
                    text = q["question"] + "\n" + (q.get("evidence") or "")
                    with ReadOnlyDatabase(made[key]) as db:
                        toolbox = Toolbox(db, question=text, count_tokens=None if args.estimate else count)
                        started = time.perf_counter()
                        shown = toolbox.call("describe_table", {"table_name": tables[name].name}).output
                        times.append(time.perf_counter() - started)
                    tokens.append(count(shown))
                    head = shown.split("\n")[0]
                    missing = sorted(c for c in columns if not _named(head, c))
                    if missing:
                        ok = False
                        misses.append({"db": q["db_id"], "question": q["question"], "table": name, "missing": missing})
                hits += ok
            result = {
                "all_gold_columns_shown_%": _share(hits, len(questions)),
                "tokens_max": max(tokens),
                "describe_ms_mean": round(1000 * statistics.mean(times), 1),
            }
            print(f"{kind} x {width}: {result}", flush=True)
            figures["results"][f"{kind}-{width}"] = {**result, "misses": misses}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


def _named(head: str, column: str) -> bool:
    """The column's definition is in the shown CREATE line (quoted or not)."""
    return any(f"{sep}{form} " in head for sep in ("(", ", ") for form in (column, f'"{column}"', f"`{column}`"))


def _wide_db(work: Path, table: Table, width: int, kind: str, databases: dict, db_id: str, n: int, seed: int) -> Path:
    """The question's real database (no rows) with `table` made wide."""
    columns = tuple(wide_table(table, width, kind, databases, seed))
    wide = Table(table.name, columns, table.primary_key, table.foreign_keys)
    tables = [wide if t.name == table.name else t for t in databases[db_id]]
    return write_database(tables, work / f"wide-{kind}-{width}-{n}.sqlite")


if __name__ == "__main__":
    main()
