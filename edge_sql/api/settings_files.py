"""The settings files, read the same way for the command line and the Python API:
`edge-sql.toml` in the working folder, `$EDGE_SQL_HOME/config.toml`, named profiles
(`[profile.NAME]`, a packaged `small`) and the `EDGE_SQL_<OPTION>` names. A file's keys are the
command line's option names (`gpu-layers = 0`, `budget = {max_sql_chars = 80}`);
`commands/settings.py` hands them to click, `api/config.py` to `Agent.from_config`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sql.errors import SettingsError

ENV_PREFIX = "EDGE_SQL"
LOCAL_FILE = "edge-sql.toml"  # in the working folder: wins over the home file
HOME_FILE = "config.toml"  # in the model store's folder ($EDGE_SQL_HOME)
PACKAGED_PROFILES = Path(__file__).resolve().parents[1] / "data" / "profiles.toml"
PROFILE_TABLE = "profile"


@dataclass(frozen=True)
class Setting:
    """A value from a settings file and where it came from (a file, and the profile)."""

    value: object
    source: str


def settings_files() -> list[Path]:
    """The files read, lowest precedence first: the home file, then the working folder's."""
    from edge_sql.store.home import store_root

    return [store_root() / HOME_FILE, Path.cwd() / LOCAL_FILE]


def env_name(key: str) -> str:
    """`gpu-layers` -> `EDGE_SQL_GPU_LAYERS`."""
    return f"{ENV_PREFIX}_{key.upper().replace('-', '_')}"


def read_toml(path: Path) -> dict[str, Any]:  # Any: toml
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML ({exc})", path=path) from None


def _key(text: str) -> str:
    return text.replace("_", "-")


def load_settings(profile: str | None, *, known_keys: Collection[str] | None = None) -> dict[str, Setting]:
    """The file settings by option key: the files' plain keys (home, then the working folder),
    then `profile`'s tables on top (packaged, home, working folder); without `profile`, the one a
    file chooses (`profile = "small"`, the working folder's over the home's). SettingsError for a
    profile that no file defines, a profile table that is not a table, or (given `known_keys`) a
    key in any profile that is not one of them (every profile is checked, not only the one in use)."""
    files = [(path, read_toml(path)) for path in settings_files() if path.is_file()]
    settings: dict[str, Setting] = {}
    for path, data in files:
        for name, table in profiles_of(str(path), data).items():  # checked even when not in use
            if isinstance(table, dict) and known_keys is not None:
                _check_keys(table, f"{path} [{PROFILE_TABLE}.{name}]", known_keys)
        for key, value in data.items():
            if key != PROFILE_TABLE:
                settings[_key(key)] = Setting(value, str(path))
    chooser = ""
    if profile is None and (chosen := chosen_profile()) is not None:  # --profile (EDGE_SQL_PROFILE) wins over it
        profile, chooser = chosen, f"{_choices()[-1][1]}: profile = {chosen!r}: "
    if profile is None:
        return settings
    found = False
    for where, data in [("packaged", read_toml(PACKAGED_PROFILES)), *((str(path), data) for path, data in files)]:
        table = profiles_of(where, data).get(profile)
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
        if path.is_file() and isinstance(name := read_toml(path).get(PROFILE_TABLE), str)
    ]


def chosen_profile() -> str | None:
    """The profile a settings file chooses (`profile = "small"`; the working folder's over the
    home's), None when none does."""
    choices = _choices()
    return choices[-1][0] if choices else None


def _check_keys(table: dict[str, Any], where: str, known_keys: Collection[str]) -> None:  # Any: toml
    """SettingsError naming `where` for a key that is no option of run or serve."""
    unknown = sorted(set(map(_key, table)) - set(known_keys))
    if unknown:
        raise SettingsError(f"{where}: unknown setting {unknown[0]!r} (settings are the options of run and serve)")


def known_profiles() -> list[str]:
    """Every profile name the packaged file and the settings files define."""
    names = set(profiles_of("packaged", read_toml(PACKAGED_PROFILES)))
    for path in settings_files():
        if path.is_file():
            names |= set(profiles_of(str(path), read_toml(path)))
    return sorted(names)


def profiles_of(where: str, data: dict[str, Any]) -> dict[str, Any]:  # Any: toml
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
