"""heldout3 (benchmarks/data/heldout3/) loads as the schema benchmarks read it, with the counts its
README states, and every question's gold tables (parsed as bench_schema_recall parses them) are in
its own database: a held-out figure on it can only miss for the ranking's sake. Nothing here ranks."""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

from benchmarks.retrieval.bench_schema_recall import gold_tables
from benchmarks.retrieval.bird_schemas import merged_schema, write_database
from benchmarks.retrieval.schema_corpora import CORPORA, SEEDS, load_corpus, mixed_distractors

TABLES = {
    "cordis_temporary": 19,
    "oncomx_v1_0_25_small": 25,
    "hack_zurich": 18,
    "mimic_iii": 17,
    "eicu": 10,
    "stackexchange": 29,
    "fiben": 152,
    "broker": 4,
    "car_dealership": 7,
    "derm_treatment": 8,
    "ewallet": 9,
}
QUESTIONS = {
    "cordis_temporary": 40,
    "oncomx_v1_0_25_small": 33,
    "hack_zurich": 2,
    "mimic_iii": 40,
    "eicu": 40,
    "stackexchange": 40,
    "fiben": 40,
    "broker": 31,
    "car_dealership": 31,
    "derm_treatment": 31,
    "ewallet": 30,
}


def test_heldout3_counts_and_its_own_seed() -> None:
    databases, questions, unrelated = load_corpus("heldout3")
    assert {db: len(tables) for db, tables in databases.items()} == TABLES
    assert sum(TABLES.values()) == 298
    assert Counter(q["db_id"] for q in questions) == QUESTIONS
    assert len(questions) == 358
    assert Counter(q["source"] for q in questions) == {
        "sciencebenchmark-cordis": 40,
        "sciencebenchmark-oncomx": 33,
        "valuenet-hack_zurich": 2,
        "ehrsql": 80,
        "sede": 40,
        "fiben": 40,
        "defog": 123,
    }
    assert len(unrelated) == 75  # BIRD mini-dev's tables, as for heldout2
    assert "heldout3" in CORPORA and SEEDS["heldout3"] == 63  # heldout4 has its own, 64


def test_every_gold_table_is_in_its_database() -> None:
    databases, questions, _ = load_corpus("heldout3")
    missing = []
    sizes: Counter[int] = Counter()
    for q in questions:
        gold = gold_tables(q["SQL"])
        sizes[len(gold)] += 1
        names = {t.name.lower() for t in databases[q["db_id"]]}
        if not gold or not gold <= names:
            missing.append((q["db_id"], q["question"], sorted(gold - names)))
    assert missing == []
    assert sizes == {1: 121, 2: 156, 3: 43, 4: 28, 5: 4, 6: 2, 7: 3, 8: 1}  # joins too, not one-table questions only


def test_each_database_merges_and_writes_at_1000_tables(tmp_path: Path) -> None:
    """The benchmark's set-up, not its ranking: each question's database merged with the other
    ten, BIRD's tables and the seed-63 distractors writes to SQLite (heldout2's first run crashed
    here on a reserved `sqlite_` name), every table name unique."""
    databases, _, unrelated = load_corpus("heldout3")
    real = sum(len(tables) for tables in databases.values()) + len(unrelated)
    extra = unrelated + mixed_distractors(databases, 1000 - real, SEEDS["heldout3"])
    for db_id in databases:
        merged = merged_schema(databases, db_id, extra)
        assert len(merged) == 1000 and len({t.name.lower() for t in merged}) == 1000
        with closing(sqlite3.connect(write_database(merged, tmp_path / f"{db_id}.sqlite"))) as conn:
            assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone() == (1000,)
