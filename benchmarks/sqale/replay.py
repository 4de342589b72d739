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
values) is invented here, deterministically, and marked as such. What the page shows is read by
benchmarks/sqale/page.py.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.sqale.page import multiline_ddl, published_ddl, published_first_rows
from edge_sql.evaluation.sqale_published import episode

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
