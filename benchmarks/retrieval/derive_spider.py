"""Derive benchmarks/data/spider/heldout.json from Spider 1.0's `tables.json` and `dev.json`.

Only what the schema-recall benchmark needs: every database's tables, columns, types, keys and
foreign keys (Spider's own `tables.json` layout, the display names dropped), and the dev set's
questions with their gold SQL. Spider (Yu et al., EMNLP 2018, https://yale-lily.github.io/spider)
is distributed under CC BY-SA 4.0; the derived file keeps that licence and this attribution.

    python -m benchmarks.retrieval.derive_spider TABLES_JSON DEV_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "spider" / "heldout.json"
KEEP = ("db_id", "table_names_original", "column_names_original", "column_types", "primary_keys", "foreign_keys")


def main() -> None:
    tables, dev = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    derived = {
        "source": "Spider 1.0 (Yu et al., EMNLP 2018), tables.json and dev.json: https://yale-lily.github.io/spider",
        "licence": "CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); derived: fields dropped only",
        "databases": [{k: entry[k] for k in KEEP} for entry in tables],
        "questions": [{"db_id": q["db_id"], "question": q["question"], "SQL": q["query"]} for q in dev],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(derived, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(tables)} databases, {len(dev)} questions, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
