"""Data files as SQLite: CSV, TSV, JSON Lines, Excel and Parquet loaded once into a database in
the model store, which the agent then opens read-only like any other (docs/files.md).

    from edge_sql.files import database_file
    path = database_file("sales.csv")      # loads on first use, then the store's copy
"""

from edge_sql.files.cache import (
    CacheEntry,
    Loaded,
    database_file,
    entries,
    files_root,
    load,
    prune,
)
from edge_sql.files.loader import LoadProgress, LoadSummary
from edge_sql.files.sources import FORMATS, is_data_source

__all__ = [
    "FORMATS",
    "CacheEntry",
    "LoadProgress",
    "LoadSummary",
    "Loaded",
    "database_file",
    "entries",
    "files_root",
    "is_data_source",
    "load",
    "prune",
]
