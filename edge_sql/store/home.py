"""Where the model store lives on disk: `EDGE_SQL_HOME`, else the platform's user data folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HOME_ENV = "EDGE_SQL_HOME"
APP_NAME = "edge-sql"


def user_data_dir() -> Path:
    """The platform's per-user data folder for edge-sql (no platformdirs dependency needed)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / APP_NAME
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / APP_NAME


def store_root() -> Path:
    """The store's root folder: `$EDGE_SQL_HOME` when set, otherwise `user_data_dir()`."""
    configured = os.environ.get(HOME_ENV)
    return Path(configured).expanduser() if configured else user_data_dir()
