"""Derive benchmarks/data/heldout2/heldout.json: a second held-out corpus, read by nobody while
the big-schema rules were tuned (issue 62's second pass tuned on BIRD mini-dev and Spider 1.0).

Two public sources, only schemas, questions and gold SQL, in Spider's `tables.json` layout:

- Spider 2.0-lite's SQLite databases (github.com/xlang-ai/Spider2, MIT licence): every database's
  `DDL.csv` (30 databases), and each `local*` question whose gold SQL the repository publishes.
- Advising (Finegan-Dollak et al., ACL 2018; github.com/jkkummerfeld/text2sql-data, CC BY 4.0):
  the schema from `advising-schema.csv` (MySQL `DESCRIBE` rows; `PRI` marks the key, no foreign
  keys declared) and one question per gold SQL: its first sentence of the `test` question split,
  else its first sentence, the variables put back as their example values.

    python -m benchmarks.retrieval.derive_heldout2 SPIDER2_GIT_DIR TEXT2SQL_DATA_GIT_DIR
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "heldout2" / "heldout.json"
SQLITE_DIR = "spider2-lite/resource/databases/sqlite"


def git_show(git_dir: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


def git_ls(git_dir: str, path: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"HEAD:{path}"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def entry_from_ddl(db_id: str, statements: list[str]) -> dict:
    """Run the CREATE statements in memory and read back columns, keys and foreign keys."""
    conn = sqlite3.connect(":memory:")
    for statement in statements:
        try:
            conn.execute(statement)
        except sqlite3.OperationalError:  # a keyword or odd characters as a bare name: quote them
            conn.execute(quoted_ddl(statement))
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    columns, types, keys, links, index = [[-1, "*"]], ["text"], [], [], {}
    for t, name in enumerate(names):
        for _, column, kind, _, _, pk in conn.execute("SELECT * FROM pragma_table_info(?)", (name,)):
            index[(name.lower(), column.lower())] = len(columns)
            columns.append([t, column])
            types.append(kind.lower() or "text")
            if pk:
                keys.append(len(columns) - 1)
    for name in names:
        for row in conn.execute("SELECT * FROM pragma_foreign_key_list(?)", (name,)):
            target, source, to = row[2], row[3], row[4]
            a, b = index.get((name.lower(), source.lower())), index.get((target.lower(), (to or "").lower()))
            if a is not None and b is not None:
                links.append([a, b])
    conn.close()
    return {
        "db_id": db_id,
        "table_names_original": names,
        "column_names_original": columns,
        "column_types": types,
        "primary_keys": keys,
        "foreign_keys": links,
    }


def quoted_ddl(statement: str) -> str:
    """A one-column-a-line CREATE TABLE with every name quoted (`qty_sold(kg) REAL`, `group TEXT`)."""
    head, body = statement.split("(", 1)
    table = head.split()[-1].strip('"`[]')
    parts = []
    for line in body.rsplit(")", 1)[0].splitlines():
        line = line.strip().rstrip(",").strip()
        if not line or line.split()[0].upper() in ("PRIMARY", "FOREIGN", "UNIQUE", "CONSTRAINT", "CHECK"):
            continue
        name, _, kind = line.rpartition(" ") if " " in line else (line, "", "")
        parts.append('"' + name.strip('"`[]').replace('"', '""') + '" ' + kind)
    return f'CREATE TABLE "{table}" ({", ".join(parts)})'


def spider2(git_dir: str) -> tuple[list[dict], list[dict]]:
    databases = []
    for db_id in git_ls(git_dir, SQLITE_DIR):
        rows = csv.DictReader(io.StringIO(git_show(git_dir, f"{SQLITE_DIR}/{db_id}/DDL.csv")))
        own = [r["DDL"] for r in rows if not r["table_name"].lower().startswith("sqlite_")]  # SQLite's own
        databases.append(entry_from_ddl(db_id, own))
    folder = {d["db_id"].lower().replace("_", "-"): d["db_id"] for d in databases}  # `DB_IMDB` is asked as `db-imdb`
    gold = set(git_ls(git_dir, "spider2-lite/evaluation_suite/gold/sql"))
    questions = []
    for line in git_show(git_dir, "spider2-lite/spider2-lite.jsonl").splitlines():
        item = json.loads(line)
        name = f"{item['instance_id']}.sql"
        if item["instance_id"].startswith("local") and name in gold:
            sql = git_show(git_dir, f"spider2-lite/evaluation_suite/gold/sql/{name}")
            questions.append(
                {
                    "db_id": folder[item["db"].lower().replace("_", "-")],
                    "question": item["question"],
                    "SQL": sql.strip(),
                    "source": "spider2-lite",
                }
            )
    return databases, questions


def advising(git_dir: str) -> tuple[dict, list[dict]]:
    statements: dict[str, list[str]] = {}
    keys: dict[str, list[str]] = {}
    for row in csv.reader(io.StringIO(git_show(git_dir, "data/advising-schema.csv"))):
        cells = [c.strip() for c in row]
        if len(cells) < 5 or cells[0] in ("-", "Table Name"):
            continue
        table, column, kind = cells[0].lower(), cells[1], cells[2].split("(")[0]  # `enum(...)` holds commas
        statements.setdefault(table, []).append(f'"{column}" {kind}')
        if cells[4] == "PRI":
            keys.setdefault(table, []).append(f'"{column}"')
    ddl = []
    for table, parts in statements.items():
        key = [f"PRIMARY KEY ({', '.join(keys[table])})"] if table in keys else []
        ddl.append(f'CREATE TABLE "{table}" ({", ".join(parts + key)})')
    questions = []
    for item in json.loads(git_show(git_dir, "data/advising.json")):
        sentences = item["sentences"]
        chosen = next((s for s in sentences if s["question-split"] == "test"), sentences[0])
        text, sql = chosen["text"], item["sql"][0]
        for name, value in sorted(chosen["variables"].items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"\b{re.escape(name)}\b", value, text)
            sql = re.sub(rf'"?\b{re.escape(name)}\b"?', "'" + value.replace("'", "''") + "'", sql)
        questions.append({"db_id": "advising", "question": text, "SQL": sql.rstrip(" ;"), "source": "advising"})
    return entry_from_ddl("advising", ddl), questions


def main() -> None:
    databases, questions = spider2(sys.argv[1])
    entry, asked = advising(sys.argv[2])
    derived = {
        "source": (
            "Spider 2.0-lite (Lei et al., 2024), SQLite databases' DDL.csv and local questions with published gold SQL: "
            "https://github.com/xlang-ai/Spider2 ; Advising (Finegan-Dollak et al., ACL 2018): "
            "https://github.com/jkkummerfeld/text2sql-data"
        ),
        "licence": "Spider 2.0: MIT; Advising: CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/); derived: schemas, questions and gold SQL only",
        "databases": databases + [entry],
        "questions": questions + asked,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(derived, separators=(",", ":"), ensure_ascii=False) + "\n")
    tables = sum(len(d["table_names_original"]) for d in derived["databases"])
    print(
        f"{OUT}: {len(derived['databases'])} databases, {tables} tables, {len(derived['questions'])} questions, {OUT.stat().st_size:,} bytes"
    )


if __name__ == "__main__":
    main()
