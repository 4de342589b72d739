"""Write a file under a temporary name next to its target and rename it into place at the end.

The one way edge-sql writes a file that readers may open meanwhile: `atomic_output` for a
writer that streams into a path, `write_atomic` for bytes already in memory. The temporary
name carries the writer's process id (`.NAME.PID.RANDOM.part`), so two processes writing the
same target never share one, and a later run can tell a partial file of a process that no
longer exists (killed with SIGKILL, a power cut) from one still being written, and remove it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge_sql.interrupts import signals_deferred

log = logging.getLogger(__name__)


def partial_files(out: Path) -> list[Path]:
    """The temporary files of writers of `out`, alive or dead."""
    prefix = f".{out.name}."
    try:
        names = os.listdir(out.parent)
    except OSError:
        return []
    return [out.parent / n for n in names if n.startswith(prefix) and n.endswith(".part")]


def writer_pid(part: Path, out: Path) -> int | None:
    """The process id in a temporary file's name, or None (an older name without one)."""
    middle = part.name[len(out.name) + 2 : -len(".part")]
    pid, _, _ = middle.partition(".")
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_dead_partials(out: Path) -> list[Path]:
    """Remove the temporary files of writers of `out` that no longer run; return them."""
    removed = []
    for part in partial_files(out):
        pid = writer_pid(part, out)
        if pid is not None and pid != os.getpid() and not _alive(pid):
            try:
                part.unlink()
            except OSError:
                continue
            log.warning("removed %s, left by process %d, which no longer runs", part, pid)
            removed.append(part)
    return removed


@contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """Yield a temporary path beside `out`; on success it becomes `out`, on any failure (Ctrl-C,
    and SIGTERM under `edge_sql.interrupts`) it is removed.

    The final file gets ordinary permissions (0666 minus the umask), not mkstemp's 0600.
    """
    out = Path(out)
    remove_dead_partials(out)
    name = None
    try:
        with signals_deferred():  # the file exists only once `name` is set for the clean-up
            fd, name = tempfile.mkstemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".part", dir=out.parent)
            os.close(fd)
        tmp = Path(name)
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        if name is not None:
            Path(name).unlink(missing_ok=True)
        raise


def write_atomic(out: Path, data: bytes, *, durable: bool = False) -> None:
    """Make `out` hold `data`: readers see the old file or the whole new one, never a part.
    `durable` also flushes the bytes to the disk before the rename (an index that must survive
    a power cut); without it the rename alone is atomic, which a cache needs."""
    with atomic_output(Path(out)) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
