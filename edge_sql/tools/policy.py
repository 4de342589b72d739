"""The read-only policy: an SQLite authorizer that allows reading and nothing else.

It is an allowlist: SELECT, reading columns, calling functions (except extension loading),
recursive CTEs, the pragmas that only read the schema or the file's header, and the read-only
table-valued functions. Everything else (INSERT, UPDATE, DELETE, CREATE/DROP/ALTER,
ATTACH/DETACH, VACUUM, transactions, savepoints, ANALYZE, REINDEX, every other pragma) is
denied, and the denial is remembered so the error can say what was refused.

SQLite's parser hands the authorizer a pragma's name and argument with any schema prefix and
quoting already taken off, so this list is the one place that decides which pragmas run.
"""

from __future__ import annotations

import sqlite3

# The pragmas that only read the schema; their argument is a table or index name, never a value.
READ_ONLY_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "foreign_key_list", "index_list", "index_info", "index_xinfo"}
)
# Fields of the database file's header that a pragma reads when given no value (given one, it
# would write them). Not here, even as queries: the connection's settings (query_only,
# busy_timeout, cache_size, journal_mode, ...) and database_list, whose answers describe this
# sandbox rather than the database (they differ from what `sqlite3` shows for the same file),
# and the checks (integrity_check, quick_check, foreign_key_check), which read every page or row.
HEADER_PRAGMAS = frozenset(
    {
        "application_id",
        "auto_vacuum",
        "encoding",
        "freelist_count",
        "page_count",
        "page_size",
        "schema_version",
        "user_version",
    }
)
DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})
# Table-valued functions a SELECT may read: they expose only this database's schema or their
# own JSON argument. Preparing one asks for an UPDATE of sqlite_master (SQLite registers the
# eponymous virtual table); that is allowed in a statement that began as a read, and reading any
# other `pragma_*` function or the tables in DENIED_TABLES is refused.
READ_ONLY_TABLE_FUNCTIONS = frozenset(
    {
        "pragma_table_info",
        "pragma_table_xinfo",
        "pragma_index_list",
        "pragma_index_info",
        "pragma_foreign_key_list",
        "json_each",
        "json_tree",
    }
)
# Other eponymous virtual tables that may be compiled in: never readable.
DENIED_TABLES = frozenset(
    {
        "sqlite_dbpage",
        "dbstat",
        "sqlite_stmt",
        "bytecode",
        "tables_used",
        "fts3tokenize",
        "zipfile",
        "fsdir",
        "sqlite_dbdata",
        "sqlite_dbptr",
    }
)

_SELECT = sqlite3.SQLITE_SELECT
_READ = sqlite3.SQLITE_READ
_FUNCTION = sqlite3.SQLITE_FUNCTION
_PRAGMA = sqlite3.SQLITE_PRAGMA
_RECURSIVE = getattr(sqlite3, "SQLITE_RECURSIVE", 33)

# Names for the denial message: action code -> what the statement tried to do.
_ACTION_NAMES = {
    getattr(sqlite3, name): label
    for name, label in {
        "SQLITE_INSERT": "INSERT",
        "SQLITE_UPDATE": "UPDATE",
        "SQLITE_DELETE": "DELETE",
        "SQLITE_ATTACH": "ATTACH (or VACUUM)",
        "SQLITE_DETACH": "DETACH",
        "SQLITE_TRANSACTION": "a transaction",
        "SQLITE_SAVEPOINT": "a savepoint",
        "SQLITE_ANALYZE": "ANALYZE",
        "SQLITE_REINDEX": "REINDEX",
        "SQLITE_ALTER_TABLE": "ALTER TABLE",
        "SQLITE_CREATE_TABLE": "CREATE TABLE",
        "SQLITE_CREATE_INDEX": "CREATE INDEX",
        "SQLITE_CREATE_VIEW": "CREATE VIEW",
        "SQLITE_CREATE_TRIGGER": "CREATE TRIGGER",
        "SQLITE_CREATE_TEMP_TABLE": "CREATE TEMP TABLE",
        "SQLITE_CREATE_TEMP_INDEX": "CREATE TEMP INDEX",
        "SQLITE_CREATE_TEMP_VIEW": "CREATE TEMP VIEW",
        "SQLITE_CREATE_TEMP_TRIGGER": "CREATE TEMP TRIGGER",
        "SQLITE_CREATE_VTABLE": "CREATE VIRTUAL TABLE",
        "SQLITE_DROP_TABLE": "DROP TABLE",
        "SQLITE_DROP_INDEX": "DROP INDEX",
        "SQLITE_DROP_VIEW": "DROP VIEW",
        "SQLITE_DROP_TRIGGER": "DROP TRIGGER",
        "SQLITE_DROP_TEMP_TABLE": "DROP TEMP TABLE",
        "SQLITE_DROP_TEMP_INDEX": "DROP TEMP INDEX",
        "SQLITE_DROP_TEMP_VIEW": "DROP TEMP VIEW",
        "SQLITE_DROP_TEMP_TRIGGER": "DROP TEMP TRIGGER",
        "SQLITE_DROP_VTABLE": "DROP VIRTUAL TABLE",
    }.items()
    if hasattr(sqlite3, name)
}


_ROW_WRITES = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})


class ReadOnlyAuthorizer:
    """Callable for `Connection.set_authorizer`; `last_denial` says what it last refused."""

    def __init__(self) -> None:
        self.last_denial: str | None = None
        self._first_action: int | None = None

    def start_statement(self) -> None:
        """Forget the previous statement (call before preparing each one)."""
        self.last_denial = None
        self._first_action = None

    def __call__(
        self,
        action: int,
        arg1: str | None,
        arg2: str | None,
        db_name: str | None,
        source: str | None,
    ) -> int:
        if self._first_action is None:
            self._first_action = action
        if action == _READ:
            table = (arg1 or "").lower()
            if table in DENIED_TABLES or (table.startswith("pragma_") and table not in READ_ONLY_TABLE_FUNCTIONS):
                return self._deny(f"reading {arg1}")
        if action in (_SELECT, _READ, _RECURSIVE):
            return sqlite3.SQLITE_OK
        # A table-valued function being set up inside a read (see READ_ONLY_TABLE_FUNCTIONS);
        # a real UPDATE statement's first action is the UPDATE itself.
        if (
            action == sqlite3.SQLITE_UPDATE
            and (arg1 or "").lower() == "sqlite_master"
            and self._first_action == _SELECT
            and db_name == "main"
        ):
            return sqlite3.SQLITE_OK
        if action == _FUNCTION:
            if (arg2 or "").lower() in DENIED_FUNCTIONS:
                return self._deny(f"the function {arg2}()")
            return sqlite3.SQLITE_OK
        if action == _PRAGMA:
            name = (arg1 or "").lower()
            if name in READ_ONLY_PRAGMAS or (name in HEADER_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
            setting = f" = {arg2}" if arg2 is not None else ""
            return self._deny(f"PRAGMA {arg1}{setting}")
        label = _ACTION_NAMES.get(action, f"this statement (SQLite action {action})")
        if action in _ROW_WRITES:
            schema_table = (arg1 or "").lower() in _SCHEMA_TABLES
            label = "changing the schema" if schema_table else f"{label} on {arg1}"
        return self._deny(label)

    def _deny(self, what: str) -> int:
        self.last_denial = what
        return sqlite3.SQLITE_DENY
