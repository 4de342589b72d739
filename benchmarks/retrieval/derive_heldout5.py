"""Derive benchmarks/data/heldout5/heldout.json: a fifth held-out corpus, read by nobody with the
ranker, for the report after issue 62's fifth pass (heldout4 became a tuning corpus).

Two public sources, the parts of them heldout4 left, read exactly as heldout4 reads them
(`derive_heldout4.spider2` and `snails`, given another selection): only schemas (Spider's
`tables.json` layout), questions and gold SQL, none of whose databases the tuning corpora hold.

- Spider 2.0-lite's BigQuery and Snowflake databases (github.com/xlang-ai/Spider2, MIT licence)
  that heldout4 did not take: those of at most 80 tables with at least one question whose gold
  SQL is published, less the ones listed under `SPIDER2` as left out (copies of heldout4's or of
  each other, shards), and less those none of whose questions passes the checks below.
- SNAILS (github.com/KyleLuoma/SNAILS, Apache 2.0): three of the National Park Service databases
  heldout4 left and SBODemoUS (SAP Business One's demo), which that file splits into nine modules,
  each kept as a database (their excerpts share no table name); each schema the union of its
  questions' six-table excerpts.

Questions are picked as heldout3's and heldout4's (`derive_heldout3.pick`): per database, in file
order, one per gold SQL shape, at most 40, only where the benchmark's own parse names the tables
its dialect's parse names, all in the database.

    python -m benchmarks.retrieval.derive_heldout5 SPIDER2 SNAILS  # their git dirs
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

from benchmarks.retrieval.derive_heldout3 import write_corpus
from benchmarks.retrieval.derive_heldout4 import snails, spider2

OUT = Path(__file__).resolve().parents[1] / "data" / "heldout5" / "heldout.json"
# Spider 2.0-lite's BigQuery and Snowflake databases of at most 80 tables (as their table files
# list them) with at least one published gold SQL, not in heldout4, picked on those counts and
# these exclusions alone (no ranking seen); `main` then leaves out those whose every question is
# dropped (`fhir_synthea`, `gbif`, `iowa_liquor_sales_plus`, `irs_990`, `GOOGLE_ADS`).
# Left out: heldout4's copies and supersets (`san_francisco`, inside san_francisco_plus;
# `ncaa_insights`, 10 of its 15 tables ncaa_basketball's; `GEO_OPENSTREETMAP_WORLDPOP`,
# `NOAA_GLOBAL_FORECAST_SYSTEM` and `GEO_OPENSTREETMAP_CENSUS_PLACES`, each holding
# GEO_OPENSTREETMAP's 10 tables; `GITHUB_REPOS_DATE`, GITHUB_REPOS's tables and day shards;
# `PANCANCER_ATLAS_1`, `PATENTS_GOOGLE`, `SAN_FRANCISCO_PLUS`). Each other's copies
# (`iowa_liquor_sales` and `IOWA_LIQUOR_SALES`, inside `iowa_liquor_sales_plus`;
# `epa_historical_air_quality`, inside `openaq`; `CENSUS_GALAXY__ZIP_CODE_TO_BLOCK_GROUP_SAMPLE`,
# the AIML sample's 8 tables; `US_ADDRESSES__POI` and `WEATHER__ENVIRONMENT`, sharing Cybersyn's
# geography tables with `FINANCE__ECONOMICS`). `stackoverflow` and `STACKOVERFLOW` (SEDE's
# schema, heldout3). Shards (`gnomAD`, a table per chromosome; `TCGA_HG19_DATA_V0` and
# `TCGA_HG38_DATA_V0`, DNA methylation per chromosome, 29 names shared; `CPTAC_PDC`, a proteome
# table per study; `fda`, census block groups per state). `world_bank`, `covid19_open_world_bank`,
# `covid19_jhu_world_bank` and `CRYPTO` (a name in two of their datasets).
SPIDER2 = {
    "bigquery": (
        "CYMBAL_INVESTMENTS",
        "bbc",
        "chicago",
        "covid19_nyt",
        "covid19_open_data",
        "dimensions_ai_covid19",
        "eclipse_megamovie",
        "fhir_synthea",
        "gbif",
        "iowa_liquor_sales_plus",
        "irs_990",
        "london",
        "nppes",
        "open_targets_genetics_1",
        "openaq",
        "usa_names",
    ),
    "snowflake": (
        "CENSUS_GALAXY__AIML_MODEL_DATA_ENRICHMENT_SAMPLE",
        "DEATH",
        "DEPS_DEV_V1",
        "FINANCE__ECONOMICS",
        "GLOBAL_WEATHER__CLIMATE_DATA_FOR_BI",
        "GOOGLE_ADS",
        "GOOGLE_TRENDS",
        "HUMAN_GENOME_VARIANTS",
        "META_KAGGLE",
        "PATENTSVIEW",
        "BRAZE_USER_EVENT_DEMO_DATASET",
    ),
}
# SNAILS's databases heldout4 did not take. Left out: `NorthernPlainsFireManagement` (25 of its 26
# tables are ATBI's, heldout4's, with the same columns).
SNAILS = (
    "CratersWildlifeObservations",
    "KlamathInvasiveSpecies",
    "PacificIslandLandbirds",
    "SBODemoUS-Banking",
    "SBODemoUS-Business Partners",
    "SBODemoUS-Finance",
    "SBODemoUS-General",
    "SBODemoUS-Human Resources",
    "SBODemoUS-Inventory and Production",
    "SBODemoUS-Reports",
    "SBODemoUS-Sales Opportunities",
    "SBODemoUS-Service",
)


def main() -> None:
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    dropped: Counter = Counter()
    parts = [spider2(sys.argv[1], dropped, SPIDER2), snails(sys.argv[2], dropped, SNAILS)]
    questions = [q for _, asked in parts for q in asked]
    asked = {q["db_id"] for q in questions}  # a database is here for its questions
    databases = [d for found, _ in parts for d in found if d["db_id"] in asked]
    print(
        "left out, every question dropped:",
        [d["db_id"] for found, _ in parts for d in found if d["db_id"] not in asked],
    )
    source = (
        "Spider 2.0-lite (Lei et al., ICLR 2025) BigQuery and Snowflake databases and questions with published gold SQL "
        "that heldout4 left: https://github.com/xlang-ai/Spider2 ; SNAILS (Luoma and Kumar, SIGMOD 2025) "
        "CratersWildlifeObservations, KlamathInvasiveSpecies, PacificIslandLandbirds and SBODemoUS's modules: "
        "https://github.com/KyleLuoma/SNAILS"
    )
    licence = "Spider 2.0: MIT; SNAILS: Apache 2.0; derived: schemas, questions and gold SQL only"
    write_corpus(OUT, source, licence, databases, questions, dropped)


if __name__ == "__main__":
    main()
