"""One pull of a model at a time: an advisory file lock per model name in the store.

A second `edge-sql pull` of the same model waits for the first (it says so), then finds the
model already there instead of racing it for the same files. The lock is `flock` on
`<store>/.locks/<name>.lock`: the kernel releases it when its holder exits, however it exits, so
a killed pull never leaves a stale lock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; pulls are not serialized
    fcntl = None


@contextmanager
def file_lock(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing); when it is taken, call
    `on_wait(holder)` with the holder's process id (or "another process") and wait."""
    if fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def model_lock(root: Path, name: str, log: Callable[[str], None] = lambda _m: None) -> Iterator[None]:
    """Hold the lock for model `name` in the store at `root`; wait (saying so) if it is taken."""

    def waiting(holder: str) -> None:
        log(f"another pull of {name} is running (process {holder}); waiting for it to finish")

    with file_lock(Path(root) / ".locks" / f"{name}.lock", waiting):
        yield
