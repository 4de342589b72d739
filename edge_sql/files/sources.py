"""Which files a path names, what format each is in, and the checks that need no parsing.

Only regular files are read, decided by `stat` before anything opens them: a FIFO or a device
named `sales.csv` is refused without blocking on it. A folder contributes each supported file
directly inside it (hidden files and subfolders are left out), each one table, or one per
sheet for a workbook; two that would make the same table are refused before any loading.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import FileLoadError
from edge_sql.files.names import table_name

# suffix -> format; the readers live in edge_sql/files/<format module>
FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".parquet": "parquet",
}
SUFFIXES_TEXT = ", ".join(sorted({s for s in FORMATS}))


@dataclass(frozen=True)
class Source:
    """One data file: `path` as the user named it, `real` resolved, its format, and the table
    name its file name gives (a workbook's tables are its sheets, named after them)."""

    path: Path
    real: Path
    format: str
    table: str
    size: int
    mtime_ns: int
    in_folder: bool = False


def is_data_source(path: str | Path) -> bool:
    """True for a path edge-sql loads into SQLite first: a supported data file or a folder."""
    path = Path(path).expanduser()
    return path.suffix.lower() in FORMATS or os.path.isdir(path)  # False, not an error, for a name too long


def discover(paths: Sequence[str | Path]) -> list[Source]:
    """The data files `paths` name (files or folders), checked; FileLoadError otherwise."""
    sources: list[Source] = []
    for given in paths:
        path = Path(given).expanduser()
        info = _stat(path)
        if stat.S_ISDIR(info.st_mode):
            sources += _folder(path)
        else:
            _require_regular(path, info.st_mode)
            if path.suffix.lower() not in FORMATS:
                raise FileLoadError(f"{path} is not a file edge-sql can load (supported: {SUFFIXES_TEXT})", path=path)
            sources.append(_source(path, info, in_folder=False))
    _check_unique(sources)
    return sources


def _folder(folder: Path) -> list[Source]:
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.suffix.lower() not in FORMATS:
            continue
        info = _stat(entry)
        if stat.S_ISDIR(info.st_mode):
            continue
        _require_regular(entry, info.st_mode)
        found.append(_source(entry, info, in_folder=True))
    if not found:
        raise FileLoadError(
            f"{folder} is a folder with no file edge-sql can load (give a SQLite database "
            f"file, or a folder of {SUFFIXES_TEXT} files)",
            path=folder,
        )
    return found


def _source(path: Path, info: os.stat_result, *, in_folder: bool) -> Source:
    return Source(
        path=path,
        real=Path(os.path.realpath(path)),
        format=FORMATS[path.suffix.lower()],
        table=table_name(path.stem),
        size=info.st_size,
        mtime_ns=info.st_mtime_ns,
        in_folder=in_folder,
    )


def _check_unique(sources: list[Source]) -> None:
    """Two files that would make the same table (SQLite ignores case in names) are refused; a
    workbook's sheet names are checked when it is read."""
    by_name: dict[str, Source] = {}
    for source in sources:
        if source.format == "xlsx":
            continue
        other = by_name.get(source.table.casefold())
        if other is not None:
            if other.real == source.real:
                raise FileLoadError(f"{source.path} is named twice", path=source.path)
            raise FileLoadError(
                f"{other.path} and {source.path} would both be table {source.table!r}: "
                "rename one, or load them separately",
                path=source.path,
            )
        by_name[source.table.casefold()] = source


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise FileLoadError(f"file not found: {path}", path=path) from None
    except OSError as exc:
        raise FileLoadError(f"cannot read {path}: {exc.strerror}", path=path) from None


def _require_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = (
        "a named pipe (FIFO)"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise FileLoadError(f"{path} is {kind}: edge-sql loads regular files only", path=path)
