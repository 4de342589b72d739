"""Build one SQLite database from data files: in a temporary file beside the target, renamed
into place only once every table is complete.

Ctrl-C, SIGTERM (the CLI raises it as an exception) or any failure removes the temporary file,
so the store never holds a half-built database; a process killed outright leaves a `.tmp-*`
file that `files prune` (and the next load) removes. The format readers stream rows in batches
through `Sink`, which creates the tables (with sqlite-utils), inserts, and reports progress.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edge_sql.errors import FileLoadError
from edge_sql.files.names import Rename
from edge_sql.files.sources import Source

BATCH_ROWS = 20_000  # rows a reader hands over at a time: memory stays flat with the file's size
PROGRESS_EVERY_S = 2.0
CACHE_MB = 16  # SQLite's page cache while building: appends gain nothing from more, and RSS stays flat
READERS = {  # format -> module with `read(source, sink)`
    "csv": "edge_sql.files.delimited",
    "tsv": "edge_sql.files.delimited",
    "jsonl": "edge_sql.files.jsonlines",
    "xlsx": "edge_sql.files.workbook",
    "parquet": "edge_sql.files.parquet",
}
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class LoadProgress:
    """Where a load is: `phase` "scan" (types and shape) or "load" (rows written)."""

    file: str
    phase: str
    rows: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float

    def line(self) -> str:
        rate = self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0
        mb = self.bytes_done / 1e6
        return (
            f"{'scanning' if self.phase == 'scan' else 'loading'} {self.file}: {self.rows:,} rows, "
            f"{mb:,.0f} of {self.bytes_total / 1e6:,.0f} MB ({rate:,.0f} rows/s, "
            f"{mb / self.elapsed_s if self.elapsed_s > 0 else 0:,.1f} MB/s)"
        )


@dataclass
class TableInfo:
    """A table written: its name, columns and SQLite types, rows, and the file it came from."""

    name: str
    source: str
    columns: list[str]
    types: list[str]
    rows: int = 0


@dataclass
class LoadSummary:
    """What a build wrote, and the notes to show once (renames, ragged rows, nested values)."""

    tables: list[TableInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes_read: int = 0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


class Sink:
    """Where a reader writes: `create` a table, `insert` batches of rows, `note` a choice made."""

    def __init__(
        self, conn: sqlite3.Connection, summary: LoadSummary, progress: Callable[[LoadProgress], None] | None
    ) -> None:
        import sqlite_utils

        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self.summary = summary
        self._progress = progress
        self._started = time.perf_counter()
        self._last_report = self._started
        self._sources: dict[str, str] = {}  # table name folded -> the file that made it

    def create(
        self, source: Source, name: str, columns: list[str], types: list[str], renames: Sequence[Rename] = ()
    ) -> TableInfo:
        """A new table `name` (types: "integer", "real", "text" or "blob"); FileLoadError when
        another file or sheet already made a table of that name."""
        other = self._sources.get(name.casefold())
        if other is not None:
            raise FileLoadError(
                f"{other} and {source.path} would both be table {name!r}: rename one, or load them separately",
                path=source.path,
            )
        self._sources[name.casefold()] = str(source.path)
        self.db[name].create(dict(zip(columns, [_SQL_TYPES[t] for t in types])))  # type: ignore[union-attr]
        self.renamed(source, name, renames)
        table = TableInfo(name, str(source.path), columns, types)
        self.summary.tables.append(table)
        return table

    def renamed(self, source: Source, table: TableInfo | str, renames: Sequence[Rename]) -> None:
        """Say, once, which columns of `table` have a name other than the source's."""
        if renames:
            name = table.name if isinstance(table, TableInfo) else table
            self.note(f"{source.path.name}: table {name!r} renames columns: " + ", ".join(map(str, renames)))

    def drop(self, table: TableInfo) -> None:
        """Remove a table this load created (a reader that must write it again)."""
        self.conn.execute(f"DROP TABLE {_quoted(table.name)}")
        self.summary.tables.remove(table)
        del self._sources[table.name.casefold()]

    def insert(self, table: TableInfo, rows: Iterable[Sequence[object]], *, nullify_empty: bool = False) -> int:
        """Insert `rows` (one batch); `nullify_empty` stores an empty string as NULL, inside
        SQLite, and lets each column's type affinity turn numeric text into numbers."""
        marks = ", ".join("NULLIF(?, '')" if nullify_empty else "?" for _ in table.columns)
        sql = f"INSERT INTO {_quoted(table.name)} VALUES ({marks})"
        before = self.conn.total_changes
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise FileLoadError(f"cannot write table {table.name!r} from {table.source}: {exc}") from exc
        written = self.conn.total_changes - before
        table.rows += written
        return written

    def note(self, text: str) -> None:
        self.summary.notes.append(text)

    def report(self, source: Source, phase: str, rows: int, bytes_done: int, *, final: bool = False) -> None:
        """Progress, at most every PROGRESS_EVERY_S seconds (and once at the end of a long load)."""
        now = time.perf_counter()
        if self._progress is None or (now - self._last_report < PROGRESS_EVERY_S and not final):
            return
        if final and now - self._started < PROGRESS_EVERY_S:
            return  # a quick load needs no progress lines
        self._last_report = now
        self._progress(LoadProgress(source.path.name, phase, rows, bytes_done, source.size, now - self._started))


_SQL_TYPES = {"integer": int, "real": float, "text": str, "blob": bytes}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def build(
    sources: list[Source], target: Path, *, progress: Callable[[LoadProgress], None] | None = None
) -> LoadSummary:
    """Load `sources` into a new SQLite file at `target` (replaced atomically when done)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f"{TEMP_PREFIX}{os.getpid()}-{target.name}"
    summary = LoadSummary()
    started = time.perf_counter()
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(temp, isolation_level=None, check_same_thread=False)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            f"cache_size=-{CACHE_MB * 1024}",
            "temp_store=FILE",
            "locking_mode=EXCLUSIVE",
        ):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("BEGIN")
        sink = Sink(conn, summary, progress)
        for source in sources:
            reader = importlib.import_module(READERS[source.format])
            reader.read(source, sink)
            summary.bytes_read += source.size
        conn.execute("COMMIT")
        conn.close()
        conn = None
        _fsync(temp)
        os.chmod(temp, 0o444)  # other programs (sqlite3, datasette) may read it; nothing should write it
        os.replace(temp, target)
    except BaseException:
        if conn is not None:
            conn.close()
        temp.unlink(missing_ok=True)
        raise
    summary.seconds = time.perf_counter() - started
    return summary


def remove_stale_temps(folder: Path) -> list[Path]:
    """Temporary files of builds whose process is gone (killed before it could clean up)."""
    removed = []
    for path in folder.glob(f"{TEMP_PREFIX}*"):
        pid = path.name[len(TEMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
