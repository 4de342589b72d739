"""BIRD mini-dev schemas as SQLite files (no rows: the shared data has no BIRD databases), alone
or merged into one big schema with the other ten and generated look-alike distractor tables.
Used by retrieval/bench_schema_recall.py and tests/test_big_schemas.py."""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

BIRD_DIR = Path("/work/shared/data/bird_minidev")
SUFFIXES = (
    "archive", "backup", "staging", "old", "tmp", "copy", "hist", "v2", "2019", "2020", "2021",
    "2022", "audit", "snapshot", "raw", "clean", "daily", "monthly", "ext", "import", "log", "stats",
)  # fmt: skip
DOMAINS = ("sales", "hr", "crm", "erp", "finance", "inventory", "marketing", "support", "logistics", "billing")
ENTITIES = (
    "orders", "customers", "invoices", "payments", "products", "employees", "accounts", "events",
    "tickets", "shipments", "contracts", "leads", "vendors", "assets", "transactions", "users",
)  # fmt: skip
GENERIC_COLUMNS = (
    "id", "name", "code", "status", "type", "date", "created_at", "updated_at", "amount", "price",
    "quantity", "country", "city", "region", "description", "category", "score", "rate", "total",
    "email", "phone", "address", "title", "level", "year", "month", "owner", "source", "note", "flag",
)  # fmt: skip
SHARDS = 12  # generic tables come in shards of this many, with the same columns


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, type)
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[tuple[str, str, str], ...] = ()  # (column, other table, other column)


def load_bird(folder: Path = BIRD_DIR) -> tuple[dict[str, list[Table]], list[dict]]:
    """The eleven databases' tables (from dev_tables.json) and the 500 questions."""
    databases = {}
    for entry in json.loads((folder / "dev_tables.json").read_text()):
        databases[entry["db_id"]] = _tables(entry)
    questions = json.loads((folder / "mini_dev_sqlite.json").read_text())
    return databases, questions


def _tables(entry: dict) -> list[Table]:
    names = entry["table_names_original"]
    columns: list[list[tuple[str, str]]] = [[] for _ in names]
    owner = {}
    for index, ((table, column), kind) in enumerate(
        zip(entry["column_names_original"], entry["column_types"], strict=True)
    ):
        if table >= 0:
            columns[table].append((column, kind.upper()))
            owner[index] = (table, column)
    keys: list[list[str]] = [[] for _ in names]
    for key in entry["primary_keys"]:
        for index in key if isinstance(key, list) else [key]:
            keys[owner[index][0]].append(owner[index][1])
    links: list[list[tuple[str, str, str]]] = [[] for _ in names]
    for source, target in entry["foreign_keys"]:
        (t1, c1), (t2, c2) = owner[source], owner[target]
        links[t1].append((c1, names[t2], c2))
    return [Table(n, tuple(columns[i]), tuple(keys[i]), tuple(links[i])) for i, n in enumerate(names)]


def create_statement(table: Table) -> str:
    quoted = lambda n: '"' + n.replace('"', '""') + '"'
    parts = [f"{quoted(name)} {kind}" for name, kind in table.columns]
    if table.primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(quoted(c) for c in table.primary_key)})")
    parts += [f"FOREIGN KEY ({quoted(c)}) REFERENCES {quoted(t)} ({quoted(o)})" for c, t, o in table.foreign_keys]
    return f"CREATE TABLE {quoted(table.name)} (\n    " + ",\n    ".join(parts) + "\n)"


def write_database(tables: list[Table], out: Path) -> Path:
    out.unlink(missing_ok=True)
    conn = sqlite3.connect(out, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")  # one transaction: 5,000 CREATE statements each committed took a minute
    for table in tables:
        conn.execute(create_statement(table))
    conn.execute("COMMIT")
    conn.close()
    return out


def distractors(databases: dict[str, list[Table]], count: int, seed: int = 55) -> list[Table]:
    """`count` generated tables: half look-alikes of the real tables (a real name with a suffix
    such as `_archive` or `_2019`, most of its columns, a few generic ones), half generic
    enterprise tables in shards of `SHARDS` with the same columns (`sales_orders_7`)."""
    rng = random.Random(seed)
    real = [t for tables in databases.values() for t in tables]
    taken = {t.name.lower() for t in real}
    made: list[Table] = []

    def add(table: Table) -> None:
        if table.name.lower() not in taken and len(made) < count:
            taken.add(table.name.lower())
            made.append(table)

    while len(made) < count // 2:
        source = rng.choice(real)
        keep = [c for c in source.columns if rng.random() < 0.7] or list(source.columns[:1])
        used = {c.lower() for c, _ in keep}
        extra = [(c, "TEXT") for c in rng.sample(GENERIC_COLUMNS, rng.randint(0, 3)) if c.lower() not in used]
        name = f"{source.name}_{rng.choice(SUFFIXES)}"
        if name.lower() in taken:  # real names x suffixes run out before 5,000 tables
            name = f"{name}_{rng.randint(2, 99)}"
        add(Table(name, tuple(keep + extra)))
    while len(made) < count:
        domain, entity = rng.choice(DOMAINS), rng.choice(ENTITIES)
        columns = tuple((c, "TEXT") for c in rng.sample(GENERIC_COLUMNS, rng.randint(5, 20)))
        stem = f"{domain}_{entity}_{rng.randint(1, 99)}"
        for shard in range(1, SHARDS + 1):
            add(Table(f"{stem}_{shard}", columns))
    return made


def merged_schema(databases: dict[str, list[Table]], target: str, extra: list[Table], seed: int = 55) -> list[Table]:
    """The target database's tables as they are, the other ten's (prefixed with their database
    where a name is taken), and the distractors; in a shuffled creation order."""
    tables = list(databases[target])
    taken = {t.name.lower() for t in tables}
    for db_id, others in databases.items():
        if db_id == target:
            continue
        renamed = {}
        prefix = f"db_{db_id}" if db_id.lower().startswith("sqlite_") else db_id  # SQLite reserves `sqlite_`
        for t in others:  # a taken name gets its database's prefix (and a number, where that is taken too)
            name = t.name if t.name.lower() not in taken else f"{prefix}_{t.name}"
            number = 2
            while name.lower() in taken:
                name, number = f"{prefix}_{t.name}_{number}", number + 1
            renamed[t.name] = name
            taken.add(name.lower())
        for table in others:
            links = tuple((c, renamed.get(t, t), o) for c, t, o in table.foreign_keys)
            tables.append(Table(renamed[table.name], table.columns, table.primary_key, links))
    tables += [t for t in extra if t.name.lower() not in taken]
    random.Random(seed).shuffle(tables)
    return tables
