"""A build cache for the fixture models, shared by pytest runs (and parallel pytest processes).

Each artefact (checkpoint folder, GGUF file, trained checkpoint) is built once into
`<cache>/<name>-<key>`, where the key hashes exactly the inputs that shape its bytes and the
keys of the artefacts it is built from: the random checkpoint depends only on its builder,
a GGUF on its checkpoint and the converter's sources (and the version it records), the
trained checkpoint on the random one and the teacher episodes' sources. So editing the
converter reconverts (seconds) without retraining (minutes), and a library upgrade alone
rebuilds nothing. A build goes to a temporary directory that is renamed into place only when
complete, under a file lock. `EDGE_SQL_FIXTURE_CACHE` moves the cache (default: the system
temp dir). Tests must treat cached files as read-only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
STALE_AFTER_S = 6 * 3600


def sources_digest(patterns: tuple[str, ...], skip: frozenset[str] | set[str] = frozenset()) -> str:
    """A hash of the files matching `patterns` (paths and bytes), relative to the repository."""
    digest = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(REPO_ROOT.glob(pattern)):
            if path.relative_to(REPO_ROOT).as_posix() in skip:
                continue
            digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def combine(*parts: str) -> str:
    """One key from several (input keys, digests, version strings)."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_base() -> Path:
    return Path(os.environ.get("EDGE_SQL_FIXTURE_CACHE") or Path(tempfile.gettempdir()) / "edge-sql-fixture")


def cached(name: str, key: str, build: Callable[[Path], None]) -> Path:
    """The directory `<name>-<key>` in the cache, built by `build(directory)` if it is not there yet."""
    base = cache_base()
    target = base / f"{name}-{key}"
    if (target / ".complete").is_file():
        os.utime(target)  # in use: not stale
        return target
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f".lock-{name}-{key}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        tmp = base / f".{name}-{key}.building-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale(base, keep=target)
    return target


def _remove_stale(base: Path, keep: Path) -> None:
    """Drop artefacts (of older sources) that nobody used for hours."""
    now = time.time()
    for entry in base.iterdir():
        if entry != keep and now - entry.stat().st_mtime > STALE_AFTER_S:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
