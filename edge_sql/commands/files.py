"""`edge-sql files`: load data files into the store's SQLite databases, list them, prune them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from edge_sql.files import LoadProgress

DB_HELP = (
    "a SQLite database file, or a data file (.csv, .tsv, .jsonl, .xlsx, .parquet) or a folder of them, "
    "loaded into SQLite in the model store once (see `edge-sql files --help`)"
)


def _progress_printer() -> Callable[[LoadProgress], None]:
    """Progress lines on stderr: rewritten in place on a terminal, one a report otherwise."""
    terminal = sys.stderr.isatty()

    def show(progress: LoadProgress) -> None:
        click.echo(("\r" if terminal else "") + progress.line(), err=True, nl=not terminal)

    return show


def load_for_db(path: Path) -> Path:
    """`path` as a SQLite file: a data file or folder is loaded (or found in the store), with its
    progress and one-time notes on stderr; a database file is returned as given."""
    from edge_sql.files import is_data_source, load

    if not is_data_source(path):
        return path
    loaded = load(path, log=lambda line: click.echo(_after_progress(line), err=True), progress=_progress_printer())
    return loaded.path


def _after_progress(line: str) -> str:
    return ("\n" if sys.stderr.isatty() and line.startswith("loaded ") else "") + line


@click.group()
def command() -> None:
    """Data files as SQLite databases: CSV, TSV, JSON Lines, Excel (.xlsx) and Parquet.

    `run --db sales.csv` (and serve, the Python API, bench and eval datasets) loads such a file
    once into a SQLite database in the model store, keyed by the file's content, and the agent
    opens that read-only; the file itself is never modified. A changed file is loaded again.
    Excel and Parquet need the files extra: pip install 'edge-sql[files]'.
    """


@command.command("load")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def load_command(paths: tuple[Path, ...]) -> None:
    """Load PATHS (files and folders: each file a table, each sheet of a workbook a table) into one
    SQLite database, without asking anything, and print its path (open it with sqlite3 or
    datasette too; do not write to it). Loaded already: prints the path at once.

    \b
    Examples:
      edge-sql files load sales.csv
      edge-sql files load export/                  # every supported file in the folder
      sqlite3 "$(edge-sql files load orders.parquet customers.csv)" .tables
    """
    from edge_sql.files import load

    loaded = load(
        list(paths), log=lambda line: click.echo(_after_progress(line), err=True), progress=_progress_printer()
    )
    if not loaded.fresh:
        click.echo("loaded already (the files have not changed)", err=True)
    click.echo(str(loaded.path))


@command.command("list")
def list_command() -> None:
    """The loaded databases: their files, tables, rows, size, and whether the files changed since
    (changed: the next use loads them again; missing: a file is gone, `files prune` removes it)."""
    from edge_sql.files import entries, files_root

    found = entries()
    if not found:
        click.echo(f"no data files loaded yet ({files_root()})")
        return
    for entry in found:
        click.echo(f"{', '.join(entry.sources)}")
        click.echo(
            f"  {entry.state}; {', '.join(entry.tables) or '-'}; {entry.rows:,} rows; "
            f"{entry.size / 1e6:,.1f} MB; loaded {entry.loaded_at}"
        )
        click.echo(f"  {entry.database}")


@command.command("prune")
@click.option("--all", "everything", is_flag=True, help="Remove every loaded database, not only the stale ones.")
def prune_command(everything: bool) -> None:
    """Remove the databases of files that changed or are gone (with --all: every one), and any
    left-over temporary file of an interrupted load. The data files themselves are not touched."""
    from edge_sql.files import prune

    removed = prune(everything=everything)
    for path in removed:
        click.echo(f"removed {path}")
    click.echo(f"{len(removed)} file{'s' if len(removed) != 1 else ''} removed")
