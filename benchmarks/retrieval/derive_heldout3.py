"""Derive benchmarks/data/heldout3/heldout.json: a third held-out corpus, read by nobody with the
ranker, for the report after issue 62's third pass froze its rules (heldout2 became a tuning corpus).

Five public sources, only schemas (Spider's `tables.json` layout), questions and gold SQL, eleven
real databases none of the tuning corpora holds:

- ScienceBenchmark's databases as ValueNet publishes them (github.com/brunnurs/valuenet, Apache
  2.0): CORDIS (`data/cordis/original/tables.json`, questions from `dev.json` then `train.json`),
  OncoMX (`data/oncomx/original/tables.json`, `generative/sample_queries.csv`) and hack_zurich
  (`original/tables.json`, the handmade questions); gold SQL in PostgreSQL.
- EHRSQL (github.com/glee4810/EHRSQL, CC BY 4.0): MIMIC-III and eICU (`dataset/ehrsql/tables.json`),
  the answerable questions of each `valid.json`; gold SQL in SQLite.
- SEDE (github.com/hirupert/sede, Apache 2.0): the Stack Exchange schema
  (`stackexchange_schema/tables_so.json`), `data/sede/val.jsonl` (its title is the question);
  gold SQL in T-SQL.
- FIBEN (github.com/IBM/fiben-benchmark, Apache 2.0): the financial data mart's DDL (`FIBEN.sql`:
  CREATE TABLE statements, foreign keys as ALTER TABLE ones), `FIBEN_Queries.json`; PostgreSQL.
- Defog's own four databases (github.com/defog-ai/defog-data and defog-ai/sql-eval, Apache 2.0):
  broker, car_dealership, derm_treatment, ewallet (`defog_data/DB/DB.sql`, PostgreSQL DDL turned
  into SQLite by sqlglot, `consumer_div.` dropped), questions from sql-eval's `data/*_sqlite.csv`.

Per database, in file order: one question per gold SQL shape (the SQL with its literals blanked,
so paraphrases and template instances count once), at most `CAP`. A question is kept only when
the benchmark's own parse of its SQL (SQLite dialect, `gold_tables`) names the same tables as a
parse in its own dialect, all of them in its database; where only the SQL turned into SQLite by
sqlglot gives them, that SQL is kept instead (T-SQL's `TOP`, `[names]`); else it is dropped.

    python -m benchmarks.retrieval.derive_heldout3 VALUENET EHRSQL SEDE FIBEN DEFOG_DATA SQL_EVAL  # their git dirs
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import sqlglot
from sqlglot import exp

from benchmarks.retrieval.bird_schemas import _tables, create_statement
from benchmarks.retrieval.derive_heldout2 import entry_from_ddl, git_show
from benchmarks.retrieval.derive_spider import KEEP

OUT = Path(__file__).resolve().parents[1] / "data" / "heldout3" / "heldout.json"
DEFOG = ("broker", "car_dealership", "derm_treatment", "ewallet")
CAP = 40  # questions per database at most, so that no schema dominates
FOREIGN = re.compile(r"ALTER TABLE (\w+) ADD CONSTRAINT \w+ (FOREIGN KEY \(\w+\) REFERENCES \w+ \(\w+\))")
LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\b\d+(?:\.\d+)?\b")


def tables_in(sql: str, dialect: str) -> set[str] | None:
    """The table names `sql` reads, lowercased, its CTEs left out (as `gold_tables` counts them);
    None where the dialect cannot parse it."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.SqlglotError:
        return None
    if tree is None:
        return None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name.lower() for t in tree.find_all(exp.Table) if t.name and t.name.lower() not in ctes}


def gold_sql(sql: str, dialect: str, names: set[str]) -> str | None:
    """`sql` as the benchmark will read it, or None where its gold tables cannot be trusted."""
    own = tables_in(sql, dialect)
    if not own or not own <= names:
        return None
    if tables_in(sql, "sqlite") == own:
        return sql
    try:
        turned = sqlglot.transpile(sql, read=dialect, write="sqlite")[0]
    except sqlglot.errors.SqlglotError:
        return None
    return turned if tables_in(turned, "sqlite") == own else None


def shape(sql: str) -> str:
    return " ".join(LITERAL.sub("?", sql.lower()).split())


def pick(entry: dict, asked: list[tuple[str, str]], dialect: str, source: str, dropped: Counter) -> list[dict]:
    """The first `CAP` questions of distinct SQL shapes whose gold tables parse and exist; what
    is left out counted in `dropped` by why (`db`: gold tables; `db same shape`, `db no question`, `db past cap`)."""
    names = {n.lower() for n in entry["table_names_original"]}
    seen: set[str] = set()
    chosen = []
    for at, (question, sql) in enumerate(asked):
        if len(chosen) == CAP:
            dropped[f"{entry['db_id']} past cap"] += len(asked) - at
            break
        question, sql = " ".join(question.split()), sql.strip().rstrip(";").strip()
        if not question or shape(sql) in seen:
            dropped[f"{entry['db_id']} {'same shape' if question else 'no question'}"] += 1
            continue
        seen.add(shape(sql))
        kept = gold_sql(sql, dialect, names)
        if kept is None:
            dropped[entry["db_id"]] += 1
            continue
        dropped[f"{entry['db_id']} turned"] += kept != sql
        chosen.append({"db_id": entry["db_id"], "question": question, "SQL": kept, "source": source})
    return chosen


def schema(text: str) -> list[dict]:
    return [{k: e[k] for k in KEEP} for e in json.loads(text)]


def science(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    show = lambda path: git_show(git_dir, f"data/{path}")
    cordis, oncomx, zurich = (
        schema(show(f"{db}/original/tables.json"))[0] for db in ("cordis", "oncomx", "hack_zurich")
    )
    pairs = lambda items: [(q["question"], q["query"]) for q in items]
    asked_cordis = pairs(json.loads(show("cordis/original/dev.json")) + json.loads(show("cordis/original/train.json")))
    rows = csv.DictReader(io.StringIO(show("oncomx/generative/sample_queries.csv")))
    asked_oncomx = [(r["question"], r["query"]) for r in rows]
    handmade = [
        json.loads(show(f"hack_zurich/handmade_training_data/handmade_data_{s}.json")) for s in ("dev", "train")
    ]
    questions = pick(cordis, asked_cordis, "postgres", "sciencebenchmark-cordis", dropped)
    questions += pick(oncomx, asked_oncomx, "postgres", "sciencebenchmark-oncomx", dropped)
    questions += pick(zurich, pairs(handmade[0] + handmade[1]), "postgres", "valuenet-hack_zurich", dropped)
    return [cordis, oncomx, zurich], questions


def ehrsql(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    databases = schema(git_show(git_dir, "dataset/ehrsql/tables.json"))
    questions = []
    for entry in databases:
        items = json.loads(git_show(git_dir, f"dataset/ehrsql/{entry['db_id']}/valid.json"))
        asked = [(q["question"], q["query"]) for q in items if not q["is_impossible"] and q["query"] != "null"]
        questions += pick(entry, asked, "sqlite", "ehrsql", dropped)
    return databases, questions


def sede(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    entry = schema(git_show(git_dir, "stackexchange_schema/tables_so.json"))[0]
    items = [json.loads(line) for line in git_show(git_dir, "data/sede/val.jsonl").splitlines() if line.strip()]
    asked = [(q["Title"] or "", q["QueryBody"]) for q in items]
    return [entry], pick(entry, asked, "tsql", "sede", dropped)


def fiben(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    """The DDL's foreign keys (ALTER TABLE, which SQLite lacks) moved into their CREATE TABLE."""
    ddl = git_show(git_dir, "FIBEN.sql")
    keys: dict[str, list[str]] = {}
    for table, key in FOREIGN.findall(ddl):
        keys.setdefault(table.upper(), []).append(key)
    statements = []
    for line in ddl.splitlines():
        if line.startswith("CREATE TABLE"):
            table = line.split()[2].upper()
            body = line.rstrip().rstrip(";").rstrip()[:-1]  # its closing parenthesis dropped
            statements.append(", ".join([body, *keys.get(table, [])]) + ")")
    entry = entry_from_ddl("fiben", statements)
    asked = [(q["question"], q["SQL"]) for q in json.loads(git_show(git_dir, "FIBEN_Queries.json"))]
    return [entry], pick(entry, asked, "postgres", "fiben", dropped)


def defog(data_dir: str, eval_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    """Defog's own databases (the other sql-eval ones are Spider's, Advising or ATIS)."""
    databases, questions = [], []
    rows = []
    for name in ("questions_gen", "instruct_basic", "instruct_advanced"):
        rows += list(csv.DictReader(io.StringIO(git_show(eval_dir, f"data/{name}_sqlite.csv"))))
    for db in DEFOG:
        statements = []
        for tree in sqlglot.parse(git_show(data_dir, f"defog_data/{db}/{db}.sql"), read="postgres"):
            if isinstance(tree, exp.Create) and tree.kind == "TABLE":
                for table in tree.find_all(exp.Table):  # `consumer_div.users`: SQLite has no such schema
                    table.set("db", None)
                statements.append(tree.sql(dialect="sqlite"))
        entry = entry_from_ddl(db, statements)
        databases.append(entry)
        asked = [(r["question"], r["query"]) for r in rows if r["db_name"] == db]
        questions += pick(entry, asked, "sqlite", "defog", dropped)
    return databases, questions


def check(databases: list[dict]) -> None:
    """Every database creates in SQLite as the benchmark writes it: names unique, none reserved."""
    for entry in databases:
        names = [n.lower() for n in entry["table_names_original"]]
        assert len(set(names)) == len(names), entry["db_id"]
        assert not any(n.startswith("sqlite_") for n in names), entry["db_id"]
        conn = sqlite3.connect(":memory:")
        for table in _tables(entry):
            conn.execute(create_statement(table))
        conn.close()


def write_corpus(
    out: Path, source: str, licence: str, databases: list[dict], questions: list[dict], dropped: Counter
) -> None:
    """Check a derived corpus (`check`), write it (its sources and licences, then Spider's
    `tables.json` layout plus `questions`) and print its counts."""
    check(databases)
    derived = {"source": source, "licence": licence, "databases": databases, "questions": questions}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(derived, separators=(",", ":"), ensure_ascii=False) + "\n")
    tables = sum(len(d["table_names_original"]) for d in databases)
    per_db = Counter(q["db_id"] for q in questions)
    print(
        f"{out}: {len(databases)} databases, {tables} tables, {len(questions)} questions, {out.stat().st_size:,} bytes"
    )
    for entry in databases:
        db = entry["db_id"]
        print(
            f"  {db}: {len(entry['table_names_original'])} tables, {per_db[db]} questions, {dropped[db]} dropped, "
            f"{dropped[db + ' turned']} in SQLite form, {dropped[db + ' same shape']} of a shape already taken, "
            f"{dropped[db + ' no question']} without a question, {dropped[db + ' past cap']} past the cap"
        )


def main() -> None:
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its notes on T-SQL it parses as a command
    dropped: Counter = Counter()
    parts = [science(sys.argv[1], dropped), ehrsql(sys.argv[2], dropped), sede(sys.argv[3], dropped)]
    parts += [fiben(sys.argv[4], dropped), defog(sys.argv[5], sys.argv[6], dropped)]
    databases = [d for found, _ in parts for d in found]
    questions = [q for _, asked in parts for q in asked]
    source = (
        "ScienceBenchmark (Zhang et al., VLDB 2024) CORDIS and OncoMX, and hack_zurich, as published by ValueNet: "
        "https://github.com/brunnurs/valuenet ; EHRSQL (Lee et al., NeurIPS 2022) MIMIC-III and eICU: "
        "https://github.com/glee4810/EHRSQL ; SEDE (Hazoom et al., NLP4Prog 2021): https://github.com/hirupert/sede ; "
        "FIBEN (Sen et al., PVLDB 2020): https://github.com/IBM/fiben-benchmark ; Defog's broker, car_dealership, "
        "derm_treatment, ewallet: https://github.com/defog-ai/defog-data , https://github.com/defog-ai/sql-eval"
    )
    licence = (
        "ValueNet repository: Apache 2.0; EHRSQL: CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/); "
        "SEDE, FIBEN, defog-data and sql-eval repositories: Apache 2.0; derived: schemas, questions and gold SQL only"
    )
    write_corpus(OUT, source, licence, databases, questions, dropped)


if __name__ == "__main__":
    main()
