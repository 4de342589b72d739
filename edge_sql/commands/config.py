"""`edge-sql config`: the settings in effect for `run` or `serve`, and where each one came from."""

from __future__ import annotations

import importlib
import json

import click

from edge_sql.commands.settings import (
    ENV_PREFIX,
    SETTINGS_COMMANDS,
    chosen_profile,
    effective_settings,
    known_profiles,
    settings_files,
)


def _shown(value: object) -> str:
    """A value as a settings file would spell it (`unset` for none)."""
    if value is None or value == ():
        return "unset"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_shown(item)}" for key, item in value.items()) + " }"
    if isinstance(value, tuple | list):
        return json.dumps([str(item) for item in value])
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(str(value))


@click.command(name="config")
@click.argument("command_name", metavar="[COMMAND]", default="run", type=click.Choice(SETTINGS_COMMANDS))
@click.option("--profile", metavar="NAME", envvar=f"{ENV_PREFIX}_PROFILE", help="Show the settings with this profile.")
def command(command_name: str, profile: str | None) -> None:
    """Print the settings COMMAND (run or serve; default run) would use, one `key = value` line
    each, with where it came from: the environment (EDGE_SQL_<OPTION>), a settings file (and
    profile), or the default. Options given on the command line win over all of these.

    \b
    Settings files, the second winning over the first:
      $EDGE_SQL_HOME/config.toml   (the model store's folder)
      ./edge-sql.toml              (the working folder)
    Their keys are the options' names; a [profile.NAME] table applies with --profile NAME, or
    when a file says `profile = "NAME"` (--profile wins over it):

    \b
      threads = 2
      budget = { max_sql_chars = 200 }
      [profile.fast]
      max-rounds = 3
    """
    module = importlib.import_module(f"edge_sql.commands.{command_name}")
    rows = effective_settings(module.command, command_name, profile)
    width = min(40, max(len(row.key) + len(_shown(row.value)) for row in rows) + 4)
    for path in settings_files():
        state = "read" if path.is_file() else "none"
        click.echo(f"# {path} ({state})")
    chosen = profile or chosen_profile()
    in_effect = f"; in effect: {chosen}" + ("" if profile else " (chosen by a settings file)") if chosen else ""
    click.echo(f"# profiles: {', '.join(known_profiles())}{in_effect}")
    for row in rows:
        line = f"{row.key} = {_shown(row.value)}"
        click.echo(f"{line:<{width - 1}} # {row.source}")
