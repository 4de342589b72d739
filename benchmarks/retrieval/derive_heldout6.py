"""Derive benchmarks/data/heldout6/heldout.json: a sixth held-out corpus, read by nobody with the
ranker, for the report after issue 62's sixth pass (heldout5 became a tuning corpus).

One public source, only schemas (Spider's `tables.json` layout), questions and gold SQL:

- KaggleDBQA (github.com/Chia-Hsuan-Lee/KaggleDBQA, CC BY-SA 4.0): its eight real Kaggle
  databases (`KaggleDBQA_tables.json`, 17 tables; the descriptions, normalised names and value
  lists dropped) and every question of each (`examples/<db>.json`, the few-shot and test splits
  together; gold SQL in SQLite).

Questions are picked as heldout3's to heldout5's (`derive_heldout3.pick`): per database, in file
order, one per gold SQL shape, at most 40, only where the benchmark's own parse names the tables
SQLite's parse names, all in the database. The pool around them (heldout5's databases and the
distractors built from both) is `schema_corpora.load_corpus`'s, not this file's.

    python -m benchmarks.retrieval.derive_heldout6 KAGGLEDBQA  # its git dir
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from benchmarks.retrieval.derive_heldout2 import git_show
from benchmarks.retrieval.derive_heldout3 import pick, schema, write_corpus

OUT = Path(__file__).resolve().parents[1] / "data" / "heldout6" / "heldout.json"


def kaggledbqa(git_dir: str, dropped: Counter) -> tuple[list[dict], list[dict]]:
    """The databases in `KaggleDBQA_tables.json`'s order, each with its picked questions."""
    databases = schema(git_show(git_dir, "KaggleDBQA_tables.json"))
    questions = []
    for entry in databases:
        items = json.loads(git_show(git_dir, f"examples/{entry['db_id']}.json"))
        assert {q["db_id"] for q in items} == {entry["db_id"]}, entry["db_id"]
        questions += pick(entry, [(q["question"], q["query"]) for q in items], "sqlite", "kaggledbqa", dropped)
    return databases, questions


def main() -> None:
    dropped: Counter = Counter()
    databases, questions = kaggledbqa(sys.argv[1], dropped)
    source = (
        "KaggleDBQA (Lee, Polozov and Richardson, ACL 2021), KaggleDBQA_tables.json and examples/<db>.json: "
        "https://github.com/Chia-Hsuan-Lee/KaggleDBQA"
    )
    licence = (
        "CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); "
        "derived: schemas, questions and gold SQL only, shared under the same licence"
    )
    write_corpus(OUT, source, licence, databases, questions, dropped)


if __name__ == "__main__":
    main()
