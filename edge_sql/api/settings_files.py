"""The settings files, read the same way for the command line and the Python API:
`edge-sql.toml` in the working folder, `$EDGE_SQL_HOME/config.toml`, named profiles
(`[profile.NAME]`, a packaged `small`) and the `EDGE_SQL_<OPTION>` names. A file's keys are the
command line's option names (`gpu-layers = 0`, `budget = {max_sql_chars = 80}`);
`commands/settings.py` hands them to click, `api/config.py` to `Agent.from_config`.
"""

from __future__ import annotations

import tomllib
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


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML ({exc})", path=path) from None


def _key(text: str) -> str:
    return text.replace("_", "-")


def load_settings(profile: str | None) -> dict[str, Setting]:
    """The file settings by option key: the files' plain keys (home, then the working folder),
    then `profile`'s tables on top (packaged, home, working folder). SettingsError for a profile
    that no file defines, or a profile table that is not a table."""
    files = [(path, read_toml(path)) for path in settings_files() if path.is_file()]
    settings: dict[str, Setting] = {}
    for path, data in files:
        profiles_of(str(path), data)  # checked even when no profile is asked for
        for key, value in data.items():
            if key != PROFILE_TABLE:
                settings[_key(key)] = Setting(value, str(path))
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
        raise SettingsError(f"no profile {profile!r}; known: {', '.join(known_profiles()) or 'none'}")
    return settings


def known_profiles() -> list[str]:
    """Every profile name the packaged file and the settings files define."""
    names = set(profiles_of("packaged", read_toml(PACKAGED_PROFILES)))
    for path in settings_files():
        if path.is_file():
            names |= set(profiles_of(str(path), read_toml(path)))
    return sorted(names)


def profiles_of(where: str, data: dict[str, Any]) -> dict[str, Any]:
    """A file's `[profile.NAME]` tables by name (`profile = "x"` is not one: SettingsError)."""
    profiles = data.get(PROFILE_TABLE, {})
    if not isinstance(profiles, dict):
        raise SettingsError(
            f"{where}: '{PROFILE_TABLE}' holds tables, [{PROFILE_TABLE}.NAME]; choose one with --profile NAME"
        )
    return profiles
