"""User-facing errors: the CLI prints their message as one line and exits non-zero."""


class EdgeSqlError(Exception):
    """An error caused by the user's input or environment, with a message fit to show them."""


class ConversionError(EdgeSqlError):
    """A checkpoint cannot be converted or quantized."""


class ModelFileError(EdgeSqlError):
    """A model file is missing, not a GGUF, or of an architecture edge-sql cannot run."""


class DatabaseError(EdgeSqlError):
    """A database file is missing, not SQLite, or unusable."""
