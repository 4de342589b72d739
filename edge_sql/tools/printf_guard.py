"""printf() and format() that fail with "string or blob too big" where the built-ins give NULL.

Every SQLite function that builds a value over the length limit raises SQLITE_TOOBIG, except
printf() and its alias format(): their text builder drops an over-long result and returns NULL,
so `printf('%.*c', 100000000, 'x')` would read as an ordinary NULL. The replacements here run
SQLite's own printf on a private in-memory connection with the same limit and turn that NULL
into the error (an OverflowError in a Python function is SQLITE_TOOBIG, as Python's sqlite3
reports it). The built-in also returns NULL for some empty results (`printf('')`, not
`printf('%s', '')`); one literal character in front of the format tells those from an overflow
in the same call, and is taken off again (an empty result asks the built-in once more, which
costs nothing).

Only the SQL worker uses this (it imports nothing but the standard library). A Python function
cannot stand where SQLite allows only built-ins (a view using printf under trusted_schema=OFF)
or read a text argument that is not UTF-8; `cannot_run` recognises those errors so the worker
runs such a statement on a connection with the built-ins instead.
"""

from __future__ import annotations

import sqlite3

GUARDED_FUNCTIONS = ("printf", "format")
_CANNOT_RUN = tuple(f"unsafe use of {name}()" for name in GUARDED_FUNCTIONS) + (
    "user-defined function raised exception",
)


class PrintfGuard:
    """The replacement printf()/format() over one private connection; `install` puts it on one."""

    def __init__(self, max_value_bytes: int) -> None:
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        # one byte more than the database's limit: room for the marker in front
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes + 1)
        self._statements: dict[int, tuple[str, str]] = {}

    def install(self, conn: sqlite3.Connection) -> None:
        for name in GUARDED_FUNCTIONS:
            conn.create_function(name, -1, self, deterministic=True)

    def __call__(self, *args: object) -> str | None:
        if not args or args[0] is None:
            return None  # as the built-in: no format, no text
        statements = self._statements.get(len(args))
        if statements is None:
            rest = "".join(f", ?{i}" for i in range(2, len(args) + 1))
            statements = (f"SELECT printf('x' || ?1{rest})", f"SELECT printf(?1{rest})")
            self._statements[len(args)] = statements
        marked_sql, plain_sql = statements
        try:
            marked = self._conn.execute(marked_sql, args).fetchone()[0]
        except sqlite3.DataError:  # the result itself is over the limit, by a character or so
            marked = None
        if marked is None:
            raise OverflowError("string or blob too big")
        if len(marked) == 1:  # empty: NULL or '', as the built-in has it
            return self._conn.execute(plain_sql, args).fetchone()[0]
        return marked[1:]


def cannot_run(error: sqlite3.Error) -> bool:
    """Whether `error` says the guard could not stand in for the built-ins in this statement."""
    return str(error) in _CANNOT_RUN
