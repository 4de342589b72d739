"""The held-out corpora (benchmarks/data/heldout3/ to heldout6/) load as the schema benchmarks read
them, with the counts their READMEs state, and every question's gold tables (parsed as
bench_schema_recall parses them) are in its own database: a held-out figure on them can only
miss for the ranking's sake. Nothing here ranks."""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from benchmarks.retrieval.bench_schema_recall import gold_tables
from benchmarks.retrieval.bird_schemas import merged_schema, write_database
from benchmarks.retrieval.schema_corpora import CORPORA, SEEDS, load_corpus, mixed_distractors

CORPUS = {
    "heldout3": {
        "tables": {
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
        },
        "questions": {
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
        },
        "sources": {
            "sciencebenchmark-cordis": 40,
            "sciencebenchmark-oncomx": 33,
            "valuenet-hack_zurich": 2,
            "ehrsql": 80,
            "sede": 40,
            "fiben": 40,
            "defog": 123,
        },
        "gold_sizes": {1: 121, 2: 156, 3: 43, 4: 28, 5: 4, 6: 2, 7: 3, 8: 1},  # joins, not one-table questions only
    },
    "heldout4": {
        "tables": {
            "austin": 10,
            "census_bureau_international": 8,
            "cms_data": 52,
            "covid19_symptom_search": 6,
            "ecommerce": 15,
            "ncaa_basketball": 10,
            "new_york_plus": 43,
            "pancancer_atlas_2": 21,
            "san_francisco_plus": 19,
            "the_met": 3,
            "ETHEREUM_BLOCKCHAIN": 7,
            "GEO_OPENSTREETMAP": 10,
            "GITHUB_REPOS": 6,
            "IDC": 16,
            "PATENTS": 3,
            "THELOOK_ECOMMERCE": 7,
            "csail_stata_nova": 109,
            "csail_stata_glance": 20,
            "csail_stata_neutron": 175,
            "csail_stata_cinder": 25,
            "keystone": 37,
            "dw": 97,
            "ASIS_20161108_HerpInv_Database": 34,
            "ATBI": 26,
            "NTSB": 38,
            "NYSED_SRC2022": 27,
        },
        "questions": {
            "austin": 4,
            "census_bureau_international": 3,
            "cms_data": 5,
            "covid19_symptom_search": 2,
            "ecommerce": 2,
            "ncaa_basketball": 2,
            "new_york_plus": 4,
            "pancancer_atlas_2": 1,
            "san_francisco_plus": 4,
            "the_met": 3,
            "ETHEREUM_BLOCKCHAIN": 2,
            "GEO_OPENSTREETMAP": 3,
            "GITHUB_REPOS": 7,
            "IDC": 7,
            "PATENTS": 9,
            "THELOOK_ECOMMERCE": 5,
            "csail_stata_nova": 29,
            "csail_stata_glance": 5,
            "csail_stata_neutron": 23,
            "csail_stata_cinder": 2,
            "keystone": 8,
            "dw": 40,
            "ASIS_20161108_HerpInv_Database": 40,
            "ATBI": 40,
            "NTSB": 40,
            "NYSED_SRC2022": 40,
        },
        "sources": {"spider2-lite-bigquery": 30, "spider2-lite-snowflake": 33, "beaver": 107, "snails": 160},
        "gold_sizes": {1: 127, 2: 82, 3: 50, 4: 36, 5: 14, 6: 5, 7: 3, 8: 1, 9: 2, 10: 7, 11: 1, 12: 2},
    },
    "heldout5": {
        "tables": {
            "CYMBAL_INVESTMENTS": 1,
            "bbc": 1,
            "chicago": 2,
            "covid19_nyt": 4,
            "covid19_open_data": 1,
            "dimensions_ai_covid19": 6,
            "eclipse_megamovie": 7,
            "london": 2,
            "nppes": 20,
            "open_targets_genetics_1": 13,
            "openaq": 33,
            "usa_names": 2,
            "CENSUS_GALAXY__AIML_MODEL_DATA_ENRICHMENT_SAMPLE": 8,
            "DEATH": 28,
            "DEPS_DEV_V1": 10,
            "FINANCE__ECONOMICS": 50,
            "GLOBAL_WEATHER__CLIMATE_DATA_FOR_BI": 3,
            "GOOGLE_TRENDS": 4,
            "HUMAN_GENOME_VARIANTS": 8,
            "META_KAGGLE": 29,
            "PATENTSVIEW": 59,
            "BRAZE_USER_EVENT_DEMO_DATASET": 62,
            "CratersWildlifeObservations": 13,
            "KlamathInvasiveSpecies": 18,
            "PacificIslandLandbirds": 21,
            "SBODemoUS-Banking": 28,
            "SBODemoUS-Business_Partners": 17,
            "SBODemoUS-Finance": 29,
            "SBODemoUS-General": 33,
            "SBODemoUS-Human_Resources": 23,
            "SBODemoUS-Inventory_and_Production": 24,
            "SBODemoUS-Reports": 22,
            "SBODemoUS-Sales_Opportunities": 15,
            "SBODemoUS-Service": 18,
        },
        "questions": {
            "CYMBAL_INVESTMENTS": 2,
            "bbc": 1,
            "chicago": 5,
            "covid19_nyt": 1,
            "covid19_open_data": 1,
            "dimensions_ai_covid19": 1,
            "eclipse_megamovie": 1,
            "london": 2,
            "nppes": 1,
            "open_targets_genetics_1": 1,
            "openaq": 1,
            "usa_names": 1,
            "CENSUS_GALAXY__AIML_MODEL_DATA_ENRICHMENT_SAMPLE": 1,
            "DEATH": 1,
            "DEPS_DEV_V1": 1,
            "FINANCE__ECONOMICS": 2,
            "GLOBAL_WEATHER__CLIMATE_DATA_FOR_BI": 1,
            "GOOGLE_TRENDS": 1,
            "HUMAN_GENOME_VARIANTS": 1,
            "META_KAGGLE": 1,
            "PATENTSVIEW": 3,
            "BRAZE_USER_EVENT_DEMO_DATASET": 1,
            "CratersWildlifeObservations": 40,
            "KlamathInvasiveSpecies": 40,
            "PacificIslandLandbirds": 40,
            "SBODemoUS-Banking": 8,
            "SBODemoUS-Business_Partners": 7,
            "SBODemoUS-Finance": 6,
            "SBODemoUS-General": 8,
            "SBODemoUS-Human_Resources": 20,
            "SBODemoUS-Inventory_and_Production": 8,
            "SBODemoUS-Reports": 10,
            "SBODemoUS-Sales_Opportunities": 10,
            "SBODemoUS-Service": 9,
        },
        "sources": {"spider2-lite-bigquery": 18, "spider2-lite-snowflake": 13, "snails": 206},
        "gold_sizes": {1: 138, 2: 68, 3: 18, 4: 10, 5: 1, 8: 1, 10: 1},
    },
}
KAGGLEDBQA = {  # heldout6's own databases: tables, questions (its README's table)
    "WorldSoccerDataBase": (2, 18),
    "Pesticide": (2, 40),
    "USWildFires": (1, 30),
    "GeoNuclearData": (1, 24),
    "WhatCDHipHop": (2, 33),
    "TheHistoryofBaseball": (5, 36),
    "StudentMathScore": (3, 25),
    "GreaterManchesterCrime": (1, 20),
}
CORPUS["heldout6"] = {  # KaggleDBQA's databases, then heldout5's as further real ones without questions
    "tables": {db: tables for db, (tables, _) in KAGGLEDBQA.items()} | CORPUS["heldout5"]["tables"],
    "questions": {db: asked for db, (_, asked) in KAGGLEDBQA.items()},
    "sources": {"kaggledbqa": 226},
    "gold_sizes": {1: 183, 2: 37, 3: 6},
}
TOTALS = {
    "heldout3": (298, 358),
    "heldout4": (824, 330),
    "heldout5": (614, 237),
    "heldout6": (17 + 614, 226),
}  # tables, questions (the READMEs' figures)


def test_each_corpus_has_its_own_seed() -> None:
    assert SEEDS == {
        "bird": 62,
        "spider": 62,
        "heldout2": 62,
        "heldout3": 63,
        "heldout4": 64,
        "heldout5": 65,
        "heldout6": 66,
    }
    assert set(CORPUS) < set(CORPORA)


@pytest.mark.parametrize("corpus", sorted(CORPUS))
def test_counts(corpus: str) -> None:
    databases, questions, unrelated = load_corpus(corpus)
    spec = CORPUS[corpus]
    assert {db: len(tables) for db, tables in databases.items()} == spec["tables"]
    assert (sum(spec["tables"].values()), len(questions)) == TOTALS[corpus]
    assert Counter(q["db_id"] for q in questions) == spec["questions"]
    assert Counter(q["source"] for q in questions) == spec["sources"]
    assert len(unrelated) == 75  # BIRD mini-dev's tables, as for heldout2


@pytest.mark.parametrize("corpus", sorted(CORPUS))
def test_every_gold_table_is_in_its_database(corpus: str) -> None:
    databases, questions, _ = load_corpus(corpus)
    missing = []
    sizes: Counter[int] = Counter()
    for q in questions:
        gold = gold_tables(q["SQL"])
        sizes[len(gold)] += 1
        names = {t.name.lower() for t in databases[q["db_id"]]}
        if not gold or not gold <= names:
            missing.append((q["db_id"], q["question"], sorted(gold - names)))
    assert missing == []
    assert sizes == CORPUS[corpus]["gold_sizes"]


@pytest.mark.parametrize("corpus", sorted(CORPUS))
def test_each_database_merges_and_writes_at_1000_tables(corpus: str, tmp_path: Path) -> None:
    """The benchmark's set-up, not its ranking: each question's database merged with the other
    ones, BIRD's tables and the corpus's own distractors writes to SQLite (heldout2's first run
    crashed here on a reserved `sqlite_` name), every table name unique (heldout4's 824 real
    tables and BIRD's 75 leave 101 generated ones at 1,000; heldout5's 614, 311; heldout6's 17
    and heldout5's 614, 294)."""
    databases, _, unrelated = load_corpus(corpus)
    real = sum(len(tables) for tables in databases.values()) + len(unrelated)
    extra = unrelated + mixed_distractors(databases, 1000 - real, SEEDS[corpus])
    for db_id in databases:
        merged = merged_schema(databases, db_id, extra)
        assert len(merged) == 1000 and len({t.name.lower() for t in merged}) == 1000
        with closing(sqlite3.connect(write_database(merged, tmp_path / f"{db_id}.sqlite"))) as conn:
            assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone() == (1000,)


def test_heldout6_pools_kaggledbqa_with_heldout5() -> None:
    """heldout6's pool as its README fixed it: KaggleDBQA's 8 databases first, heldout5's 34 as
    they are in heldout5 (none of their questions), and at 1,000 tables every KaggleDBQA table
    under its own name and columns (WhatCDHipHop's `tags` keeps its name, heldout5's META_KAGGLE
    `TAGS` is the one renamed) with generated distractors still among them."""
    databases, questions, unrelated = load_corpus("heldout6")
    heldout5, _, _ = load_corpus("heldout5")
    assert list(databases)[: len(KAGGLEDBQA)] == list(KAGGLEDBQA)
    assert {db: databases[db] for db in list(databases)[len(KAGGLEDBQA) :]} == heldout5
    assert {q["db_id"] for q in questions} == set(KAGGLEDBQA)
    real = sum(len(tables) for tables in databases.values()) + len(unrelated)
    generated = mixed_distractors(databases, 1000 - real, SEEDS["heldout6"])
    assert (real, len(generated)) == (17 + 614 + 75, 294)
    for db_id in KAGGLEDBQA:
        merged = {t.name: t for t in merged_schema(databases, db_id, unrelated + generated)}
        assert all(merged[t.name] == t for t in databases[db_id] + unrelated + generated)
    merged = {t.name: t for t in merged_schema(databases, "WhatCDHipHop", unrelated + generated)}
    assert [c for c, _ in merged["tags"].columns] == ["index", "id", "tag"]
    assert merged["META_KAGGLE_TAGS"].columns == next(t for t in heldout5["META_KAGGLE"] if t.name == "TAGS").columns
