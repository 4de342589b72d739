"""The optional libraries behind some formats: one line naming the extra when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from edge_sql.errors import FileLoadError

EXTRA = "files"
INSTALL = f"pip install 'edge-sql[{EXTRA}]'"


def require(module: str, what: str) -> ModuleType:
    """`module`, imported; FileLoadError saying which extra installs it when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise FileLoadError(f"reading {what} needs the `{EXTRA}` extra: {INSTALL}") from None
