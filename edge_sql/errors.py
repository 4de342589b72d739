"""User-facing errors: the CLI prints their message as one line and exits non-zero.

Every error a user can cause is an `EdgeSqlError` and is defined here, so callers catch one
family and read structured attributes (`path`, `spec`, ...) instead of parsing messages.
"""

from __future__ import annotations

from pathlib import Path


class EdgeSqlError(Exception):
    """An error caused by the user's input or environment, with a message fit to show them."""


class _PathError(EdgeSqlError):
    """An error about one file or folder; `path` says which (None when there is no single one)."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None


class ConversionError(_PathError):
    """A checkpoint cannot be converted or quantized (`path`: the input or output concerned)."""


class ModelFileError(_PathError):
    """A model file is missing, not a GGUF, or of an architecture edge-sql cannot run (`path`: the file)."""


class DatabaseError(_PathError):
    """A database file is missing, not SQLite, or unusable (`path`: the database file)."""
