"""The loaded databases in the model store, keyed by the files' content.

`<store>/files/` holds one `<key>.sqlite` per distinct content and `index.json`, which maps the
source paths (a file, a folder, or several given together) to their database with each file's
size, modification time and SHA-256. A load asks the index first: the same size and time for
every file is a hit without reading them (the fast path); otherwise the files are hashed, and
the same content (a file touched, copied or moved) still finds its database; only new content
is loaded. A changed file's old database is removed when no other entry uses it. Loads and
index writes hold one lock (`flock`, released by the kernel however a process ends), so two
processes never load the same files at once; the index is replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import FileLoadError
from edge_sql.files import loader
from edge_sql.files.loader import LoadProgress, LoadSummary
from edge_sql.files.sources import Source, discover
from edge_sql.store.lock import file_lock

INDEX_VERSION = 1
LOADER_VERSION = "1"  # part of every content key: a change in how files load makes new databases
_log = logging.getLogger("edge_sql.files")


def files_root() -> Path:
    """`<store>/files`: the loaded databases and their index."""
    from edge_sql.store.home import store_root

    return store_root() / "files"


@dataclass(frozen=True)
class Loaded:
    """A database for some files: its path, whether it was loaded now, and what the load said."""

    path: Path
    fresh: bool
    summary: LoadSummary | None


def database_file(
    paths: str | Path | Sequence[str | Path],
    *,
    log: Callable[[str], None] | None = None,
    progress: Callable[[LoadProgress], None] | None = None,
) -> Path:
    """The SQLite database holding the data files `paths` name (a file, a folder, or several),
    loaded first if the store has none for their current content. `log` gets the one-time notes
    (renamed columns, ragged rows, ...) and a line per load (default: the `edge_sql.files`
    logger at INFO); `progress` gets a report every few seconds of a long load."""
    return load(paths, log=log, progress=progress).path


def load(
    paths: str | Path | Sequence[str | Path],
    *,
    log: Callable[[str], None] | None = None,
    progress: Callable[[LoadProgress], None] | None = None,
) -> Loaded:
    """`database_file`, also saying whether it loaded and what."""
    say = log or _log.info
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not given:
        raise FileLoadError("no file to load")
    sources = discover(given)
    key = _entry_key(given)
    root = files_root()
    with _locked(root):
        loader.remove_stale_temps(root)
        index = _read_index(root)
        entry = index.get(key)
        if entry is not None and _same_stat(entry, sources) and (root / entry["database"]).is_file():
            return Loaded(root / entry["database"], False, None)
        digests = [_digest(source) for source in sources]
        content = _content_key(sources, digests)
        target = root / f"{content}.sqlite"
        summary = None
        if not target.is_file():
            summary = loader.build(sources, target, progress=progress)
            if any(_changed(source) for source in sources):
                target.unlink(missing_ok=True)
                raise FileLoadError(
                    f"{', '.join(str(p) for p in given)} changed while it was being loaded: "
                    "try again once it is written",
                    path=Path(given[0]),
                )
            for note in summary.notes:
                say(note)
            say(_summary_line(summary, target))
        old = entry["database"] if entry is not None else None
        index[key] = _entry(sources, digests, target, summary, entry)
        if old is not None and old != target.name and not any(e["database"] == old for e in index.values()):
            (root / old).unlink(missing_ok=True)  # the changed files' previous database
        _write_index(root, index)
    return Loaded(target, summary is not None, summary)


def _summary_line(summary: LoadSummary, target: Path) -> str:
    tables = ", ".join(f"{t.name} ({t.rows:,} rows, {len(t.columns)} columns)" for t in summary.tables)
    rate = summary.rows / summary.seconds if summary.seconds > 0 else 0
    return (
        f"loaded {tables} in {summary.seconds:.1f} s ({rate:,.0f} rows/s, "
        f"{summary.bytes_read / 1e6 / max(summary.seconds, 1e-9):,.1f} MB/s) into {target}"
    )


# ---- listing and pruning -------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One indexed load: what it was loaded from, its database, and whether the files changed since."""

    sources: list[str]
    database: Path
    tables: list[str]
    rows: int
    loaded_at: str
    state: str  # "current", "changed" (a file differs: the next use reloads), "missing" (a file is gone)

    @property
    def size(self) -> int:
        try:
            return self.database.stat().st_size
        except OSError:
            return 0


def entries() -> list[CacheEntry]:
    """Every indexed load, oldest first."""
    root = files_root()
    out = []
    for entry in _read_index(root).values():
        out.append(
            CacheEntry(
                sources=[s["path"] for s in entry["sources"]],
                database=root / entry["database"],
                tables=entry.get("tables", []),
                rows=entry.get("rows", 0),
                loaded_at=entry.get("loaded_at", ""),
                state=_state(entry),
            )
        )
    return sorted(out, key=lambda e: e.loaded_at)


def prune(*, everything: bool = False) -> list[Path]:
    """Remove the databases of files that changed or are gone (`everything`: all of them), any
    database no entry uses, and left-over temporary files; returns what was removed."""
    root = files_root()
    if not root.is_dir():
        return []
    removed: list[Path] = []
    with _locked(root):
        removed += loader.remove_stale_temps(root)
        index = _read_index(root)
        keep = {key: e for key, e in index.items() if not everything and _state(e) == "current"}
        used = {e["database"] for e in keep.values()}
        for path in sorted(root.glob("*.sqlite")):
            if path.name not in used:
                path.unlink(missing_ok=True)
                removed.append(path)
        _write_index(root, keep)
    return removed


# ---- the index -----------------------------------------------------------------------------


def _entry_key(given: Sequence[str | Path]) -> str:
    return "\n".join(sorted(os.path.realpath(Path(p).expanduser()) for p in given))


def _entry(
    sources: list[Source], digests: list[str], target: Path, summary: LoadSummary | None, previous: dict | None
) -> dict[str, object]:
    entry: dict[str, object] = {
        "sources": [
            {"path": str(s.real), "size": s.size, "mtime_ns": s.mtime_ns, "sha256": d} for s, d in zip(sources, digests)
        ],
        "database": target.name,
        "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if summary is not None:
        entry.update(
            tables=[t.name for t in summary.tables],
            rows=summary.rows,
            notes=summary.notes,
            seconds=round(summary.seconds, 3),
        )
    elif previous is not None and previous.get("database") == target.name:
        entry.update({k: previous[k] for k in ("tables", "rows", "notes", "seconds", "loaded_at") if k in previous})
    return entry


def _same_stat(entry: dict, sources: list[Source]) -> bool:
    recorded = [(s["path"], s["size"], s["mtime_ns"]) for s in entry["sources"]]
    return recorded == [(str(s.real), s.size, s.mtime_ns) for s in sources]


def _state(entry: dict) -> str:
    for source in entry["sources"]:
        try:
            info = os.stat(source["path"])
        except OSError:
            return "missing"
        if (info.st_size, info.st_mtime_ns) != (source["size"], source["mtime_ns"]):
            return "changed"
    return "current"


def _changed(source: Source) -> bool:
    try:
        info = os.stat(source.real)
    except OSError:
        return True
    return (info.st_size, info.st_mtime_ns) != (source.size, source.mtime_ns)


def _digest(source: Source) -> str:
    try:
        with open(source.real, "rb") as raw:
            return hashlib.file_digest(raw, "sha256").hexdigest()
    except OSError as exc:
        raise FileLoadError(f"cannot read {source.path}: {exc.strerror}", path=source.path) from None


def _content_key(sources: list[Source], digests: list[str]) -> str:
    """The same files (by content and by the table names they make) give the same key."""
    text = json.dumps([LOADER_VERSION, [[s.format, s.table, s.in_folder, d] for s, d in zip(sources, digests)]])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _read_index(root: Path) -> dict[str, dict]:
    try:
        data = json.loads((root / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: the loads are done again
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
        return {}
    return data.get("entries", {})


def _write_index(root: Path, entries_: dict[str, dict]) -> None:
    temp = root / f".index-{os.getpid()}.json"
    temp.write_text(json.dumps({"version": INDEX_VERSION, "entries": entries_}, indent=1), encoding="utf-8")
    os.replace(temp, root / "index.json")


def _locked(root: Path) -> AbstractContextManager[None]:
    """The store's files index, one writer at a time."""
    return file_lock(root / ".lock")
