"""`edge-sql tables`: what `list_tables` shows the model for a question, and why."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edge_sql.commands.options import db_option
from edge_sql.tools.schema_view import list_tables_for


@click.command(name="tables")
@db_option()
@click.option("--question", required=True, help="The question (and its evidence, if any) the tables are ranked for.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object: the shown `text`, `total_tables`, `ranked`, `shown`, `folded`, and "
    "`ranking` (every table's score, how it matched and whether it was shown).",
)
def command(db_path: Path, question: str, as_json: bool) -> None:
    """Print exactly what the model's `list_tables` shows for QUESTION over DB, no model needed.

    A schema whose list fits its share of the episode is shown whole, one name per line, as the
    model was trained. A bigger one is ranked for the question (a full-text index of table
    names, column names and a few stored values, built once per schema in the model store),
    cut to the share and ended with a line saying how many tables were not listed. Use it to
    see why a table was or was not shown.
    """
    listing = list_tables_for(db_path, question)
    if as_json:
        click.echo(json.dumps(listing.to_json(), ensure_ascii=False))
    else:
        click.echo(listing.text)
