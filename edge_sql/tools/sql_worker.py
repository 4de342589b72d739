"""The SQL worker: a small process that owns the read-only SQLite connections to one file.

`ReadOnlyDatabase` (database.py) starts it as a plain script (`python -E -s -S sql_worker.py`,
so it starts in milliseconds and imports nothing but the standard library, and `policy.py` and
`printf_guard.py` beside it) and talks to it over its stdin/stdout pipes. Everything a
statement can do to a process (a compile that doubles per CTE level, one `printf` or `instr`
call that runs for minutes, a busy wait on another program's lock, a row of 60 MB blobs)
happens here, where the parent can kill it for sure; the parent then starts a fresh one.

Guards in this process: an address-space cap (RLIMIT_AS) and SQLite's `hard_heap_limit`, so a
memory bomb ends in an error or in this process's death, never the parent's; a progress
handler that ends ordinary long statements at the time limit without a restart; a busy timeout
no longer than the time limit; SIGINT ignored (Ctrl-C is the parent's to decide); and a
watchdog thread that exits when the parent is gone. A statement that may call printf() or
format() runs on a second connection to the same file, where printf_guard.py makes an over-long
result an error instead of SQLite's silent NULL (when the guard cannot run there, on the first).

Frames on both pipes: a 4-byte little-endian length, then a `marshal` payload (only None,
numbers, str, bytes, tuples and lists cross). Requests: ("open", uri, memory_limit_bytes),
("exec", sql, params, max_rows, max_cell_chars, time_limit_s). Replies: ("ok", ...)
or ("error", kind, message).
"""

from __future__ import annotations

import marshal
import os
import re
import signal
import sqlite3
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported as a module of the package (benchmarks, tests)
    from edge_sql.tools.policy import ReadOnlyAuthorizer
    from edge_sql.tools.printf_guard import GUARDED_FUNCTIONS, PrintfGuard, cannot_run
else:  # run as a script: the modules are beside it, first on sys.path
    from policy import ReadOnlyAuthorizer
    from printf_guard import GUARDED_FUNCTIONS, PrintfGuard, cannot_run

MAX_VALUE_BYTES = 64 * 1024 * 1024  # no string or blob a query builds may exceed this
_PROGRESS_EVERY_N_OPS = 1000
_BUSY_MARGIN_S = 0.05  # report "locked" a little before the parent's kill deadline
_MAY_CALL_GUARDED = re.compile("|".join(GUARDED_FUNCTIONS), re.IGNORECASE)


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, payload: Any) -> None:  # Any: marshal: anything it writes: tuples, str, bytes, numbers
    data = marshal.dumps(payload)
    data = len(data).to_bytes(4, "little") + data
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _cap_cell(value: object, max_chars: int) -> object:
    if isinstance(value, str) and len(value) > max_chars:
        return f"{value[:max_chars]}... [truncated, {len(value)} chars]"
    if isinstance(value, bytes) and len(value) > max_chars:
        return f"<blob, {len(value)} bytes>"
    return value


def _watch_parent(parent: int) -> None:
    """Exit when the parent process is gone (its pipes may be inherited by someone else)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def _vm_size_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 64 * 1024 * 1024


def _cap_memory(limit_bytes: int) -> None:
    """Bound this process's address space: what it has now plus `limit_bytes`."""
    try:
        import resource
    except ImportError:  # not a POSIX system: SQLite's heap limit still applies
        return
    cap = _vm_size_bytes() + limit_bytes
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


class Worker:
    """Two connections to one file (the second with printf guarded), one request at a time."""

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None
        self.guarded: sqlite3.Connection | None = None
        self.authorizer = ReadOnlyAuthorizer()
        self.busy_ms = -1

    def open(self, uri: str, memory_limit: int) -> tuple:
        try:
            conn = self._connect(uri, memory_limit)
            guarded = self._connect(uri, memory_limit)
        except sqlite3.Error as exc:
            return ("error", "open", str(exc))
        PrintfGuard(MAX_VALUE_BYTES).install(guarded)
        self.conn, self.guarded = conn, guarded
        return ("ok",)

    def _connect(self, uri: str, memory_limit: int) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=0, cached_statements=0
        )
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.execute(f"PRAGMA hard_heap_limit={int(memory_limit // 2)}")
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.set_authorizer(self.authorizer)
        return conn

    def _set_busy_timeout(self, time_limit_s: float) -> None:
        busy_ms = max(0, int((time_limit_s - _BUSY_MARGIN_S) * 1000))
        if busy_ms != self.busy_ms:
            for conn in (self.conn, self.guarded):
                assert conn is not None
                conn.set_authorizer(None)
                try:
                    conn.execute(f"PRAGMA busy_timeout={busy_ms}")
                finally:
                    conn.set_authorizer(self.authorizer)
            self.busy_ms = busy_ms

    def execute(
        self, sql: str, params: tuple, max_rows: int | None, max_cell_chars: int | None, time_limit_s: float
    ) -> tuple:
        if self.conn is None or self.guarded is None:
            return ("error", "closed", "the database is not open")
        self._set_busy_timeout(time_limit_s)
        deadline = time.monotonic() + time_limit_s
        try:
            request = (sql, params, max_rows, max_cell_chars, deadline)
            if _MAY_CALL_GUARDED.search(sql):
                try:
                    return self._fetch(self.guarded, *request)
                except sqlite3.Error as exc:
                    if not cannot_run(exc):
                        raise
            return self._fetch(self.conn, *request)
        except MemoryError:
            return ("error", "memory", "out of memory")
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
            message = str(exc)
            if message == "interrupted" and time.monotonic() >= deadline:
                return ("error", "timeout", message)
            return ("error", "sql", message, self.authorizer.last_denial or "")

    def _fetch(
        self,
        conn: sqlite3.Connection,
        sql: str,
        params: tuple,
        max_rows: int | None,
        max_cell_chars: int | None,
        deadline: float,
    ) -> tuple:
        self.authorizer.start_statement()
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_EVERY_N_OPS)
        cursor = None
        try:
            cursor = conn.execute(sql, params)
            columns = [d[0] for d in cursor.description] if cursor.description else []
            if max_rows is None:
                rows, truncated = cursor.fetchall(), False
            else:
                rows = cursor.fetchmany(max_rows + 1)
                truncated = len(rows) > max_rows
                rows = rows[:max_rows]
            if max_cell_chars is not None:
                rows = [tuple(_cap_cell(v, max_cell_chars) for v in row) for row in rows]
            return ("ok", columns, rows, truncated)
        finally:
            if cursor is not None:
                try:
                    cursor.close()
                except sqlite3.Error:
                    pass
            conn.set_progress_handler(None, 0)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    rfd, wfd = sys.stdin.fileno(), sys.stdout.fileno()
    worker = Worker()
    while True:
        header = _read_exact(rfd, 4)
        if header is None:
            return
        body = _read_exact(rfd, int.from_bytes(header, "little"))
        if body is None:
            return
        request = marshal.loads(body)
        try:
            if request[0] == "open":
                _cap_memory(request[2])
                reply = worker.open(request[1], request[2])
            else:
                reply = worker.execute(*request[1:])
            _send(wfd, reply)
        except MemoryError:
            reply = None  # free what the failed reply held before answering
            _send(wfd, ("error", "memory", "out of memory"))


if __name__ == "__main__":
    main()
