"""`Agent.from_config`: the command line's settings (files, profiles, `EDGE_SQL_<OPTION>`) as an
Agent's keyword arguments, under the command line's names, so an app and `edge-sql run` on the
same machine load the same model with the same bounds.

The order is the command line's with the app's keywords in the place of the options typed:
explicit keywords, then the environment, then the files (with the profile on top), then the
Agent's defaults. A key that is another command's option (`db`, `port`, ...) is left to it; a key
no command knows is a SettingsError, as on the command line.
"""

from __future__ import annotations

import os

from edge_sql.agent.budget import Budget, parse_budget_items
from edge_sql.api.agent_settings import BUDGET_SHORTCUTS, AgentSettings, make_settings, setting_options
from edge_sql.api.settings_files import ENV_PREFIX, Setting, env_name, load_settings
from edge_sql.errors import SettingsError

BUDGET_KEY = "budget"
# the options of `run` and `serve` that are not the Agent's (a database, a question, the server's
# address and limits): read by those commands, passed over here
OTHER_KEYS = frozenset(
    {
        *("db", "question", "evidence", "fresh", "json", "trace", "abstain-below", "chart"),
        *("mcp", "http", "host", "port", "open", "token", "teach-token", "allow-host", "cors-origin", "quiet"),
        *("queue-timeout", "max-body", "max-question", "max-rows"),
    }
)


def known_keys() -> frozenset[str]:
    """Every key a settings file may hold: the options of `run` and `serve`."""
    return frozenset({*setting_options(), *BUDGET_SHORTCUTS, BUDGET_KEY, *OTHER_KEYS})


def _from_file(key: str, setting: Setting) -> object:
    """A file's value for `key` as the Agent keyword takes it (checked against the key's kind)."""
    value, field = setting.value, setting_options()[key]
    if field.type in ("bool", bool):
        if not isinstance(value, bool):
            raise SettingsError(f"{setting.source}: {key} = {value!r}: not a boolean")
        return not value if field.metadata["invert"] else value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SettingsError(f"{setting.source}: {key} = {value!r}: not a number or a string")
    try:
        return field.metadata["read"](str(value))
    except ValueError as exc:
        raise SettingsError(f"{setting.source}: {key} = {value!r}: {exc}") from None


def _budget_items(key: str, setting: Setting) -> list[str]:
    """A budget setting as FIELD=N items (`budget`: a table, or `FIELD=N ...` from the environment)."""
    value = setting.value
    if key != BUDGET_KEY:
        return [f"{field}={value}" for field in BUDGET_SHORTCUTS[key]]
    if isinstance(value, dict):
        return [f"{field}={item}" for field, item in value.items()]
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(item) for item in value]
    raise SettingsError(f"{setting.source}: budget = {value!r}: a table of Budget fields")


def _in_effect(profile: str | None) -> dict[str, Setting]:
    """Every setting by key: the files' (with `profile`), each overridden by its `EDGE_SQL_` variable."""
    known = known_keys()
    settings = load_settings(profile, known_keys=known)
    unknown = sorted(set(settings) - known)
    if unknown:
        first = settings[unknown[0]]
        raise SettingsError(
            f"{first.source}: unknown setting {unknown[0]!r} (settings are the options of run and serve)"
        )
    for key in (*setting_options(), *BUDGET_SHORTCUTS, BUDGET_KEY):
        name = env_name(key)
        if name in os.environ:
            settings[key] = Setting(os.environ[name], f"environment {name}")
    return settings


def agent_settings(profile: str | None = None) -> dict[str, Setting]:
    """The Agent keywords the settings give, each with where it came from: `profile` (default
    `$EDGE_SQL_PROFILE`) on the files, the environment on top. SettingsError names the file or
    variable of a bad value."""
    profile = profile if profile is not None else os.environ.get(f"{ENV_PREFIX}_PROFILE") or None
    settings, fields = _in_effect(profile), setting_options()
    found: dict[str, Setting] = {}
    for key, setting in settings.items():
        if key not in fields:
            continue
        if setting.source.startswith("environment "):
            try:
                value = fields[key].metadata["read"](str(setting.value))
            except ValueError as exc:
                raise SettingsError(f"{setting.source}: {setting.value!r}: {exc}") from None
        else:
            value = _from_file(key, setting)
        found[fields[key].name] = Setting(value, setting.source)
    budget = [key for key in (*BUDGET_SHORTCUTS, BUDGET_KEY) if key in settings]  # `budget`'s fields win
    if budget:
        sources = "; ".join(dict.fromkeys(settings[key].source for key in budget))
        items = [item for key in budget for item in _budget_items(key, settings[key])]
        try:
            found["budget"] = Setting(Budget(**parse_budget_items(items)), sources)
        except ValueError as exc:
            raise SettingsError(f"{sources}: {exc}") from None
    return found


def settings_in_effect(profile: str | None = None, **explicit: object) -> AgentSettings:
    """The one `AgentSettings` of `Agent.from_config`: the settings (`agent_settings`) with
    `explicit` (field names: the app's keywords) on top."""
    found = {name: setting.value for name, setting in agent_settings(profile).items()}
    return make_settings(**{"pull_if_missing": False, **found, **explicit})
