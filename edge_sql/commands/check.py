"""`edge-sql check`: the answer checks on any SQL, no model: names, values, result, confidence."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edge_sql.checks.checker import DEFAULT_MAX_ROWS, check_sql
from edge_sql.commands.options import db_option
from edge_sql.errors import EdgeSqlError
from edge_sql.tools import ReadOnlyDatabase


@click.command(name="check")
@db_option()
@click.option("--sql", required=True, help="The SQL to check (one SELECT statement).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print everything as one JSON object (`confidence`, `reasons`, `findings`, `names`, `values`).",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_ROWS,
    show_default=True,
    help="Rows fetched when the SQL is run for the result checks.",
)
def command(db_path: Path, sql: str, as_json: bool, max_rows: int) -> None:
    """Check a query of your own or a colleague's against DB, without a model.

    Lists the tables and columns it uses (as SQLite resolves them), looks up each value it
    compares with a column (`'rock'` in Genre.Name? if not, the closest stored values), runs it
    read-only for the result checks (no rows, one row of NULLs), and prints the confidence:
    `checked`, `unchecked` or `doubtful`, with the reasons.

    \b
    Exit status:
      0    checked, whatever the confidence (a doubtful answer is an answer)
      1    SQL that cannot be checked (empty, not a query, does not parse; with --json the
           JSON is printed too), or an error such as a missing database
    """
    if not sql.strip().rstrip(";").strip():
        raise EdgeSqlError("--sql is empty: give the SELECT statement to check")
    with ReadOnlyDatabase(db_path) as db:
        checks = check_sql(db, sql, max_rows=max_rows)
    unparsed = [f.message for f in checks.findings if f.code == "unparsed"]
    if as_json:
        click.echo(json.dumps(checks.to_json(), ensure_ascii=False, default=str))
    if unparsed:
        raise EdgeSqlError(f"this SQL cannot be checked: {unparsed[0]}")
    if as_json:
        return
    click.echo(checks.summary().split("; ", 1)[0])
    for finding in checks.findings:
        click.echo(f"  {finding.level}: {finding.message}")
    for value in checks.values:
        state = {True: "found", False: "not found", None: "not checked"}[value.found]
        click.echo(f"  value {value.target} {value.op} {value.literal}: {state} ({value.scope})")
