"""Which file SQLite opens, and how, so that the user's folder never changes.

Every check runs on the symlink-resolved path (side files such as `-wal` live beside the
target, not beside the link). Only regular files are opened, and the header is read with
`O_NONBLOCK`, so a FIFO or device never blocks. A rollback-journal database is opened in place
with `mode=ro` (that creates nothing). A WAL database is different: opening it in place
creates `-shm` even read-only, so one whose `-wal` is absent or empty is opened `immutable=1`
(nothing to recover, nothing created), and one with a non-empty `-wal` is copied with its log
into a private temporary folder, up to a size limit, and the copy is opened.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from edge_sql.errors import DatabaseError

SQLITE_HEADER = b"SQLite format 3\x00"
MAX_PATH_CHARS = 4096
DEFAULT_WAL_COPY_LIMIT_MB = 2048
_COPY_ATTEMPTS = 3


@dataclass(frozen=True)
class OpenTarget:
    """What the SQL worker opens: a URI, the resolved user file, and our private copy folder."""

    uri: str
    real_path: Path
    copy_dir: Path | None


def sqlite_uri(path: Path, *, immutable: bool) -> str:
    posix = path.as_posix()
    if not posix.startswith("/"):
        posix = "/" + posix  # Windows drive paths: file:/C:/...
    uri = "file:" + quote(posix, safe="/") + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


def journal_path(real_path: Path) -> Path:
    return Path(str(real_path) + "-journal")


def prepare(path: Path, *, wal_copy_limit_mb: float = DEFAULT_WAL_COPY_LIMIT_MB) -> OpenTarget:
    """Check `path` and decide how to open it. Raises `DatabaseError` with a one-line message."""
    real = _resolved(path)
    header = _read_header(path, real)
    in_wal_mode = len(header) >= 20 and header[18] == 2 and header[19] == 2
    if not in_wal_mode:
        return OpenTarget(sqlite_uri(real, immutable=False), real, None)
    wal = Path(str(real) + "-wal")
    wal_size = _size_or_zero(wal)
    if wal_size == 0:
        return OpenTarget(sqlite_uri(real, immutable=True), real, None)
    copy_dir = _copy_with_log(path, real, wal, wal_copy_limit_mb)
    return OpenTarget(sqlite_uri(copy_dir / "db.sqlite", immutable=False), real, copy_dir)


def _resolved(path: Path) -> Path:
    text = str(path)
    if len(text) > MAX_PATH_CHARS:
        raise DatabaseError(
            f"the database path is too long ({len(text)} characters; the limit is {MAX_PATH_CHARS}): {text[:60]}..."
        )
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise _path_error(path, exc) from None


def _path_error(path: Path, exc: OSError) -> DatabaseError:
    if exc.errno == errno.ENOENT:
        return DatabaseError(f"database file not found: {path}")
    if exc.errno == errno.ENAMETOOLONG:
        return DatabaseError(
            f"the database path is too long for this system (a part of it exceeds the "
            f"allowed length): {str(path)[:60]}..."
        )
    return DatabaseError(f"cannot read database file {path}: {exc.strerror}")


def _read_header(path: Path, real: Path) -> bytes:
    """The first 100 bytes, after making sure `real` is a regular file (never blocks)."""
    try:
        info = os.stat(real)
    except OSError as exc:
        raise _path_error(path, exc) from None
    _require_regular(path, info.st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _path_error(path, exc) from None
    try:
        _require_regular(path, os.fstat(fd).st_mode)  # it may have been swapped since the stat
        header = os.read(fd, 100)
    except OSError as exc:
        raise _path_error(path, exc) from None
    finally:
        os.close(fd)
    if not header:
        raise DatabaseError(f"{path} is an empty file (0 bytes), not a SQLite database")
    if not header.startswith(SQLITE_HEADER):
        raise DatabaseError(f"{path} is not a SQLite database (it lacks the SQLite file header)")
    return header


def _require_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise DatabaseError(f"{path} is a directory, not a SQLite database file")
    if stat.S_ISFIFO(mode):
        raise DatabaseError(f"{path} is a named pipe (FIFO), not a SQLite database file")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise DatabaseError(f"{path} is a device, not a SQLite database file")
    if stat.S_ISSOCK(mode):
        raise DatabaseError(f"{path} is a socket, not a SQLite database file")
    raise DatabaseError(f"{path} is not a regular file, not a SQLite database file")


def _size_or_zero(path: Path) -> int:
    try:
        info = os.stat(path)
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def _copy_with_log(path: Path, real: Path, wal: Path, limit_mb: float) -> Path:
    """Copy the database and its -wal into a new private folder; retried if they change."""
    copy_dir = Path(tempfile.mkdtemp(prefix="edge-sql-wal-"))
    try:
        for _ in range(_COPY_ATTEMPTS):
            before = _signature(real, wal)
            total = before[0][0] + before[1][0]
            if total > limit_mb * 1024 * 1024:
                raise DatabaseError(
                    f"{path} is a WAL-mode database with changes not yet written into it "
                    f"({wal.name}); edge-sql reads such a database from a private copy, and it "
                    f"is {total / 1e6:.0f} MB, over the {limit_mb:g} MB copy limit. Close the "
                    f'programs using it, or run `sqlite3 {path} "PRAGMA '
                    f'wal_checkpoint(TRUNCATE)"`, then try again'
                )
            shutil.copyfile(real, copy_dir / "db.sqlite")
            shutil.copyfile(wal, copy_dir / "db.sqlite-wal")
            if _signature(real, wal) == before:
                return copy_dir
        raise DatabaseError(
            f"{path} kept changing while edge-sql copied it (a program is writing to it); "
            f"try again when that program has finished"
        )
    except OSError as exc:
        shutil.rmtree(copy_dir, ignore_errors=True)
        raise DatabaseError(f"cannot copy the WAL database {path}: {exc.strerror}") from None
    except BaseException:
        shutil.rmtree(copy_dir, ignore_errors=True)
        raise


def _signature(*paths: Path) -> tuple[tuple[int, int], ...]:
    out = []
    for path in paths:
        info = os.stat(path)
        out.append((info.st_size, info.st_mtime_ns))
    return tuple(out)
