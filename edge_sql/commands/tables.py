"""`edge-sql tables`: what `list_tables` (or `describe_table`) shows the model for a question, and why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from edge_sql.commands.options import db_option
from edge_sql.errors import EdgeSqlError
from edge_sql.tools.schema_view import list_tables_for
from edge_sql.tools.table_view import describe_table_for


@click.command(name="tables")
@db_option()
@click.option("--question", required=True, help="The question (and its evidence, if any) the tables are ranked for.")
@click.option(
    "--table",
    "table_name",
    help="Print what describe_table shows for this table instead (a too-wide table: its most related columns).",
)
@click.option(
    "--model",
    help="Count the shares in this model's tokens, as the agent on it does (a .gguf path or store name; only "
    "its vocabulary is read). Default: the default model if it is in the store, else an estimate never under "
    "Qwen3.5's count.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object: the shown `text`, `total_tables`, `ranked`, `shown`, `folded`, and "
    "`ranking` (every table's score, how it matched and whether it was shown); with --table, `columns` "
    "(every column's score and whether it was shown).",
)
def command(db_path: Path, question: str, table_name: str | None, model: str | None, as_json: bool) -> None:
    """Print exactly what the model's `list_tables` shows for QUESTION over DB, no model needed.

    A schema whose list fits its share of the episode is shown whole, one name per line, as the
    model was trained. A bigger one is ranked for the question (a full-text index of table
    names, column names and a few stored values, built once per schema in the model store),
    cut to the share and ended with a line saying how many tables were not listed. Use it to
    see why a table was or was not shown. With --table, what `describe_table` shows for that
    table: a table too wide for its share shows its key and the columns most related to the
    question first.
    """
    count, counted_with = _counter(model)
    if table_name is not None:
        described = describe_table_for(db_path, question, table_name, count_tokens=count)
        figures = {**described.to_json(), "tokens_counted_with": counted_with}
        click.echo(json.dumps(figures, ensure_ascii=False) if as_json else described.text)
        return
    listing = list_tables_for(db_path, question, count_tokens=count)
    if as_json:
        click.echo(json.dumps({**listing.to_json(), "tokens_counted_with": counted_with}, ensure_ascii=False))
    else:
        click.echo(listing.text)


def _counter(model: str | None) -> tuple[Callable[[str], int] | None, str]:
    """The model's token count (its vocabulary only, no weights) and what it is; the estimate
    (None) when no model was named and the default one is not in the store."""
    from edge_sql.store import resolve_model

    try:
        path = resolve_model(model)
    except EdgeSqlError:
        if model is not None:
            raise
        return None, "estimate"
    from edge_sql.runtime.llama.vocab_only import vocabulary_counter

    return vocabulary_counter(path), str(path)
