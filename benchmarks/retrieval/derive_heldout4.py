"""Derive benchmarks/data/heldout4/heldout.json: a fourth held-out corpus, read by nobody with the
ranker, for the report after issue 62's fourth pass froze its rules (heldout3 became a tuning corpus).

Three public sources, only schemas (Spider's `tables.json` layout), questions and gold SQL, none of
whose databases the tuning corpora hold:

- Spider 2.0-lite's BigQuery and Snowflake databases (github.com/xlang-ai/Spider2, MIT licence;
  heldout2 holds only its SQLite ones): each table's `<db>/<dataset>/<table>.json` (its columns
  and their types; no `sample_rows`), and each question whose gold SQL the repository publishes
  (`evaluation_suite/gold/sql`), BigQuery SQL for `bq`/`ga` questions, Snowflake SQL for `sf`
  ones. A table's name is the last part of its qualified name. Only the databases in `SPIDER2`.
- BEAVER (github.com/peterbaile/beaver, MIT licence): MIT's data warehouse `dw` and five OpenStack
  service databases, from `dev_tables.json` (columns, keys, foreign keys), questions from
  `dev_dw.json` and `dev_nw.json`; gold SQL in MySQL.
- SNAILS (github.com/KyleLuoma/SNAILS, Apache 2.0): four of its real databases with their native
  names, from `filtered_snails_schemas_and_questions_Native.json` (each question comes with a
  six-table excerpt of its schema; a database's schema is the union of its excerpts); T-SQL.

Questions are picked as heldout3's (`derive_heldout3.pick`): per database, in file order, one per
gold SQL shape, at most 40, only where the benchmark's own parse names the tables its dialect's
parse names, all in the database.

    python -m benchmarks.retrieval.derive_heldout4 SPIDER2 BEAVER SNAILS  # their git dirs
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

from benchmarks.retrieval.derive_heldout2 import entry_from_ddl, git_show
from benchmarks.retrieval.derive_heldout3 import pick, write_corpus

OUT = Path(__file__).resolve().parents[1] / "data" / "heldout4" / "heldout.json"
DATABASES_DIR = "spider2-lite/resource/databases"
# Spider 2.0-lite's databases of 3 to 60 tables (as their DDL.csv list them) with at least two
# questions whose gold SQL is published, picked on those counts alone. Left out: `covid19_usa`
# and `sdoh` (their JSON files hold 285 and 294 census tables), `new_york` (inside `new_york_plus`),
# `stackoverflow` (SEDE's Stack Exchange schema is in heldout3), `world_bank` and `CRYPTO` (a name
# in two of their datasets), `PANCANCER_ATLAS_1` and `PATENTS_GOOGLE` (copies of `pancancer_atlas_2`
# and `PATENTS`), `PATENTSVIEW` (59 tables: the corpus's real tables kept under 900, so that a
# 1,000-table run still adds generated ones).
SPIDER2 = {
    "bigquery": (
        "austin",
        "census_bureau_international",
        "cms_data",
        "covid19_symptom_search",
        "ecommerce",
        "ncaa_basketball",
        "new_york_plus",
        "pancancer_atlas_2",
        "san_francisco_plus",
        "the_met",
    ),
    "snowflake": ("ETHEREUM_BLOCKCHAIN", "GEO_OPENSTREETMAP", "GITHUB_REPOS", "IDC", "PATENTS", "THELOOK_ECOMMERCE"),
}
DIALECT = {"bigquery": "bigquery", "snowflake": "snowflake"}
SNAILS_FILE = "db/queries/codes_predictions/filtered_snails_schemas_and_questions_Native.json"
# Four of SNAILS's nine, picked on their table counts alone: NTSB and NYSED, and two of the
# National Park Service's, ASIS and ATBI (its other four share their naming); SBODemoUS comes
# split into modules there.
SNAILS = ("ASIS_20161108_HerpInv_Database", "ATBI", "NTSB", "NYSED_SRC2022")


def git_files(git_dir: str, path: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", "HEAD", path],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split("\n")


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def column_type(kind: str) -> str:
    """The type's head word (`STRUCT<...>`, `varchar(255) DEFAULT NULL`, `NUMBER(38,0)`)."""
    return kind.split("<")[0].split("(")[0].split()[0] if kind.strip() else "TEXT"


def spider2_schema(git_dir: str, engine: str, db: str) -> dict:
    """The database's tables from their JSON files, in path order, as SQLite reads them back."""
    statements = []
    for path in sorted(p for p in git_files(git_dir, f"{DATABASES_DIR}/{engine}/{db}") if p.endswith(".json")):
        table = json.loads(git_show(git_dir, path))
        columns = [f"{quoted(c)} {column_type(t)}" for c, t in zip(table["column_names"], table["column_types"])]
        statements.append(f"CREATE TABLE {quoted(table['table_name'])} ({', '.join(columns)})")
    return entry_from_ddl(db, statements)


def spider2(
    git_dir: str, dropped: Counter, chosen: dict[str, tuple[str, ...]] = SPIDER2
) -> tuple[list[dict], list[dict]]:
    """The `chosen` databases per engine (heldout5 picks others) and their questions with gold SQL."""
    gold = {Path(p).stem for p in git_files(git_dir, "spider2-lite/evaluation_suite/gold/sql") if p.endswith(".sql")}
    items = [json.loads(line) for line in git_show(git_dir, "spider2-lite/spider2-lite.jsonl").splitlines()]
    databases, questions = [], []
    for engine, names in chosen.items():
        for db in names:
            entry = spider2_schema(git_dir, engine, db)
            databases.append(entry)
            asked = [
                (
                    item["question"],
                    git_show(git_dir, f"spider2-lite/evaluation_suite/gold/sql/{item['instance_id']}.sql"),
                )
                for item in items
                if item["db"] == db and item["instance_id"] in gold and not item["instance_id"].startswith("local")
            ]
            questions += pick(entry, asked, DIALECT[engine], f"spider2-lite-{engine}", dropped)
    return databases, questions


def beaver(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    """BEAVER's `db#sep#table` entries as CREATE TABLE statements, each database's in file order."""
    statements: dict[str, list[str]] = {}
    for entry in json.loads(git_show(git_dir, "dev_tables.json")).values():
        parts = [f"{quoted(c)} {column_type(t)}" for c, t in zip(entry["column_names_original"], entry["column_types"])]
        if entry.get("primary_key"):
            parts.append(f"PRIMARY KEY ({', '.join(quoted(c) for c in entry['primary_key'])})")
        for key in entry.get("foreign_key") or []:
            target = key["referenced_table_name"].split("#sep#")[-1]
            parts.append(
                f"FOREIGN KEY ({quoted(key['column_name'])}) REFERENCES {quoted(target)} ({quoted(key['referenced_column_name'])})"
            )
        statements.setdefault(entry["db_id"], []).append(
            f"CREATE TABLE {quoted(entry['table_name_original'])} ({', '.join(parts)})"
        )
    asked = json.loads(git_show(git_dir, "dev_dw.json")) + json.loads(git_show(git_dir, "dev_nw.json"))
    databases, questions = [], []
    for db, ddl in statements.items():
        entry = entry_from_ddl(db, ddl)
        databases.append(entry)
        pairs = [(q["question"], q["sql"]) for q in asked if q["db_id"] == db]
        questions += pick(entry, pairs, "mysql", "beaver", dropped)
    return databases, questions


def snails(git_dir: str, dropped: Counter, chosen: tuple[str, ...] = SNAILS) -> tuple[list[dict], list[dict]]:
    """Each `chosen` database's schema as the union of the six-table schemas its questions come
    with (its tables and their columns in first-seen order; the example values left out), native
    names; a space in a database's name (`SBODemoUS-Human Resources`) becomes `_`."""
    items = json.loads(git_show(git_dir, SNAILS_FILE))
    databases, questions = [], []
    for db in chosen:
        asked = [item for item in items if item["db_id"] == db]
        tables: dict[str, dict[str, str]] = {}
        keys: dict[str, list[str]] = {}
        for item in asked:
            for table in item["schema"]["schema_items"]:
                columns = tables.setdefault(table["table_name"], {})
                for column, kind, key in zip(table["column_names"], table["column_types"], table["pk_indicators"]):
                    if column not in columns:
                        columns[column] = column_type(kind)
                        if key:
                            keys.setdefault(table["table_name"], []).append(quoted(column))
        statements = []
        for name, columns in tables.items():
            parts = [f"{quoted(c)} {kind}" for c, kind in columns.items()]
            parts += [f"PRIMARY KEY ({', '.join(keys[name])})"] if name in keys else []
            statements.append(f"CREATE TABLE {quoted(name)} ({', '.join(parts)})")
        entry = entry_from_ddl(db.replace(" ", "_"), statements)
        databases.append(entry)
        questions += pick(entry, [(q["question"], q["sql"]) for q in asked], "tsql", "snails", dropped)
    return databases, questions


def main() -> None:
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    dropped: Counter = Counter()
    parts = [spider2(sys.argv[1], dropped), beaver(sys.argv[2], dropped), snails(sys.argv[3], dropped)]
    databases = [d for found, _ in parts for d in found]
    questions = [q for _, asked in parts for q in asked]
    source = (
        "Spider 2.0-lite (Lei et al., ICLR 2025) BigQuery and Snowflake databases and questions with published gold SQL: "
        "https://github.com/xlang-ai/Spider2 ; BEAVER (Chen et al., 2024) dw and OpenStack databases: "
        "https://github.com/peterbaile/beaver ; SNAILS (Luoma and Kumar, SIGMOD 2025) ASIS, ATBI, NTSB and NYSED "
        "databases: https://github.com/KyleLuoma/SNAILS"
    )
    licence = "Spider 2.0: MIT; BEAVER: MIT; SNAILS: Apache 2.0; derived: schemas, questions and gold SQL only"
    write_corpus(OUT, source, licence, databases, questions, dropped)


if __name__ == "__main__":
    main()
