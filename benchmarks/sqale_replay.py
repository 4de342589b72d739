"""Rebuild the databases of the three published SQaLe episodes, and read the published text.

The SQaLe page (`edge_sql/data/sqale_published/`) publishes three real episodes of the model in its
training environment: every tool call and, for most, the tool's output. This module builds, for
each episode, a real SQLite file on which those calls give the published outputs:

- tables from the published `describe_table` outputs, written multi-line the way `sqlite_master`
  holds real DDL (the published `SELECT * FROM sqlite_master` rows show the indentation);
- rows from the published `SELECT * FROM t LIMIT k` and `sample_rows` outputs (`None` is NULL);
  where the page clipped a line with `…`, the rest of that line is ours (`COMPLETIONS`);
- filler rows where the page publishes counts or aggregates (216 AlertLogs rows, 26 of them by
  user 5; the devices and logs behind every published per-device count);
- every other table the episode's schema lists, so `list_tables` names the published table set.

Whatever the page does not publish (clipped tails, columns of tables never described, filler
values) is invented here, deterministically, and marked as such. `compare_to_published` and
`parse_published_result` hold the page's clipping rules in one place.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqale_published import PUBLISHED_JSON, call_args, episode, load_episodes, published_calls  # noqa: F401 (re-exported)

CLIP = "\u2026"  # the page's mark for a clipped line, or (alone on a line) for cut lines
MORE_ROWS_NOTE = re.compile(r"\.\.\. \(showing first \d+ rows; more rows exist\)\Z")
_SELECT_FIRST_ROWS = re.compile(r"SELECT \* FROM (\w+) LIMIT (\d+)\Z")


# -- the published data: benchmarks/sqale_published.py (shared with bench_speculative) ---------


@dataclass(frozen=True)
class PublishedResult:
    """A published query result: header, rows (cells as text), and what the page says is missing.

    `clipped[i]` says row i's line was cut by the page (its last cell is a prefix, later cells
    are gone); `more_rows` is the tool's own note; `lines_cut` is the page's `…` line.
    """

    columns: list[str]
    rows: list[list[str]]
    clipped: list[bool]
    more_rows: bool
    lines_cut: bool


def parse_published_result(text: str) -> PublishedResult:
    lines = text.split("\n")
    columns = lines[0].split(" | ")
    rows: list[list[str]] = []
    clipped: list[bool] = []
    more_rows = lines_cut = False
    for line in lines[1:]:
        if line == CLIP:
            lines_cut = True
            break
        if MORE_ROWS_NOTE.match(line):
            more_rows = True
            break
        is_clipped = line.endswith(CLIP)
        rows.append((line[:-1] if is_clipped else line).split(" | "))
        clipped.append(is_clipped)
    return PublishedResult(columns, rows, clipped, more_rows, lines_cut)


def compare_to_published(ours: str, published: str) -> list[str]:
    """What in `ours` contradicts the published text, one message per line (empty: it matches).

    A published line ending in `…` must be a strict prefix of our line; a line that is only `…`
    means the page cut further lines (we must have at least one); every other line must be
    equal byte for byte, and without a `…` line the line counts must be equal.
    """
    our_lines, pub_lines = ours.split("\n"), published.split("\n")
    problems = []
    for i, pub in enumerate(pub_lines):
        if pub == CLIP:
            if len(our_lines) <= i:
                problems.append(f"line {i + 1}: the page cut lines here, ours ends before")
            return problems
        if i >= len(our_lines):
            problems.append(f"line {i + 1}: missing, published {pub!r}")
            continue
        mine = our_lines[i]
        if pub.endswith(CLIP):
            prefix = pub[:-1]
            if not (mine.startswith(prefix) and len(mine) > len(prefix)):
                problems.append(f"line {i + 1}: {mine!r} does not extend the clipped {pub!r}")
        elif mine != pub:
            problems.append(f"line {i + 1}: {mine!r} != published {pub!r}")
    if len(our_lines) > len(pub_lines):
        extra = our_lines[len(pub_lines) :]
        problems.append(f"{len(extra)} line(s) more than published: {extra!r}")
    return problems


def render_cell(value: Any) -> str:
    """A cell as the published outputs show it: NULL as `None`, a newline as one space."""
    return "None" if value is None else str(value).replace("\n", " ")


def one_line_ddl(sql: str) -> str:
    """DDL as the published `describe_table` outputs show it: whitespace runs as one space, no
    space after `(` or before `)`."""
    text = re.sub(r"\s+", " ", sql).strip()
    return text.replace("( ", "(").replace(" )", ")")


def multiline_ddl(one_line: str, indent: int) -> str:
    """`CREATE TABLE t (a, b)` written as `sqlite_master` holds hand-written DDL: one column or
    constraint a line, indented, closing parenthesis on its own line."""
    head, _, rest = one_line.partition("(")
    body = rest[: rest.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    parts.append(body[start:].strip())
    pad = " " * indent
    return head.rstrip() + " (\n" + ",\n".join(pad + part for part in parts) + "\n)"


def published_ddl(ep: dict[str, Any]) -> dict[str, str]:
    """Table name -> the one-line DDL every published `describe_table` output shows for it."""
    found: dict[str, str] = {}
    for _, _, call in published_calls(ep):
        if call["tool"] == "describe_table" and call["out"] is not None:
            table = call_args("describe_table", call["args"])["table_name"]
            assert found.setdefault(table, call["out"]) == call["out"], f"two DDLs for {table}"
    return found


def published_first_rows(ep: dict[str, Any]) -> dict[str, list[tuple[str, bool]]]:
    """Table -> its first rows as published lines (text, clipped?), merged over every
    `SELECT * FROM t LIMIT k` and `sample_rows` output; an unclipped line wins over a clipped one.
    """
    tables: dict[str, list[tuple[str, bool]]] = {}
    for _, _, call in published_calls(ep):
        if call["out"] is None:
            continue
        if call["tool"] == "sample_rows":
            table = call_args("sample_rows", call["args"])["table_name"]
        elif call["tool"] == "run_query" and (m := _SELECT_FIRST_ROWS.match(call["args"])):
            table = m.group(1)
        else:
            continue
        if table == "sqlite_master":
            continue
        result = parse_published_result(call["out"])
        rows = tables.setdefault(table, [])
        for i, (cells, clipped) in enumerate(zip(result.rows, result.clipped)):
            line = " | ".join(cells)
            if i == len(rows):
                rows.append((line, clipped))
            elif rows[i][1] and not clipped:
                assert line.startswith(rows[i][0]), f"{table} row {i}: outputs disagree"
                rows[i] = (line, False)
            elif not clipped:
                assert rows[i][0] == line, f"{table} row {i}: outputs disagree"
    return tables


# -- what the page does not publish: ours, deterministic -------------------------------------

# The tails of clipped published lines: table -> row index -> text after the published prefix.
COMPLETIONS: dict[str, dict[int, str]] = {
    "shipping_methods": {
        0: "d States. | 5.99 | 6 | 2020-01-15 09:00:00 | 2021-03-02 10:15:00",
        1: "bs. | 14.5 | 2 | 2020-01-15 09:00:00 | 2021-07-19 16:40:12",
        2: "nce support. | 29.99 | 1 | 2020-02-03 11:30:00 | 2021-05-11 08:05:33",
        3: "ted delivery in 7-10 days. | 3.49 | 9 | 2020-02-03 11:30:00 | 2020-12-01 14:22:09",
        4: " for cross-border parcels. | 24.75 | 12 | 2020-03-20 13:45:00 | 2021-08-30 19:01:47",
    },
    "devices": {0: "_2208", 3: "yne_6021"},
    "diagnostic_request_logs": {
        0: '3 | {"cpu": 41, "mem": 63} | 2022-03-26 07:24:19',
        1: "7 | None | None",
        2: ' | {"cpu": 12, "mem": 30} | 2023-02-10 22:51:52',
        3: '1 | {"cpu": 77, "mem": 81} | 2023-10-19 05:35:49',
        4: "2 | None | 2023-05-04 04:32:10",
        5: '5 | {"cpu": 5, "mem": 22} | 2021-06-03 09:36:07',
    },
}


@dataclass(frozen=True)
class SchemaPlan:
    """How one episode's schema is laid out: the tables created first (their order shows in
    the published `sqlite_master` rows), DDL for tables the page never describes in full, the
    indentation each table's DDL has in `sqlite_master`, and the filler rows."""

    first_tables: tuple[str, ...]
    invented_ddl: dict[str, str]
    indent: dict[str, int]
    filler: Callable[[random.Random], dict[str, list[tuple]]]


def _timestamp(rng: random.Random, year_from: int = 2020, year_to: int = 2023) -> str:
    return (
        f"{rng.randint(year_from, year_to)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    )


def _hex(rng: random.Random, n: int, first: str = "0123456789abcdef") -> str:
    return rng.choice(first) + "".join(rng.choice("0123456789abcdef") for _ in range(n - 1))


def _device_uuid(rng: random.Random) -> str:
    """The page's device id shape (8-4-4-5-16 hex); never below `102e9502-...` (see below)."""
    return "-".join([_hex(rng, 8, "23456789abcdef"), _hex(rng, 4), _hex(rng, 4), _hex(rng, 5), _hex(rng, 16)])


def _log_uuid(rng: random.Random) -> str:
    return "-".join([_hex(rng, 8), _hex(rng, 4), "4" + _hex(rng, 3), _hex(rng, 4), _hex(rng, 12)])


def _shipping_filler(rng: random.Random) -> dict[str, list[tuple]]:
    """More methods and rate rows than `LIMIT 10` shows (the note says more rows exist); no
    other row has PRIORITY_INTL at weight 48.64, so the final query returns the one row."""
    methods = [
        (
            "SHM-1005",
            "Two-Day Select",
            "Two-Day Select delivers within two business days.",
            9.99,
            2,
            "2020-04-01 10:00:00",
            "2021-01-05 12:00:00",
        ),
        (
            "SHM-1006",
            "Freight Pallet",
            "Freight Pallet handles palletised heavy goods.",
            79.5,
            5,
            "2020-04-01 10:00:00",
            "2021-02-11 09:30:00",
        ),
        (
            "SHM-1007",
            "Local Courier",
            "Same-day Local Courier within city limits.",
            11.25,
            1,
            "2020-06-12 08:00:00",
            "2021-06-12 08:00:00",
        ),
    ]
    codes = ["STANDARD_GROUND", "EXPRESS_2DAY", "OVERNIGHT_AIR", "ECONOMY_MAIL", "PRIORITY_INTL"]
    rates = []
    for n in range(6, 41):
        code = codes[(n - 1) % len(codes)]
        weight = round(rng.uniform(1, 50), 2)
        if code == "PRIORITY_INTL" and weight == 48.64:
            weight = 48.65
        base = round(8 + weight * 0.3, 2)
        final = round(base * rng.uniform(0.5, 3.0), 2)
        rates.append((f"SRC-{n:06d}", code, weight, base, final, _timestamp(rng, 2021, 2022)))
    return {"shipping_methods": methods, "shipping_rate_calculations": rates}


ALERT_LOG_ROWS = 216  # published: SELECT COUNT(*) FROM AlertLogs
ALERT_LOGS_BY_USER_5 = 26  # published: ... WHERE userId = 5


def _alert_filler(rng: random.Random) -> dict[str, list[tuple]]:
    """AlertLogs up to 216 rows, 26 of them (the 2 published ones included) by user 5; users
    and alerts for every id the logs use."""
    published_by_5 = 2  # rows 2 and 4 of the published first six
    first_filler_id = 7
    ids = range(first_filler_id, ALERT_LOG_ROWS + 1)
    by_5 = set(rng.sample(list(ids), ALERT_LOGS_BY_USER_5 - published_by_5))
    others = [u for u in range(1, 31) if u != 5]
    logs = [
        (
            i,
            rng.randint(1, 10),
            5 if i in by_5 else rng.choice(others),
            None if rng.random() < 0.3 else _timestamp(rng, 2021, 2022),
        )
        for i in ids
    ]
    users = [(i, None if i % 3 else f"user_{i:03d}", f"user{i:03d}@example.com", _timestamp(rng)) for i in range(6, 31)]
    alerts = [(i,) for i in range(1, 11)]
    return {"AlertLogs": logs, "users": users, "aler": alerts}


# Devices the published counts need (name -> diagnostic_request_logs rows):
FIRMWARE_DEVICES = {  # in the order their firmware-updater rows were inserted (published order)
    "Sensor-Remote Site-776": 0,
    "Gateway-Remote Site-742": 2,
    "Node-Lab-964": 0,
    "Hub-Lab-252": 1,
}
FIRST_DEVICE_NAMES_WITH_LOGS = {  # the first five names of the per-name count, then more
    "Actuator-Data Center-489": 1,
    "Actuator-Factory Floor-244": 1,
    "Actuator-Factory Floor-553": 2,
    "Actuator-Lab-443": 1,
    "Actuator-Remote Site-669": 1,
}
# The first five device ids of `GROUP BY device_id` (each with one log); every other device id
# with logs sorts after the last of them.
FIRST_LOGGED_DEVICE_IDS = [
    "01435f27-458e-11e4-83be2-b63fa1283a058419",
    "076ecac8-9e7d-4b4d-91816-3a46e9ca8e591199",  # its one log is the published sample's 6th row
    "0848eae1-8c76-30aa-a392e-4fa8999364c51538",
    "0d299234-9010-46dc-b16ea-f29d1d629f6464a4",
    "102e9502-7483-0674-903c-f893f0985ab851ec",
]


def _firmware_filler(rng: random.Random) -> dict[str, list[tuple]]:
    """Devices, firmware dependencies and diagnostic logs behind every published aggregate:
    four devices depend on firmware-updater (2, 1, 0 and 0 logs), the per-name counts start
    with five Actuator devices, the per-id counts with five ids that have one log each."""
    ep = episode("q_0086702")
    published = published_first_rows(ep)
    known_ids = {line.split(" | ")[1] for line, _ in published["device_software_dependencies"]}
    known_ids |= {line.split(" | ")[1] for line, _ in published["diagnostic_request_logs"]}
    known_ids |= set(FIRST_LOGGED_DEVICE_IDS)
    known_ids -= {line.split(" | ")[0] for line, _ in published["devices"]}
    taken_names = {line.split(" | ")[2] for line, _ in published["devices"]}
    taken_names |= set(FIRMWARE_DEVICES) | set(FIRST_DEVICE_NAMES_WITH_LOGS)

    devices, deps, logs = [], [], []

    def add_device(uuid: str, name: str) -> None:
        account = rng.choice(["initech_llc", "wayne_ind", "cyberdyne", "soyuz_net", "umbrella_co"])
        devices.append((uuid, _timestamp(rng), name, f"{account}_{rng.randint(1000, 9999)}"))

    def add_logs(device_id: str, count: int) -> None:
        for _ in range(count):
            when = _timestamp(rng, 2021, 2023)
            logs.append((_log_uuid(rng), device_id, when, None, None))

    # Devices behind the published device ids: names that sort after the Actuator ones.
    for uuid in sorted(known_ids):
        while (
            name := f"{rng.choice(['Gateway', 'Hub', 'Node', 'Sensor'])}-"
            f"{rng.choice(['Lab', 'Warehouse', 'Remote Site', 'Data Center'])}-"
            f"{rng.randint(100, 999)}"
        ) in taken_names:
            pass
        taken_names.add(name)
        add_device(uuid, name)
    for name, count in {**FIRST_DEVICE_NAMES_WITH_LOGS, **FIRMWARE_DEVICES}.items():
        uuid = _device_uuid(rng)
        add_device(uuid, name)
        add_logs(uuid, count)
        if name in FIRMWARE_DEVICES:
            deps.append(
                (
                    f"{rng.randint(100000, 999999)}-{rng.randint(100000, 999999)}-{rng.randint(100000, 999999)}",
                    uuid,
                    "firmware-updater",
                    f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 50)}",
                )
            )
    for device_id in FIRST_LOGGED_DEVICE_IDS:
        if device_id != FIRST_LOGGED_DEVICE_IDS[1]:  # that one's log is published
            add_logs(device_id, 1)
    return {"devices": devices, "device_software_dependencies": deps, "diagnostic_request_logs": logs}


PLANS: dict[str, SchemaPlan] = {
    "q_0063694": SchemaPlan(first_tables=(), invented_ddl={}, indent={}, filler=_shipping_filler),
    "q_0114515": SchemaPlan(
        # Published sqlite_master rows 1-5, root pages 2-6: no index between them.
        first_tables=("rectra", "constraint_sets", "filter_criteria", "useractivitylog", "systemlogs"),
        invented_ddl={  # the page shows only their first ~40 characters
            "rectra": "CREATE TABLE rectra (id INTEGER PRIMARY KEY NOT NULL, status TEXT, "
            "amount REAL, nextRun DATETIME)",
            "constraint_sets": "CREATE TABLE constraint_sets (id INTEGER PRIMARY KEY NOT NULL, "
            "name TEXT, description TEXT)",
            "filter_criteria": "CREATE TABLE filter_criteria (id INTEGER PRIMARY KEY NOT NULL, "
            "field TEXT, operator TEXT, value TEXT)",
            "useractivitylog": "CREATE TABLE useractivitylog (id INTEGER PRIMARY KEY NOT NULL, "
            "userId INTEGER, activity TEXT, occurredAt DATETIME)",
        },
        # `(        id` and `(     id` in the published rows: a newline shown as one space,
        # then 7 or 4 spaces of indentation.
        indent={"rectra": 7, "useractivitylog": 7, "constraint_sets": 4, "filter_criteria": 4, "systemlogs": 4},
        filler=_alert_filler,
    ),
    "q_0086702": SchemaPlan(
        # Published sqlite_master rows 1-5: each table followed by its UNIQUE autoindex.
        first_tables=("user_notification_bounces", "security_audit_logs", "device_firmware"),
        invented_ddl={
            "user_notification_bounces": "CREATE TABLE user_notification_bounces (uuid TEXT NOT "
            "NULL UNIQUE, user_id TEXT NOT NULL, bounced_at "
            "TIMESTAMP NOT NULL, reason TEXT)",
            "security_audit_logs": "CREATE TABLE security_audit_logs (uuid TEXT NOT NULL UNIQUE, "
            "event TEXT NOT NULL, logged_at TIMESTAMP NOT NULL)",
            "device_firmware": "CREATE TABLE device_firmware (uuid TEXT NOT NULL UNIQUE, "
            "device_id TEXT NOT NULL, version TEXT NOT NULL, FOREIGN KEY "
            "(device_id) REFERENCES devices(uuid))",
        },
        # `(   uuid` in the published rows: a newline as one space, then 2 spaces.
        indent={"user_notification_bounces": 2, "security_audit_logs": 2, "device_firmware": 2},
        filler=_firmware_filler,
    ),
}
DEFAULT_INDENT = 4


def _placeholder_ddl(table: str) -> str:
    """A table the schema lists but no call describes: its columns are not published."""
    return f"CREATE TABLE {table} (id INTEGER PRIMARY KEY NOT NULL)"


def _published_row(table: str, index: int, line: str, clipped: bool) -> list[str]:
    if clipped:
        line += COMPLETIONS[table][index]
    return line.split(" | ")


def build_database(episode_id: str, folder: Path) -> Path:
    """Write `<folder>/<episode_id>.sqlite` for one published episode and return its path."""
    ep, plan = episode(episode_id), PLANS[episode_id]
    ddl = {t: _placeholder_ddl(t) for t in ep["tables"]}
    ddl.update(plan.invented_ddl)
    ddl.update(published_ddl(ep))
    assert set(ddl) == set(ep["tables"]), "a described table is not in the published list"
    order = list(plan.first_tables) + [t for t in ep["tables"] if t not in plan.first_tables]

    path = folder / f"{episode_id}.sqlite"
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one transaction: hundreds of CREATE TABLEs, one sync
        for table in order:
            conn.execute(multiline_ddl(ddl[table], plan.indent.get(table, DEFAULT_INDENT)))
        # Published rows as text: each column's affinity turns "41.46" into a REAL and
        # "5" into an INTEGER, as the original values were; "None" is NULL.
        for table, lines in published_first_rows(ep).items():
            rows = [_published_row(table, i, line, clipped) for i, (line, clipped) in enumerate(lines)]
            _insert(conn, table, [[None if v == "None" else v for v in r] for r in rows])
        for table, rows in plan.filler(random.Random(episode_id)).items():
            _insert(conn, table, rows)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


def _insert(conn: sqlite3.Connection, table: str, rows: list) -> None:
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        conn.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
